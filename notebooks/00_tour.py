# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A tour of jaxlab
#
# Load the shipped byte-level corpus, build the baseline Transformer, train it for a few steps with
# the shared loop (checkpoints, metrics, resume), and plot the validation curve. Runs on a laptop
# CPU in about a minute; in Colab, the first cell installs jaxlab.

# %%
# Colab: install jaxlab (elsewhere, from a clone: pip install -e ".[dev]")
import subprocess
import sys

EXTRAS = ""
if "google.colab" in sys.modules:
    spec = f"jaxlab{EXTRAS} @ git+https://github.com/jaxlab/jaxlab"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", spec], check=True)
from jaxlab.core.environment import env_flag

SMOKE = env_flag("JAXLAB_SMOKE")  # CI runs every notebook at tiny size (1/true/yes/on)

# %% [markdown]
# ## The data: the King James Bible as bytes, split by book

# %%
import tempfile

import numpy as np

from jaxlab.data.corpus import load_documents
from jaxlab.data.text import BOS, VOCAB_SIZE, pack_documents, unigram_entropy_bits

train_docs = load_documents("kjv", "train")
val_docs = load_documents("kjv", "validation")
print(f"{len(train_docs)} train books, {len(val_docs)} validation books, vocab {VOCAB_SIZE}")
print(train_docs[0][:120].decode())
rows = pack_documents(train_docs[:2], seq_len=64)
print("packed rows:", rows["tokens"].shape, "BOS id:", BOS)
print(f"unigram entropy of the validation text: {unigram_entropy_bits(val_docs):.3f} bits/byte")

# %% [markdown]
# ## A model: the baseline Transformer, built eagerly with explicit RNGs

# %%
import jax.numpy as jnp
from flax import nnx

from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.nn.layers import count_params

model_cfg = TransformerConfig(
    seq_len=64, num_layers=2, d_model=32 if SMOKE else 96, num_heads=4, positions="alibi"
)
model = Transformer(model_cfg, rngs=nnx.Rngs(0))
logits = model(jnp.asarray(rows["tokens"][:2, :-1]))
print("logits:", logits.shape, "params:", count_params(model))
print(f"training FLOPs/token: {model_cfg.flops_per_token().train:.3g}")

# %% [markdown]
# ## Training with the shared loop
# `run_training` jits the step, checkpoints with orbax, logs `metrics.jsonl` and TensorBoard, and
# resumes when called again on the same directory.

# %%
from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import read_metrics
from jaxlab.lm.task import LMTask

steps = 20 if SMOKE else 300
train_cfg = TrainConfig(
    steps=steps,
    batch_size=8 if SMOKE else 16,
    learning_rate=3e-3,
    warmup_steps=steps // 10,
    checkpoint_every=steps // 2,
    eval_every=steps // 4,
    log_every=steps // 10,
    eval_batches=4,
)
task = LMTask(build=lambda rngs: Transformer(model_cfg, rngs=rngs), seq_len=model_cfg.seq_len)
workdir = tempfile.mkdtemp(prefix="jaxlab_tour_")
summary = run_training(task, train_cfg, workdir)
print({k: summary[k] for k in ("final_step", "num_params", "eval")})

# %% [markdown]
# ## Plot

# %%
from jaxlab.core.plots import curves_figure

metrics = read_metrics(workdir)
train = [(r["step"], r["bits_per_byte"]) for r in metrics if "bits_per_byte" in r]
val = [(r["step"], r["eval_bits_per_byte"]) for r in metrics if "eval_bits_per_byte" in r]
curves_figure(
    {"train": np.array(train).T, "validation": np.array(val).T},
    xlabel="step",
    ylabel="bits per byte",
    hlines={"unigram entropy": unigram_entropy_bits(val_docs)},
)
