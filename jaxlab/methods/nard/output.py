"""The one result of the NARD family, and the Ω-step every NARD solver shares.

:class:`NARDResult` is what every NARD algorithm (``nard``, ``surrogate``, ``sequential``,
``sequential_surrogate``) and every baseline (:mod:`~jaxlab.methods.nard.baselines`) returns, with
the house solver convention (``n_iter``, ``converged``, a trace, ``seconds``) beside the estimate.
A solver called directly (jitted) fills the estimate in the variance parametrisation ``γ = 1/α``
(``γ_i = 0``: feature i pruned) and the objective trace padded by NaN after ``n_iter``, and leaves
``selected``, ``seconds``, ``stats_seconds`` and ``intercept`` as ``None``;
:func:`~jaxlab.methods.nard.solve.run_solver` times it and :func:`jaxlab.methods.nard.fit` selects
the features, adds the intercept and trims the trace. :func:`omega_step` is the Ω-update of every
algorithm: a warm-started graphical lasso whose result is kept only when it raises
``log|Ω| − tr(ΩS) − λ‖Ω‖₁,off`` (the coordinate-descent solution is exact only up to its
tolerance, and the solvers promise monotone objectives).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxlab.methods.nard.glasso import graphical_lasso
from jaxlab.methods.nard.model import penalised_gaussian

__all__ = ["NARDResult", "diagonal_precision", "omega_step", "partial_correlations"]


class NARDResult(NamedTuple):
    """A fit of a NARD algorithm or a baseline.

    Attributes:
      coef: W (m×d), the posterior mean of the coefficients (0 for pruned features; the surrogate
        methods: the surrogate's, equal to the posterior mean at a fixed point).
      gamma: prior variances ``1/α`` (d,), 0 for pruned features; ``None`` for the baselines.
      precision: the output precision Ω (m×m), sparse through the graphical lasso; ``None`` for a
        baseline without an output network.
      objective: the ascended objective after each iteration: the penalised log marginal
        likelihood for ``nard``/``sequential``, its surrogate lower bound for the surrogate
        methods. ``n_iter + 1`` values from :func:`~jaxlab.methods.nard.fit`; ``max_iter + 1``
        padded with NaN from a solver called directly; ``None`` for the baselines.
      n_iter: iterations run (a baseline: its own count, see
        :mod:`~jaxlab.methods.nard.baselines`).
      converged: NARD: whether the relative objective change fell below ``tol`` within
        ``max_iter`` at a finite objective (a non-finite objective stops the solver and is never
        converged); a baseline: see :mod:`~jaxlab.methods.nard.baselines`.
      selected: features with ``‖x_i‖² / α_i ≥ threshold`` (default 10): the prior variance of
        ``w_i`` is at least ``threshold`` times the variance ``1/‖x_i‖²`` of its single-feature
        least-squares estimate. For unit-variance inputs this is ``α_i ≤ N / threshold``. (Exact ARD
        maxima keep many irrelevant features at large but finite α, ~N; a fixed α cut would not.)
        ``None`` from a solver called directly.
      seconds: total wall time to convergence, compilation excluded: NARD's statistics plus its
        solver loop; a baseline's whole call. ``None`` when not timed (a solver called directly).
      stats_seconds: the part of ``seconds`` spent on NARD's statistics (the d×d Gram matrix for
        ``nard`` and ``sequential``; ``YXᵀ``, ``YYᵀ`` and ρ for the surrogate methods); NaN for the
        baselines, ``None`` when not timed.
      intercept: b (m,) of ``Y ≈ W X + b``: ``ȳ − W x̄`` from :func:`~jaxlab.methods.nard.fit`
        with ``fit_intercept=True``, zeros with ``fit_intercept=False``; ``None`` from a solver
        called directly and from the baselines (which fit no intercept).
    """

    coef: Float[Array, "m d"]
    gamma: Float[Array, " d"] | None
    precision: Float[Array, "m m"] | None
    objective: Float[Array, " iters"] | None
    n_iter: Int[Array, ""] | int
    converged: Bool[Array, ""] | bool
    selected: Bool[Array, " d"] | None = None
    seconds: float | None = None
    stats_seconds: float | None = None
    intercept: Float[Array, " m"] | None = None

    def predict(self, X: Float[ArrayLike, "d N"]) -> Float[Array, "m N"]:
        """``W X + b`` for inputs X (d×N), in the units of the fitted Y."""
        out = self.coef @ X
        return out if self.intercept is None else out + self.intercept[:, None]

    @property
    def alpha(self) -> Float[Array, " d"] | None:
        """Prior precisions α = 1/γ (d,); ``inf`` for pruned features, ``None`` for baselines."""
        if self.gamma is None:
            return None
        g = self.gamma
        return jnp.where(g > 0, 1.0 / jnp.where(g > 0, g, 1.0), jnp.inf)

    @property
    def seconds_per_iter(self) -> float:
        """``seconds / n_iter`` (NARD's statistics included, spread over the iterations)."""
        return self.seconds / max(int(self.n_iter), 1)


def partial_correlations(precision: Float[Array, "m m"]) -> np.ndarray:
    """The output network as partial correlations: ``−Ω_ij / sqrt(Ω_ii Ω_jj)`` off the diagonal, 1
    on it (the correlation of outputs i and j given all the others)."""
    prec = np.asarray(precision)
    d = np.sqrt(np.diag(prec))
    pcor = -prec / np.outer(d, d)
    np.fill_diagonal(pcor, 1.0)
    return pcor


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
