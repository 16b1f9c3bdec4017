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
# # Residual Matrix Transformer
#
# Mak & Flanigan, *Residual Matrix Transformers: Scaling the Size of the Residual Stream* (ICML
# 2025). Each token's residual stream is a `Dk x Dv` outer-product memory: layers store vectors with
# key vectors and retrieve them with other keys, instead of multiplying by W_Q, W_K, W_V, W_O.
# This notebook shows storage and retrieval, compares the paper's presets with their transformer
# pairs, and trains a matched pair for a few steps on the shipped corpus.

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
# ## Storage and retrieval
# With orthonormal keys (R <= Dk) a stored vector comes back exactly.

# %%
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.methods.rmt import retrieve, store

R, Dk, Dv = 4, 8, 5
keys_RM = jnp.asarray(np.linalg.qr(np.random.default_rng(0).normal(size=(Dk, Dk)))[0][:R])
y_BTRE = jax.random.normal(jax.random.key(0), (1, 1, R, Dv))
x_BTEM = store(y_BTRE, keys_RM)  # one token's residual matrix X, held as X^T (Dv x Dk)
print("residual matrix:", x_BTEM.shape)
print("max retrieval error:", float(jnp.abs(retrieve(x_BTEM, keys_RM.T) - y_BTRE).max()))

# %% [markdown]
# ## The paper's presets against their transformers

# %%
from flax import nnx

from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.nn.layers import count_params

for t_size, r_size in [("49m", "46m"), ("405m", "305m")]:
    tcfg, rcfg = TransformerConfig.paper(t_size), RMTConfig.paper(r_size)
    tp = count_params(nnx.eval_shape(lambda c=tcfg: Transformer(c, rngs=nnx.Rngs(0))))
    rp = count_params(nnx.eval_shape(lambda c=rcfg: RMT(c, rngs=nnx.Rngs(0))))
    tf = tcfg.flops_per_token(include_vocab=False).train
    rf = rcfg.flops_per_token(include_vocab=False).train
    print(
        f"{t_size} transformer {tp / 1e6:.1f}M params, {tf:.3g} FLOPs/token | "
        f"{r_size} RMT {rp / 1e6:.1f}M params, {rf:.3g} FLOPs/token"
    )

# %% [markdown]
# ## A matched pair on the King James Bible

# %%
import tempfile

from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import read_metrics
from jaxlab.core.plots import curves_figure
from jaxlab.lm.task import LMTask
from jaxlab.methods.rmt.scaling import matched_pair

tcfg, rcfg = matched_pair(32 if SMOKE else 64, 2, head_dim=16, d_key=32, seq_len=64, vocab_size=256)
steps = 10 if SMOKE else 200
train = TrainConfig(
    steps=steps,
    batch_size=8,
    warmup_steps=steps // 10,
    eval_every=steps // 5,
    checkpoint_every=steps,
    log_every=steps // 5,
    eval_batches=2,
)
curves = {}
for name, build, cfg in (("transformer", Transformer, tcfg), ("rmt", RMT, rcfg)):
    task = LMTask(build=lambda rngs, b=build, c=cfg: b(c, rngs=rngs), seq_len=cfg.seq_len)
    workdir = tempfile.mkdtemp(prefix=f"rmt_nb_{name}_")
    run_training(task, train, workdir, verbose=False)
    rows = [r for r in read_metrics(workdir) if "eval_loss" in r]
    curves[name] = ([r["step"] for r in rows], [r["eval_loss"] for r in rows])
    print(name, "final validation loss:", round(curves[name][1][-1], 4))

curves_figure(curves, xlabel="step", ylabel="validation loss (nats/byte)")
