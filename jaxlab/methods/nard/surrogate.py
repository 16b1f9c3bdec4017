"""``method="surrogate"``: ascent on a Lipschitz lower bound, O(m³ + m·d·N + m²·d) per iteration.

Derivation (our reading of Zhang et al., ICML 2025, Sec. 4.3, which gives the idea, not these
formulas). With ``ρ ≥ λ_max(XXᵀ)`` and an anchor ``W₀``, the Gaussian log-likelihood of W is bounded
below by its Lipschitz (isotropic) quadratic minorant around ``W₀``, ``R₀ = Y − W₀X``:

    tr(Ω(Y−WX)(Y−WX)ᵀ) ≤ tr(ΩR₀R₀ᵀ) − 2 tr(Ω R₀Xᵀ (W−W₀)ᵀ) + ρ tr(Ω(W−W₀)(W−W₀)ᵀ).

Integrating the minorised likelihood against the prior ``MN(0, V, K⁻¹)`` gives a Gaussian whose
intermediate matrix is the *diagonal* ``D = K + ρI`` (instead of ``K + XXᵀ``), and the surrogate

    g(α, Ω; W₀) = −(mN/2) log 2π + (N/2)[log|Ω| − tr(Ω S̃) − λ‖Ω‖₁,off] − (m/2) Σ_i log(1 + ρ/α_i),
    N S̃ = R₀R₀ᵀ + B W₀ᵀ + W₀ Bᵀ − ρ W₀W₀ᵀ − B D⁻¹ Bᵀ,        B = R₀Xᵀ + ρW₀  (m×d).

``g ≤ L`` everywhere: ``log|K + ρI| ≥ log|K + XXᵀ|`` and ``tr(Ω N S̃) = min_W [minorant + tr(ΩWKWᵀ)]
≥ tr(Ω Y C⁻¹ Yᵀ)``. Block ascent on g, each block exact:

* α-step (W₀, Ω fixed): g is separable, ``½[−m log(1 + γ_iρ) + γ_i Q̃_i / (1 + γ_iρ)]`` with
  ``Q̃_i = b_iᵀΩb_i`` — the Tipping–Faul form with ``s = ρ``, so ``γ_i = (Q̃_i − mρ)/(mρ²)`` if
  ``Q̃_i > mρ``, else 0 (pruned; it re-enters when ``Q̃_i`` grows);
* Ω-step: graphical lasso on S̃;
* W₀-step: ``W₀ ← B D⁻¹``, the minimiser of the minorant plus prior; a majorise–minimise step on the
  bracket, so g does not decrease. At a fixed point ``W₀ (K + XXᵀ) = YXᵀ``: W₀ is the exact
  posterior mean ``M`` for the final α, which is what ``coef`` returns.

g never decreases and stays below the objective (tested). Its maximiser is not the objective's: the
bound on ``log|C|`` replaces the posterior variance ``Σ_ii`` by ``1/(α_i + ρ)``, so pruning is more
aggressive than NARD's. No d×d matrix is formed, not even for ρ
(:func:`~jaxlab.methods.nard.bound.lipschitz_constant`): B costs ``2mdN`` through X. The loop is
:func:`jaxlab.core.iterate.iterate` with :func:`~jaxlab.core.iterate.relative_change`.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.iterate import iterate, relative_change
from jaxlab.methods.nard.bound import SurrogateStats, surrogate_cov, surrogate_value
from jaxlab.methods.nard.output import NARDResult, diagonal_precision, omega_step

__all__ = ["SurrogateState", "solve_surrogate", "surrogate_init", "surrogate_step"]


class SurrogateState(NamedTuple):
    """Loop state: γ, Ω, and the anchor W₀ with its residual R₀ and B."""

    gamma: Float[Array, " d"]
    precision: Float[Array, "m m"]
    w: Float[Array, "m d"]
    r: Float[Array, "m N"]
    b: Float[Array, "m d"]


def _anchor(w, X, Y, rho):
    """Residual ``R₀ = Y − W₀X`` and ``B = R₀Xᵀ + ρW₀`` of anchor w (2mdN)."""
    r = Y - w @ X
    return r, r @ X.T + rho * w


def _cov(r, b, w, c, rho, n):
    """``S̃`` of the dense anchor (every column of B and W₀ on all d features)."""
    return surrogate_cov(r @ r.T, b, w, b, c, rho, n)


def surrogate_init(
    X: Float[Array, "d N"],
    Y: Float[Array, "m N"],
    stats: SurrogateStats,
    lam: Float[Array, ""],
    gamma0: Float[Array, " d"],
) -> tuple[SurrogateState, Float[Array, ""]]:
    """State at ``W₀ = 0``, ``γ = γ₀``, ``Ω = diag(1 / diag S̃)``, and g there."""
    m, d = stats.cross.shape
    w = jnp.zeros((m, d), X.dtype)
    r, b = _anchor(w, X, Y, stats.rho)
    c = gamma0 / (1 + gamma0 * stats.rho)
    cov = _cov(r, b, w, c, stats.rho, stats.n)
    prec = diagonal_precision(cov)
    value = surrogate_value(gamma0, cov, prec, lam, stats.n, stats.rho)
    return SurrogateState(gamma0, prec, w, r, b), value


def surrogate_step(
    s: SurrogateState,
    X: Float[Array, "d N"],
    Y: Float[Array, "m N"],
    stats: SurrogateStats,
    lam: Float[Array, ""],
    *,
    glasso_iter: int = 100,
) -> tuple[SurrogateState, Float[Array, ""]]:
    """One α-step, Ω-step and W₀-step of the surrogate ascent (module docstring), and g after."""
    m = Y.shape[0]
    rho = stats.rho
    q = jnp.sum(s.b * (s.precision @ s.b), axis=0)  # Q̃_i = b_iᵀ Ω b_i
    gamma = jnp.where(q > m * rho, (q - m * rho) / (m * rho * rho), 0.0)
    c = gamma / (1 + gamma * rho)
    prec = omega_step(
        _cov(s.r, s.b, s.w, c, rho, stats.n), lam, s.precision, glasso_iter=glasso_iter
    )
    w = s.b * c[None, :]
    r, b = _anchor(w, X, Y, rho)
    value = surrogate_value(gamma, _cov(r, b, w, c, rho, stats.n), prec, lam, stats.n, rho)
    return SurrogateState(gamma, prec, w, r, b), value


@partial(jax.jit, static_argnames=("max_iter", "glasso_iter"))
def solve_surrogate(
    X: Float[Array, "d N"],
    Y: Float[Array, "m N"],
    stats: SurrogateStats,
    lam: Float[Array, ""],
    gamma0: Float[Array, " d"],
    *,
    max_iter: int = 500,
    tol: float = 1e-6,
    glasso_iter: int = 100,
) -> NARDResult:
    """Runs the surrogate ascent; ``objective`` in the output is the trace of g.

    Args:
      X: inputs (d×N).
      Y: outputs (m×N).
      stats: :class:`~jaxlab.methods.nard.bound.SurrogateStats` (``n`` and ``rho`` are read).
      lam: graphical-lasso penalty λ.
      gamma0: initial γ, used only for the first value of the trace.
      max_iter: iteration cap.
      tol: stop when ``|Δg| ≤ tol · |g|``; a non-finite g stops the loop unconverged.
      glasso_iter: sweeps allowed to each warm-started graphical lasso.

    Returns:
      A :class:`~jaxlab.methods.nard.output.NARDResult`.
    """
    state, value = surrogate_init(X, Y, stats, lam, gamma0)

    def step(k, s):
        return surrogate_step(s, X, Y, stats, lam, glasso_iter=glasso_iter)

    it = iterate(step, state, value, max_iter=max_iter, stop=relative_change(tol))
    s = it.state
    return NARDResult(s.w, s.gamma, s.precision, it.trace, it.n_iter, it.converged)
