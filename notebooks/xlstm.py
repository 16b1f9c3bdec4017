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
#
# %% [markdown]
# # xLSTM 7B
#
# Beck et al., *xLSTM 7B: A Recurrent LLM for Fast and Efficient Inference* (ICML 2025). The mLSTM
# cell keeps a matrix memory per head, updated with an exponential input gate and a sigmoid forget
# gate; it runs as a recurrence (constant memory per token), as a quadratic parallel form, or
# chunkwise (linear in the sequence length). This notebook checks that the three forms agree,
# counts the 7B model's parameters, trains a tiny xLSTM on the shipped corpus and generates from it
# with its recurrent state as the cache.

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
# ## Three forms of one cell

# %%
import jax
import jax.numpy as jnp

from jaxlab.methods.xlstm import mlstm

keys = jax.random.split(jax.random.key(0), 5)
B, T, H, Dk, Dv = 1, 50, 2, 16, 16  # (B, T, H, D), as jax.nn.dot_product_attention
q, k = (jax.random.normal(keys[j], (B, T, H, Dk)) for j in range(2))
v = jax.random.normal(keys[2], (B, T, H, Dv))
i, f = 3 * jax.random.normal(keys[3], (B, T, H)), jax.random.normal(keys[4], (B, T, H)) + 2
h = {
    form: mlstm(q, k, v, i, f, form=form, chunk_size=16)
    for form in ("recurrent", "parallel", "chunkwise")
}
scale = float(jnp.abs(h["recurrent"]).max())
for form in ("parallel", "chunkwise"):
    print(form, "vs recurrent, relative:", float(jnp.abs(h[form] - h["recurrent"]).max()) / scale)

# %% [markdown]
# ## The 7B model's size (shapes only, nothing allocated)

# %%
from flax import nnx

from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.nn.layers import count_params

abstract = nnx.eval_shape(lambda: xLSTM(xLSTMConfig.xlstm_7b(), rngs=nnx.Rngs(0)))
print(f"xLSTM 7B: {count_params(abstract):,} parameters (the released model: 6,865,424,896)")

# %% [markdown]
# ## A tiny xLSTM on the King James Bible

# %%
import tempfile

from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import read_metrics
from jaxlab.core.plots import curves_figure
from jaxlab.lm.task import LMTask

cfg = xLSTMConfig(
    d_model=32 if SMOKE else 128, num_layers=2, num_heads=4, seq_len=64, chunk_size=16
)
steps = 10 if SMOKE else 300
train = TrainConfig(
    steps=steps,
    batch_size=8,
    learning_rate=3e-3,
    warmup_steps=steps // 10,
    eval_every=steps // 5,
    checkpoint_every=steps,
    log_every=steps // 5,
    eval_batches=2,
)
task = LMTask(build=lambda rngs: xLSTM(cfg, rngs=rngs), seq_len=cfg.seq_len)
workdir = tempfile.mkdtemp(prefix="xlstm_nb_")
run_training(task, train, workdir, verbose=False)
rows = [r for r in read_metrics(workdir) if "eval_loss" in r]
print("final validation loss:", round(rows[-1]["eval_loss"], 4))
curves_figure(
    {"xlstm": ([r["step"] for r in rows], [r["eval_loss"] for r in rows])},
    xlabel="step",
    ylabel="validation loss (nats/byte)",
)

# %% [markdown]
# ## Generation: the cache is the recurrent state
# Prefill plus one cached step per token reproduces the full forward's logits; the xLSTM's cache
# has the same size at any context, a Transformer's KV cache grows with it. (A fresh model here:
# the training run above keeps its parameters in its checkpoint.)

# %%
from jaxlab.lm.generate import generate, teacher_forced_logits
from jaxlab.lm.transformer import Transformer
from jaxlab.methods.xlstm.matched import matched_transformer

model = xLSTM(cfg, rngs=nnx.Rngs(0))
tokens = jax.random.randint(jax.random.key(1), (1, 40), 0, 256)
full = model(tokens)
print(
    "teacher-forced vs full forward:",
    float(jnp.abs(teacher_forced_logits(model, tokens, 21) - full).max()),
)
print("greedy continuation:", generate(model, tokens[:, :8], max_new_tokens=8)[0, 8:].tolist())

baseline = Transformer(matched_transformer(cfg), rngs=nnx.Rngs(0))


def cache_bytes(m, context):
    cache = jax.eval_shape(lambda: m.init_cache(1, context))
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache))


for context in (1024, 65536):
    sizes = {
        name: cache_bytes(m, context) for name, m in (("xlstm", model), ("transformer", baseline))
    }
    print(f"context {context}: cache bytes {sizes}")
