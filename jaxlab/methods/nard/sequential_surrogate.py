"""``method="sequential_surrogate"``: one-feature decisions on the surrogate, O(m³ + mPd) per step.

The hybrid of :mod:`~jaxlab.methods.nard.sequential` and :mod:`~jaxlab.methods.nard.surrogate`
(Zhang et al., ICML 2025, Sec. 4.4). The ascended function is the surrogate ``g(α, Ω; W₀)`` with the
anchor ``W₀`` supported on the active set A (P slots). Given W₀ and Ω, g is separable in α with the
Tipping–Faul form ``½[−m log(1 + γρ) + γ Q̃_i/(1 + γρ)]`` (sparsity ``s = ρ``, quality
``Q̃_i = b_iᵀΩb_i``), so the best single add / re-estimate / delete is exact; here only columns of
``B = YXᵀ − W₀G + ρW₀`` are needed: ``b = P − W₀_A G_{A,:} + ρW₀`` costs m·P·d and every other term
(R₀R₀ᵀ = YYᵀ − W₀_A P_Aᵀ − P_A W₀_Aᵀ + W₀_A G_AA W₀_Aᵀ, the S̃ of the Ω-step, the W₀-step
``W₀_A ← B_A D_A⁻¹`` and g itself) costs O(m·P² + m²·P). There is no P×P factorisation at all:
the surrogate's intermediate matrix is diagonal. Each of the three block updates is exact or a
majorise–minimise step, so g never decreases; the loop stops when its relative change is below
``tol``. ``coef`` is the final anchor (equal to the posterior mean at a fixed point).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from jaxlab.methods.nard.active_set import (
    ActiveSet,
    apply_best,
    coordinate_gain,
    empty,
    gather,
    gather_blocks,
    scatter,
)
from jaxlab.methods.nard.model import Stats
from jaxlab.methods.nard.output import SolverOutput, diagonal_precision, omega_step
from jaxlab.methods.nard.surrogate import surrogate_value

__all__ = ["SeqSurrogateState", "solve_sequential_surrogate"]


class SeqSurrogateState(NamedTuple):
    """Loop state: the active set, the anchor on its slots (m×P), Ω and g's trace."""

    active: ActiveSet
    w: Float[Array, "m P"]
    precision: Float[Array, "m m"]
    value: Float[Array, ""]
    trace: Float[Array, " T"]
    it: Int[Array, ""]
    converged: Bool[Array, ""]


def _cov(stats, w_o, b_o, p_o, g_oo, b_n, c_n):
    """``S̃`` with anchor columns ``w_o`` (and B, P, G on the anchor's set) and the D⁻¹ term on the
    new active set (``b_n``, ``c_n = γ/(1 + γρ)``)."""
    wp = w_o @ p_o.T
    rr = stats.yy - wp - wp.T + w_o @ g_oo @ w_o.T
    bw = b_o @ w_o.T
    s = rr + bw + bw.T - stats.rho * (w_o @ w_o.T) - (b_n * c_n[None, :]) @ b_n.T
    return 0.5 * (s + s.T) / stats.n


@partial(jax.jit, static_argnames=("max_iter", "max_active", "glasso_iter"))
def solve_sequential_surrogate(
    stats: Stats,
    lam: Float[Array, ""],
    *,
    max_iter: int = 1000,
    max_active: int = 100,
    tol: float = 1e-6,
    glasso_iter: int = 100,
) -> SolverOutput:
    """Runs the sequential surrogate algorithm from the empty model and ``Ω₀ = diag(N/diag YYᵀ)``.

    Args:
      stats: sufficient statistics of the data.
      lam: graphical-lasso penalty λ.
      max_iter: iteration cap (one feature decision per iteration).
      max_active: capacity P of the active set.
      tol: stop when ``|Δg| ≤ tol · |g|``.
      glasso_iter: sweeps allowed to each warm-started graphical lasso.

    Returns:
      A :class:`~jaxlab.methods.nard.output.SolverOutput` (``objective`` is g's trace).
    """
    m, d = stats.cross.shape
    dtype = stats.cross.dtype
    rho = stats.rho
    active = empty(min(max_active, d), d, dtype)
    cov0 = stats.yy / stats.n
    precision = diagonal_precision(cov0)
    value = surrogate_value(active.gamma, cov0, precision, lam, stats.n, rho)
    trace = jnp.full((max_iter + 1,), jnp.nan, dtype).at[0].set(value)
    w0 = jnp.zeros((m, active.slots.shape[0]), dtype)
    init = SeqSurrogateState(
        active, w0, precision, value, trace, jnp.asarray(0), jnp.asarray(False)
    )

    def body(s: SeqSurrogateState) -> SeqSurrogateState:
        idx, vf, g_aa, p_a = gather_blocks(s.active, stats.gram, stats.cross)
        g_rows = stats.gram[idx] * vf[:, None]
        b_all = stats.cross - s.w @ g_rows + rho * scatter(s.w, s.active, d)
        q = jnp.sum(b_all * (s.precision @ b_all), axis=0)
        gamma = scatter(s.active.gamma, s.active, d)
        g_star, gain = coordinate_gain(q, jnp.full((d,), rho, dtype), gamma, m)
        active, _, _ = apply_best(s.active, g_star, gain)
        # Ω-step with the old anchor and the new α.
        idx_n, vf_n = gather(active, d)
        b_n = b_all[:, idx_n] * vf_n[None, :]
        c_n = active.gamma / (1 + active.gamma * rho)
        cov = _cov(stats, s.w, b_all[:, idx] * vf[None, :], p_a, g_aa, b_n, c_n)
        precision = omega_step(cov, lam, s.precision, glasso_iter=glasso_iter)
        # W₀-step, then g at the new anchor.
        w = b_n * c_n[None, :]
        _, _, g_nn, p_n = gather_blocks(active, stats.gram, stats.cross)
        b_new = p_n - w @ g_nn + rho * w
        cov = _cov(stats, w, b_new, p_n, g_nn, b_new, c_n)
        value = surrogate_value(active.gamma, cov, precision, lam, stats.n, rho)
        done = jnp.abs(value - s.value) <= tol * jnp.abs(s.value)
        return SeqSurrogateState(
            active, w, precision, value, s.trace.at[s.it + 1].set(value), s.it + 1, done
        )

    def cond(s: SeqSurrogateState) -> Bool[Array, ""]:
        return (s.it < max_iter) & ~s.converged

    s = lax.while_loop(cond, body, init)
    return SolverOutput(
        scatter(s.w, s.active, d),
        scatter(s.active.gamma, s.active, d),
        s.precision,
        s.trace,
        s.it,
        s.converged,
    )
