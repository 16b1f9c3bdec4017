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
# # Sparse-plus-low-rank quasi-Newton (SPLR) for entropic optimal transport
#
# Wang & Qiu, *The Sparse-Plus-Low-Rank Quasi-Newton Method for Entropic-Regularized Optimal
# Transport*, ICML 2025. SPLR minimises the entropic-OT dual with a Hessian approximation made of
# the exact diagonal blocks, the largest entries of the plan (a sparse part) and a rank-2 BFGS
# correction (a low-rank part). Where Sinkhorn needs tens of thousands of iterations (small η, dense
# plans), SPLR needs a few hundred. This notebook solves one problem with both and plots
# `log10 ||g||` (the marginal error) against iterations.

# %%
# Colab: install jaxlab (elsewhere, from a clone: pip install -e ".[dev]")
import subprocess
import sys

EXTRAS = "[bench]"  # POT, the reference solver used below
if "google.colab" in sys.modules:
    spec = f"jaxlab{EXTRAS} @ git+https://github.com/jaxlab/jaxlab"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", spec], check=True)
from jaxlab.core.environment import env_flag

SMOKE = env_flag("JAXLAB_SMOKE")  # CI runs every notebook at tiny size (1/true/yes/on)

# %%
import jax
import numpy as np

jax.config.update("jax_enable_x64", True)  # tol 1e-8 needs float64

from jaxlab.core.plots import traces_figure  # noqa: E402
from jaxlab.data.ot_problems import synthetic_1  # noqa: E402
from jaxlab.methods.qn_ot import solve  # noqa: E402

N = 40 if SMOKE else 200
ETA = 1e-2 if SMOKE else 1e-3
SINKHORN_ITERS = 2_000 if SMOKE else 20_000

# %% [markdown]
# Synthetic I: a uniform random cost matrix and random marginals.

# %%
problem = synthetic_1(N, seed=0)
splr = solve(problem.a, problem.b, problem.cost, epsilon=ETA, method="splr", tol=1e-8)
sink = solve(
    problem.a,
    problem.b,
    problem.cost,
    epsilon=ETA,
    method="sinkhorn",
    tol=1e-8,
    max_iter=SINKHORN_ITERS,
)
for name, out in (("SPLR", splr), ("Sinkhorn", sink)):
    print(
        f"{name:9s} iterations {int(out.n_iter):6d}  converged {bool(out.converged)!s:5s}  "
        f"final ||g|| {float(out.error):.2e}  {out.seconds:.3f}s"
    )

# %% [markdown]
# Both runs return the plan `matrix`, the potentials `(alpha, beta)` with `beta[-1] = 0`, and the
# `errors` trace (NaN past `n_iter`).

# %%
traces = {}
for name, out in (("SPLR", splr), ("Sinkhorn", sink)):
    errors = np.asarray(out.errors)  # NaN past n_iter: those points are not drawn
    # The time axis spreads the measured total evenly over the iterations.
    traces[name] = (errors, out.seconds * np.arange(len(errors)) / max(int(out.n_iter), 1))
traces_figure(
    traces, ylabel="||g||", threshold=1e-8, title=f"Synthetic I, n={N}, eta={ETA:g}"
)  # displayed as the cell's value

# %% [markdown]
# The SPLR plan agrees with POT's log-domain Sinkhorn when the latter is run to convergence
# (shown here at the smoke size, where POT converges quickly).

# %%
import ot  # noqa: E402

if SMOKE:
    reference = ot.sinkhorn(
        problem.a,
        problem.b,
        problem.cost,
        ETA,
        method="sinkhorn_log",
        stopThr=1e-12,
        numItermax=100_000,
    )
    print("max |T_splr - T_pot| =", float(np.abs(np.asarray(splr.matrix) - reference).max()))
print("sparsified-Hessian density per iteration (first 10):", np.asarray(splr.densities[:10]))

# %% [markdown]
# `solve` works from your own data: an ott-jax `PointCloud` (or `Geometry`, or a cost matrix with
# `epsilon=`), and its plan and potentials are differentiable by implicit differentiation of the
# dual's optimality conditions (no gradient goes through the iterations). Here: the transported
# cost `<T*(x), C(x)>` differentiated with respect to the source points.

# %%
import jax.numpy as jnp  # noqa: E402
from ott.geometry.pointcloud import PointCloud  # noqa: E402

rng = np.random.default_rng(0)
x, y = jnp.asarray(rng.random((30, 2))), jnp.asarray(rng.random((20, 2)))


def transported_cost(x):
    geom = PointCloud(x, y, epsilon=1e-2)
    return jnp.sum(solve(None, None, geom).matrix * geom.cost_matrix)  # uniform marginals


print("d<T, C>/dx for the first two points:\n", np.asarray(jax.grad(transported_cost)(x)[:2]))
