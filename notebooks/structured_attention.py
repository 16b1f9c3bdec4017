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
# # Structured attention: BTT and MLR scoring
#
# Kuang, Amsel, Lotfi, Qiu, Potapczynski & Wilson, *Customizing the Inductive Biases of Softmax
# Attention using Structured Matrices* (ICML 2025). Standard attention scores pairs with a
# low-rank `W_Q W_K^T` and treats every pair alike. Bilinear BTT and MLR scoring use full- or
# high-rank structured matrices instead, and MLR attention along the sequence spends more of the
# head on nearby pairs. This notebook shows MLR attention's block structure and its blockwise
# computation, the ranks of the scoring matrices, and the attention kinds in a small LM.

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
# ## Which levels cover which pairs
# Level `l` scores pairs in the same block of length `T / 2^l`; the finest levels cover only the
# pairs near the diagonal. `"block_levels"` divides each logit by this count.

# %%
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.plots import matrix_figure
from jaxlab.nn.mlr_attention import (
    mlr_attention,
    mlr_attention_reference,
    mlr_covering_levels,
    mlr_qk_flop_ratio,
)

count = mlr_covering_levels(32, 4)
matrix_figure(
    np.tril(count), title="levels covering each causal pair (T=32, 4 levels)", cmap="viridis"
)

# %% [markdown]
# ## Blockwise equals the dense construction
# Every pair is scored once, in the region of its finest covering level, with only the channels of
# the levels that cover it: the QK work is `sum_l r_l 2^-l / sum_l r_l` of standard attention's.

# %%
ranks = (32, 8, 6, 4, 4, 4, 4, 2)
print("QK FLOP ratio of the paper's ranks:", round(mlr_qk_flop_ratio(ranks), 3))
T = 256 if SMOKE else 1024
q, k, v = (jax.random.normal(key, (1, T, 2, 64)) for key in jax.random.split(jax.random.key(0), 3))
fast = mlr_attention(q, k, v, ranks=ranks, normalize="block_levels")
dense = mlr_attention_reference(q, k, v, ranks=ranks, normalize="block_levels")
print("max |blockwise - dense|:", float(jnp.abs(fast - dense).max()))

# %% [markdown]
# ## Ranks of the scoring matrices
# Per head, MHA's `W_Q W_K^T` has rank `d_head`; bilinear BTT (TT rank 1) is full rank; bilinear
# MLR has rank `min(D, sum_l r_l 2^l)` at the projection cost of `d_qk = sum_l r_l`.

# %%
from flax import nnx

from jaxlab.methods.structured_attention import BilinearBTTScore, BilinearMLRScore, DotProductScore

D = 32
scores = {
    "MHA, 8 heads": DotProductScore(D, 8, rngs=nnx.Rngs(0)),
    "bilinear BTT": BilinearBTTScore(D, 1, rngs=nnx.Rngs(0)),
    "bilinear MLR 4|2|2": BilinearMLRScore(D, 1, ranks=(4, 2, 2), rngs=nnx.Rngs(0)),
}
for name, score in scores.items():
    s = np.linalg.svd(np.float64(score.dense_matrices()[0]), compute_uv=False)
    print(f"{name:20s} rank of M_h: {int((s > 1e-5 * s[0]).sum())} of {D}")

# %% [markdown]
# ## The attention kinds in a small LM
# `attention` is a config field of the baseline Transformer (and of the RMT); nothing else changes.

# %%
import tempfile

from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import read_metrics
from jaxlab.core.plots import curves_figure
from jaxlab.lm.task import LMTask
from jaxlab.lm.transformer import Transformer, TransformerConfig

kinds = {
    "mha": {},
    "swa": dict(attention_window=8),
    "gswa": dict(attention_window=8),
    "mlr": dict(attention_ranks=(8, 4, 2, 2)),
}
steps = 6 if SMOKE else 150
train = TrainConfig(
    steps=steps, batch_size=8, warmup_steps=steps // 6, eval_every=steps // 3,
    checkpoint_every=steps, log_every=steps // 3, eval_batches=2,
)  # fmt: skip
curves = {}
for kind, options in kinds.items():
    cfg = TransformerConfig(
        vocab_size=256, seq_len=64, num_layers=2, d_model=64, num_heads=4, attention=kind,
        **options,
    )  # fmt: skip
    task = LMTask(build=lambda rngs, c=cfg: Transformer(c, rngs=rngs), seq_len=cfg.seq_len)
    workdir = tempfile.mkdtemp(prefix=f"structattn_nb_{kind}_")
    run_training(task, train, workdir, verbose=False)
    rows = [r for r in read_metrics(workdir) if "eval_loss" in r]
    curves[kind] = ([r["step"] for r in rows], [r["eval_loss"] for r in rows])
    print(kind, "final validation loss:", round(curves[kind][1][-1], 4))

curves_figure(curves, xlabel="step", ylabel="validation loss (nats/byte)")
