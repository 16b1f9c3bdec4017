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
# # Sparse Spectral Training
#
# Zhao, Zhang, Li, Liu & Cannistraci, *Sparse Spectral Training and Inference on Euclidean and
# Hyperbolic Neural Networks* (ICML 2025). Every weight is kept as its SVD `U diag(s) Vᵀ`; all
# singular values train every step, but only `r` sampled singular-vector pairs do, with the
# "enhanced" gradient; the sample is redrawn every `T₃` steps and a re-SVD restores orthonormal
# factors every round. This notebook converts a model, checks the gradients against the dense
# weight's, shows the sampling weights, and trains a teacher–student MLP with SST and its
# baselines on the shared loop.

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
# ## Converting a model: zero distortion, and back
# `to_spectral` replaces the attention and MLP maps of any jaxlab model by their spectral layers;
# the output head stays dense. `merge_dense` turns them back into dense maps.

# %%
import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.sst import linear_layers, merge_dense, to_spectral
from jaxlab.nn.spectral import Spectral

cfg = TransformerConfig(seq_len=16, num_layers=2, d_model=32, num_heads=2)
tokens = (jnp.arange(32).reshape(2, 16) * 7) % 256
dense_out = Transformer(cfg, rngs=nnx.Rngs(0))(tokens)
model = to_spectral(Transformer(cfg, rngs=nnx.Rngs(0)), 2, key=jax.random.key(0))
print("spectral layers:", len(linear_layers(model, Spectral)))
print("max |spectral - dense| at init:", float(jnp.abs(model(tokens) - dense_out).max()))
merged = merge_dense(model)
print("max |merged - dense|:", float(jnp.abs(merged(tokens) - dense_out).max()))

# %% [markdown]
# ## The enhanced gradient is the dense gradient projected on the singular vectors
# With `G = ∂L/∂M`, autodiff gives `s_i G v_i` for `u_i`; SST feeds `G v_i` to the optimizer.

# %%
from jaxlab.methods.sst import enhanced_gradient

layer = Spectral(6, 9, rank=2, std=0.5, rngs=nnx.Rngs(0))
x, y = jax.random.normal(jax.random.key(1), (5, 6)), jax.random.normal(jax.random.key(2), (5, 9))


def loss(m):
    return jnp.sum(jnp.sin(x @ m) * y)


G = jax.grad(loss)(layer.dense_matrix())
grads = nnx.as_pure(nnx.state(nnx.grad(lambda lay: loss(lay.dense_matrix()))(layer), nnx.Param))
fed, _ = enhanced_gradient().update(grads, None, nnx.as_pure(nnx.state(layer, nnx.Param)))
u, s, v = layer.factors()
print("max |fed u-gradient - G v|:", float(jnp.abs(fed["u_active"] - G @ v[:, :2]).max()))

# %% [markdown]
# ## Which pairs train next
# The multinomial over the singular values (`s`), or the half-uniform mixture.

# %%
from jaxlab.core.plots import bars_figure, curves_figure
from jaxlab.methods.sst import sampling_probs

s = jnp.array([4.0, 2.0, 1.0, 0.5, 0.25])
panels = {}
for kind in ("s", "half_uniform"):
    probs = sampling_probs(s, kind)
    panels[kind] = {f"s={float(v)}": float(p) for v, p in zip(s, probs, strict=True)}
bars_figure(panels, title="sampling probabilities")

# %% [markdown]
# ## Teacher–student regression with every method
# The same recipe for all; only how the two weight matrices train differs
# (`experiments/sst_mlp.py` runs this with three seeds).

# %%
import dataclasses
import tempfile

from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import read_metrics
from jaxlab.methods.sst import LowRankTask, SSTConfig
from jaxlab.methods.sst.teacher import TeacherStudentTask
from jaxlab.methods.sst.tuning import method_rates

data = TeacherStudentTask(d_model=16 if SMOKE else 32, hidden=32 if SMOKE else 128, rows=2048)
steps = 20 if SMOKE else 600
train = TrainConfig(
    steps=steps,
    batch_size=64,
    learning_rate=3e-3,
    weight_decay=0.0,
    warmup_steps=steps // 10,
    eval_every=steps // 4,
    checkpoint_every=steps,
    log_every=steps // 4,
    eval_batches=4,
    tensorboard=False,
)
curves = {}
for method in ("full", "sst", "lora", "relora", "galore"):
    sst = SSTConfig(
        method=method,
        rank=2,
        resample_every=10,
        iteration_warmup=1,
        relora_every=steps // 3,
        relora_warmup=5,
    )
    task = LowRankTask(data, sst)
    workdir = tempfile.mkdtemp(prefix=f"sst_nb_{method}_")
    # GaLore at its paper's scale α = 0.25 takes the rate divided by α: the same Adam step α·lr.
    lr = method_rates((train.learning_rate,), method, sst.galore_scale)[0]
    run_training(task, dataclasses.replace(train, learning_rate=lr), workdir, verbose=False)
    rows = [r for r in read_metrics(workdir) if "eval_relative_mse" in r]
    curves[method] = ([r["step"] for r in rows], [r["eval_relative_mse"] for r in rows])
    mem = task.memory(train)
    print(
        f"{method:7s} validation MSE / var {curves[method][1][-1]:.4f} | "
        f"trainable {mem['trainable_params']} | optimizer state {mem['optimizer_state_bytes']} B"
    )

curves_figure(curves, xlabel="step", ylabel="validation MSE / target variance", logy=True)
