"""``method="sequential"``: one feature at a time (Tipping–Faul style), O(m³ + p³ + p²d) per step.

Start from the empty model. Each iteration computes, for every feature, the sparsity and quality
factors with respect to the current active set A (p slots, see
:mod:`~jaxlab.methods.nard.active_set`). With ``C = I + X_Aᵀ Γ_A X_A`` and ``Σ_A = (K_A + G_AA)⁻¹``:

    S_i = x_iᵀ C⁻¹ x_i = G_ii − G_iA Σ_A G_Ai,    Q̂_i = Y C⁻¹ x_i = P_i − P_A Σ_A G_Ai (m-vector),

and, removing feature i's own contribution when it is active (``C_{−i}``, Sherman–Morrison),
``s_i = S_i / (1 − γ_i S_i)``, ``q_i = Q̂_i / (1 − γ_i S_i)``. Because
``log|C| = log|C_{−i}| + log(1 + γ_i s_i)`` and
``tr(Ω Y C⁻¹ Yᵀ) = tr(Ω Y C_{−i}⁻¹ Yᵀ) − γ_i q_iᵀΩq_i / (1 + γ_i s_i)``, the objective's dependence
on γ_i is exactly ``ℓ_i(γ_i)`` with ``Q_i = q_iᵀ Ω q_i`` (the paper's Q_i), so the add /
re-estimate / delete with the largest gain is an exact coordinate maximisation. Then an Ω-step
(warm graphical lasso on ``S = [YYᵀ − P_A Σ_A P_Aᵀ]/N``, kept only if it improves). The objective
therefore never decreases; the loop (:func:`jaxlab.core.iterate.iterate`) stops when its relative
change is below ``tol``, or unconverged on a non-finite value. ``Σ_A`` and S come from
:func:`~jaxlab.methods.nard.model.posterior` and :func:`~jaxlab.methods.nard.model.residual_cov`
applied to the active block, the same functions ``nard`` applies to all d features. Scoring all d
candidates is O(p·d·(p + m) + m²·d); the rest depends on p and m only. The capacity p is paid in
full from the first iteration (static shapes), and exact ARD keeps many irrelevant features at
large finite α, so the active set does fill up when d is large.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.iterate import iterate, relative_change
from jaxlab.methods.nard.active_set import (
    ActiveSet,
    apply_best,
    coordinate_gain,
    empty,
    gather,
    gather_blocks,
    scatter,
)
from jaxlab.methods.nard.model import Posterior, Stats, objective, posterior, residual_cov
from jaxlab.methods.nard.output import NARDResult, diagonal_precision, omega_step

__all__ = ["SequentialState", "active_posterior", "factors", "solve_sequential"]


class SequentialState(NamedTuple):
    """Loop state of the sequential solver."""

    active: ActiveSet
    precision: Float[Array, "m m"]


def active_posterior(active: ActiveSet, stats: Stats) -> tuple[Posterior, Array, Array]:
    """Posterior on the active slots (``Σ_A`` zero on empty slots), the Gram rows ``G_{A,:}``
    (p×d, zero on empty slots) and ``P_A`` (m×p)."""
    idx, vf = gather(active, stats.gram.shape[0])
    rows = stats.gram[idx] * vf[:, None]
    _, _, g_aa, p_a = gather_blocks(active, rows, stats.cross)
    return posterior(active.gamma, g_aa, p_a), rows, p_a


def factors(
    active: ActiveSet, stats: Stats
) -> tuple[Float[Array, " d"], Float[Array, "m d"], Float[Array, " d"]]:
    """Sparsity ``s`` (d,), quality ``q`` (m×d) and current γ (d,) of every feature."""
    d = stats.gram.shape[0]
    post, g_rows, p_a = active_posterior(active, stats)
    t = post.sigma @ g_rows
    big_s = jnp.diagonal(stats.gram) - jnp.sum(g_rows * t, axis=0)
    big_q = stats.cross - p_a @ t
    gamma = scatter(active.gamma, active, d)
    denom = 1.0 - gamma * big_s  # > 0: γS = γs/(1 + γs) < 1
    return big_s / denom, big_q / denom[None, :], gamma


def _value(active, precision, stats, lam, glasso_iter):
    """Ω-step (or the diagonal start when ``precision`` is None), then the objective."""
    post, _, p_a = active_posterior(active, stats)
    cov = residual_cov(post.sigma, p_a, stats.yy, stats.n)
    if precision is None:
        precision = diagonal_precision(cov)
    else:
        precision = omega_step(cov, lam, precision, glasso_iter=glasso_iter)
    return precision, objective(post.logdet_c, cov, precision, lam, stats.n)


@partial(jax.jit, static_argnames=("max_iter", "max_active", "glasso_iter"))
def solve_sequential(
    stats: Stats,
    lam: Float[Array, ""],
    *,
    max_iter: int = 1000,
    max_active: int = 100,
    tol: float = 1e-6,
    glasso_iter: int = 100,
) -> NARDResult:
    """Runs the sequential algorithm from the empty model and ``Ω₀ = diag(N / diag YYᵀ)``.

    Args:
      stats: sufficient statistics of the data.
      lam: graphical-lasso penalty λ.
      max_iter: iteration cap (one feature decision per iteration).
      max_active: capacity p of the active set; additions stop when it is full.
      tol: stop when ``|ΔL| ≤ tol · |L|``; a non-finite L stops the loop unconverged.
      glasso_iter: sweeps allowed to each warm-started graphical lasso.

    Returns:
      A :class:`~jaxlab.methods.nard.output.NARDResult`.
    """
    m, d = stats.cross.shape
    active = empty(min(max_active, d), d, stats.cross.dtype)
    precision, value = _value(active, None, stats, lam, glasso_iter)

    def step(k, s: SequentialState) -> tuple[SequentialState, Float[Array, ""]]:
        sparsity, quality, gamma = factors(s.active, stats)
        big_q = jnp.sum(quality * (s.precision @ quality), axis=0)  # q_iᵀ Ω q_i
        g_star, gain = coordinate_gain(big_q, sparsity, gamma, m)
        active, _, _ = apply_best(s.active, g_star, gain)
        precision, value = _value(active, s.precision, stats, lam, glasso_iter)
        return SequentialState(active, precision), value

    it = iterate(
        step,
        SequentialState(active, precision),
        value,
        max_iter=max_iter,
        stop=relative_change(tol),
    )
    s = it.state
    post, _, _ = active_posterior(s.active, stats)
    coef = scatter(post.mean, s.active, d)
    return NARDResult(
        coef, scatter(s.active.gamma, s.active, d), s.precision, it.trace, it.n_iter, it.converged
    )
