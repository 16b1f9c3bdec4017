"""``method="sequential_surrogate"``: one-feature steps on the surrogate, O(m³ + mPd + dN) each.

The hybrid of :mod:`~jaxlab.methods.nard.sequential` and :mod:`~jaxlab.methods.nard.surrogate`
(Zhang et al., ICML 2025, Sec. 4.4). The ascended function is the surrogate ``g(α, Ω; W₀)`` with the
anchor ``W₀`` supported on the active set A (p slots). Given W₀ and Ω, g is separable in α with the
Tipping–Faul form ``½[−m log(1 + γρ) + γ Q̃_i/(1 + γρ)]`` (sparsity ``s = ρ``, quality
``Q̃_i = b_iᵀΩb_i``), so the best single add / re-estimate / delete is exact; here only columns of
``B = YXᵀ − W₀G + ρW₀`` are needed: ``b = P − W₀_A G_{A,:} + ρW₀`` costs m·p·d and every other term
(R₀R₀ᵀ = YYᵀ − W₀_A P_Aᵀ − P_A W₀_Aᵀ + W₀_A G_AA W₀_Aᵀ, the S̃ of the Ω-step, the W₀-step
``W₀_A ← B_A D_A⁻¹`` and g itself) costs O(m·p² + m²·p). There is no p×p factorisation at all:
the surrogate's intermediate matrix is diagonal. The d×d Gram matrix is never formed either: the
state keeps the Gram rows ``G_{A,:} = X_A Xᵀ`` of the active slots, and since one decision
changes at most one slot, each iteration computes one new row ``x_i Xᵀ`` (d·N). Each of the three
block updates is exact or a majorise–minimise step, so g never decreases; the loop
(:func:`jaxlab.core.iterate.iterate`) stops when its relative change is below ``tol``, or
unconverged on a non-finite value. ``coef`` is the final anchor (equal to the posterior mean at a
fixed point).
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
from jaxlab.methods.nard.bound import SurrogateStats, surrogate_cov, surrogate_value
from jaxlab.methods.nard.output import NARDResult, diagonal_precision, omega_step

__all__ = ["SeqSurrogateState", "solve_sequential_surrogate"]


class SeqSurrogateState(NamedTuple):
    """Loop state: the active set, the anchor on its slots (m×p), Ω, and the slots' Gram rows."""

    active: ActiveSet
    w: Float[Array, "m p"]
    precision: Float[Array, "m m"]
    rows: Float[Array, "p d"]


def _cov(stats, w_o, b_o, p_o, g_oo, b_n, c_n):
    """``S̃`` with anchor columns ``w_o`` (and B, P, G on the anchor's set) and the D⁻¹ term on the
    new active set (``b_n``, ``c_n = γ/(1 + γρ)``); R₀R₀ᵀ from the statistics."""
    wp = w_o @ p_o.T
    rr = stats.yy - wp - wp.T + w_o @ g_oo @ w_o.T
    return surrogate_cov(rr, b_o, w_o, b_n, c_n, stats.rho, stats.n)


@partial(jax.jit, static_argnames=("max_iter", "max_active", "glasso_iter"))
def solve_sequential_surrogate(
    X: Float[Array, "d N"],
    stats: SurrogateStats,
    lam: Float[Array, ""],
    *,
    max_iter: int = 1000,
    max_active: int = 100,
    tol: float = 1e-6,
    glasso_iter: int = 100,
) -> NARDResult:
    """Runs the sequential surrogate algorithm from the empty model and ``Ω₀ = diag(N/diag YYᵀ)``.

    Args:
      X: inputs (d×N), read one row at a time for the Gram rows of added features.
      stats: :class:`~jaxlab.methods.nard.bound.SurrogateStats` of (X, Y).
      lam: graphical-lasso penalty λ.
      max_iter: iteration cap (one feature decision per iteration).
      max_active: capacity p of the active set.
      tol: stop when ``|Δg| ≤ tol · |g|``; a non-finite g stops the loop unconverged.
      glasso_iter: sweeps allowed to each warm-started graphical lasso.

    Returns:
      A :class:`~jaxlab.methods.nard.output.NARDResult` (``objective`` is g's trace).
    """
    m, d = stats.cross.shape
    dtype = stats.cross.dtype
    rho = stats.rho
    active = empty(min(max_active, d), d, dtype)
    p = active.slots.shape[0]
    cov0 = stats.yy / stats.n
    precision = diagonal_precision(cov0)
    value = surrogate_value(active.gamma, cov0, precision, lam, stats.n, rho)
    init = SeqSurrogateState(active, jnp.zeros((m, p), dtype), precision, jnp.zeros((p, d), dtype))

    def step(k, s: SeqSurrogateState) -> tuple[SeqSurrogateState, Float[Array, ""]]:
        idx, vf, g_aa, p_a = gather_blocks(s.active, s.rows, stats.cross)
        g_rows = s.rows * vf[:, None]
        b_all = stats.cross - s.w @ g_rows + rho * scatter(s.w, s.active, d)
        q = jnp.sum(b_all * (s.precision @ b_all), axis=0)
        gamma = scatter(s.active.gamma, s.active, d)
        g_star, gain = coordinate_gain(q, jnp.full((d,), rho, dtype), gamma, m)
        active, _, i = apply_best(s.active, g_star, gain)
        # At most one slot changed; an added feature's slot gets its Gram row x_i Xᵀ.
        changed = active.slots != s.active.slots
        rows = jnp.where(changed[:, None], (X[i] @ X.T)[None, :], s.rows)
        # Ω-step with the old anchor and the new α.
        idx_n, vf_n = gather(active, d)
        b_n = b_all[:, idx_n] * vf_n[None, :]
        c_n = active.gamma / (1 + active.gamma * rho)
        cov = _cov(stats, s.w, b_all[:, idx] * vf[None, :], p_a, g_aa, b_n, c_n)
        precision = omega_step(cov, lam, s.precision, glasso_iter=glasso_iter)
        # W₀-step, then g at the new anchor.
        w = b_n * c_n[None, :]
        _, _, g_nn, p_n = gather_blocks(active, rows, stats.cross)
        b_new = p_n - w @ g_nn + rho * w
        cov = _cov(stats, w, b_new, p_n, g_nn, b_new, c_n)
        value = surrogate_value(active.gamma, cov, precision, lam, stats.n, rho)
        return SeqSurrogateState(active, w, precision, rows), value

    it = iterate(step, init, value, max_iter=max_iter, stop=relative_change(tol))
    s = it.state
    return NARDResult(
        scatter(s.w, s.active, d),
        scatter(s.active.gamma, s.active, d),
        s.precision,
        it.trace,
        it.n_iter,
        it.converged,
    )
