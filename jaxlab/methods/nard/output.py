"""The output every NARD solver returns, and the Ω-step they share.

All four algorithms (``nard``, ``surrogate``, ``sequential``, ``sequential_surrogate``) return a
:class:`SolverOutput` in the variance parametrisation ``γ = 1/α`` (``γ_i = 0``: feature i pruned),
with the objective trace padded by NaN after ``n_iter``; :func:`jaxlab.methods.nard.fit` turns it
into the user-facing result. :func:`omega_step` is the Ω-update of every algorithm: a warm-started
graphical lasso whose result is kept only when it raises ``log|Ω| − tr(ΩS) − λ‖Ω‖₁,off`` (the
coordinate-descent solution is exact only up to its tolerance, and the solvers promise monotone
objectives).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxlab.methods.nard.glasso import graphical_lasso
from jaxlab.methods.nard.model import penalised_gaussian

__all__ = ["SolverOutput", "diagonal_precision", "omega_step"]


class SolverOutput(NamedTuple):
    """Raw solver output.

    Attributes:
      coef: W (m×d), the posterior mean (surrogate methods: the surrogate's, equal to the posterior
        mean at a fixed point).
      gamma: prior variances ``1/α`` (d,), 0 for pruned features.
      precision: Ω (m×m).
      objective: trace of the ascended objective, ``max_iter + 1`` entries, NaN after ``n_iter``.
      n_iter: iterations run.
      converged: whether the relative objective change fell below ``tol``.
    """

    coef: Float[Array, "m d"]
    gamma: Float[Array, " d"]
    precision: Float[Array, "m m"]
    objective: Float[Array, " T"]
    n_iter: Int[Array, ""]
    converged: Bool[Array, ""]


def diagonal_precision(cov: Float[Array, "m m"]) -> Float[Array, "m m"]:
    """``diag(1 / diag S)``: the starting Ω of every solver (the first iteration's Ω-step replaces
    it; starting here rather than from a cold graphical lasso halves the compiled code)."""
    return jnp.diag(1.0 / jnp.diagonal(cov))


def omega_step(
    cov: Float[Array, "m m"],
    lam: Float[Array, ""],
    previous: Float[Array, "m m"],
    *,
    glasso_iter: int = 100,
) -> Float[Array, "m m"]:
    """Ω ← graphical_lasso(S, λ), warm-started from ``previous`` and kept only if it improves."""
    new = graphical_lasso(cov, lam, init=previous, max_iter=glasso_iter).precision
    better = penalised_gaussian(new, cov, lam) >= penalised_gaussian(previous, cov, lam)
    ok = better & jnp.all(jnp.isfinite(new))
    return jnp.where(ok, new, previous)
