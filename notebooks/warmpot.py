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
# # WARMPOT: partial domain adaptation by partial optimal transport (Naram et al., ICML 2025)
#
# In partial domain adaptation the unlabelled target holds only some of the source classes.
# WARMPOT moves a mass α from source points weighted 1/(β n_s) to target points weighted 1/n_t
# with a partial transport plan π, weights each source point's loss by how much mass it sends,
# w = π1, and pulls the two domains together with ⟨π, M⟩. Source classes absent from the target
# then get little weight. This notebook shows partial transport (`jaxlab.ot.partial`), the weights
# on toy blobs, and training on real digits (sklearn's 8×8 digits → MNIST in the same format,
# target classes 0–4) against source-only and full-OT baselines. `JAXLAB_SMOKE=1`: a tiny run.

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

# %%
import dataclasses

import numpy as np

from jaxlab.core.plots import bars_figure, curves_figure, matrix_figure
from jaxlab.data.digits_da import load_task
from jaxlab.methods.warmpot import partial_ot
from jaxlab.methods.warmpot.config import WarmpotConfig
from jaxlab.methods.warmpot.train import train

# %% [markdown]
# ## Partial transport on blobs
# Three source classes, two of them in the target. With β = 1 (source masses summing to 1) and
# α = 1 every source point must send its whole mass, outliers included; with β = 2/3 the source
# holds 1.5 units and the plan can leave the outlier class out.

# %%
rng = np.random.default_rng(0)
centres = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
xs = np.concatenate([c + 0.4 * rng.standard_normal((15, 2)) for c in centres])
ys = np.repeat([0, 1, 2], 15)
xt = np.concatenate([c + 0.4 * rng.standard_normal((20, 2)) for c in centres[:2]])
cost = np.linalg.norm(xs[:, None] - xt[None], axis=-1)
for beta in (1.0, 2 / 3):
    a, b = np.full(len(xs), 1 / (beta * len(xs))), np.full(len(xt), 1 / len(xt))
    out = partial_ot(a, b, cost, mass=1.0, epsilon=0.05)
    w = np.asarray(out.matrix.sum(1))
    print(
        f"beta={beta:.2f}: outlier-class weight share {w[ys == 2].sum() / w.sum():.3f}, "
        f"converged={bool(out.converged)} in {int(out.n_iter)} Dykstra cycles"
    )
matrix_figure(np.asarray(out.matrix), title="partial plan, beta = 2/3 (rows: source by class)")

# %% [markdown]
# ## Training on digits → MNIST
# The same network, optimizer and batches for every method; only the weights or the plan differ.

# %%
task = load_task("digits_to_mnist", max_source=400 if SMOKE else 2000,
                 max_target=300 if SMOKE else 1000)  # fmt: skip
base = WarmpotConfig(steps=40 if SMOKE else 1000, eval_every=20 if SMOKE else 50,
                     ramp_steps=20 if SMOKE else 300)  # fmt: skip
results = {}
for method in ("source_only", "full_ot", "warmpot"):
    results[method] = train(dataclasses.replace(base, method=method), task)
    r = results[method]
    share = r.outlier_share[-1]
    print(f"{method:12s} last {r.last:.3f} best {r.best:.3f} outlier share {share:.3f}")

# %%
steps = np.arange(1, len(results["warmpot"].accuracy) + 1) * base.eval_every
curves = {m: (steps, r.accuracy) for m, r in results.items()}
curves_figure(curves, xlabel="step", ylabel="target accuracy", title="digits -> MNIST (0-4)")

# %%
bars_figure({"outlier-class weight share": {m: float(r.outlier_share[-1])
                                            for m, r in results.items()}})  # fmt: skip
