"""The surrogate lower bound shared by ``surrogate`` and ``sequential_surrogate``: ρ, S̃ and g.

Zhang et al., ICML 2025, Sec. 4.3 replaces the intermediate matrix ``K + XXᵀ`` of the marginal
likelihood by the diagonal ``K + ρI`` through a Lipschitz (isotropic quadratic) majoriser of the
data term around an anchor ``W₀``; :mod:`~jaxlab.methods.nard.surrogate` derives the bound

    g(α, Ω; W₀) = −(mN/2) log 2π + (N/2)[log|Ω| − tr(Ω S̃) − λ‖Ω‖₁,off] − (m/2) Σ_i log(1 + ρ/α_i),
    N S̃ = R₀R₀ᵀ + B W₀ᵀ + W₀ Bᵀ − ρ W₀W₀ᵀ − B D⁻¹ Bᵀ,   B = R₀Xᵀ + ρW₀,   D = K + ρI.

This module holds what both surrogate solvers read: the statistics (:class:`SurrogateStats`, with
no d×d matrix: the bound needs only ``ρ``, never ``XXᵀ`` itself), ``S̃`` (:func:`surrogate_cov`)
and ``g`` (:func:`surrogate_value`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.methods.nard.model import penalised_gaussian

__all__ = [
    "SurrogateStats",
    "lipschitz_constant",
    "surrogate_cov",
    "surrogate_stats",
    "surrogate_value",
]


class SurrogateStats(NamedTuple):
    """What the surrogate solvers read from the data besides X (and Y for ``surrogate``).

    Attributes:
      cross: ``P = YXᵀ`` (m×d).
      yy: ``YYᵀ`` (m×m).
      n: the number of samples N (a float scalar).
      rho: ``ρ ≥ λ_max(XXᵀ)``, from :func:`lipschitz_constant`.
    """

    cross: Float[Array, "m d"]
    yy: Float[Array, "m m"]
    n: Float[Array, ""]
    rho: Float[Array, ""]


def lipschitz_constant(X: Float[Array, "d N"]) -> Float[Array, ""]:
    """``ρ = λ_max(XXᵀ)`` (times ``1 + slack``), computed from the N×N matrix ``XᵀX``.

    Sec. 4.3's bound holds only for ``ρ ≥ λ_max(XXᵀ)``: with a smaller ρ the isotropic quadratic
    no longer majorises the data term, ``g ≤ L`` fails and the ascent loses its monotonicity. So ρ
    must not be underestimated. Power and Lanczos iterations approach λ_max from below and would
    need a safety factor whose size depends on the gap to the second eigenvalue, which is small for
    random designs (their top eigenvalues crowd at the Marchenko-Pastur edge). ``XᵀX`` has the
    same non-zero eigenvalues as ``XXᵀ``; forming it costs O(dN²) and its ``eigvalsh`` O(N³), both
    linear in d like the surrogate's O(mdN) iteration, and the result is exact up to round-off.
    The d×d Gram matrix and its O(d³) eigendecomposition are never formed. The relative slack
    (1e-6, or more in low precision) covers the round-off of forming and decomposing ``XᵀX``.
    """
    d, n = X.shape
    eps = float(jnp.finfo(X.dtype).eps)
    slack = max(1e-6, 10.0 * math.sqrt(d) * eps)
    return jnp.linalg.eigvalsh(X.T @ X)[-1] * (1 + slack)


def surrogate_stats(X: Float[Array, "d N"], Y: Float[Array, "m N"]) -> SurrogateStats:
    """Computes :class:`SurrogateStats` in O(mdN + m²N + dN² + N³): no d×d matrix."""
    return SurrogateStats(Y @ X.T, Y @ Y.T, jnp.asarray(X.shape[1], X.dtype), lipschitz_constant(X))


def surrogate_cov(
    rr: Float[Array, "m m"],
    b_old: Float[Array, "m p"],
    w_old: Float[Array, "m p"],
    b_new: Float[Array, "m q"],
    c_new: Float[Array, " q"],
    rho: Array,
    n: Array,
) -> Float[Array, "m m"]:
    """``S̃`` (symmetrised): the one place the bound's covariance is formed.

    Args:
      rr: ``R₀R₀ᵀ`` for the anchor's residual ``R₀ = Y − W₀X``.
      b_old: the columns of ``B`` on the anchor's support.
      w_old: the anchor ``W₀`` on the same columns.
      b_new: the columns of ``B`` on the support of the new α (the ``B D⁻¹ Bᵀ`` term).
      c_new: ``diag D⁻¹ = γ/(1 + γρ)`` on those columns.
      rho: ρ.
      n: N.
    """
    bw = b_old @ w_old.T
    s = rr + bw + bw.T - rho * (w_old @ w_old.T) - (b_new * c_new[None, :]) @ b_new.T
    return 0.5 * (s + s.T) / n


def surrogate_value(
    gamma: Float[Array, " p"],
    cov: Float[Array, "m m"],
    precision: Float[Array, "m m"],
    lam: Float[Array, ""],
    n: Array,
    rho: Array,
) -> Float[Array, ""]:
    """``g`` from γ (over the features that carry one), ``S̃`` and Ω (module docstring)."""
    m = cov.shape[0]
    return (
        -0.5 * m * n * math.log(2 * math.pi)
        - 0.5 * m * jnp.sum(jnp.log1p(gamma * rho))
        + 0.5 * n * penalised_gaussian(precision, cov, lam)
    )
