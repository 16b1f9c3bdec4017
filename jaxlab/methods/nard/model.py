"""The Network ARD model: sufficient statistics, posterior of W and the marginal likelihood.

Model (Zhang et al., ICML 2025, Sec. 3): inputs ``X`` (d×N), outputs ``Y`` (m×N),
``Y = W X + E`` with ``E ~ MN(0, V, I_N)`` and prior ``W ~ MN(0, V, K⁻¹)``, ``K = diag(α)``,
``Ω = V⁻¹``. Then ``vec(Y) ~ N(0, C ⊗ V)`` with ``C = I_N + Xᵀ K⁻¹ X`` and

    log p(Y | α, Ω) = −(mN/2) log 2π + (N/2) log|Ω| − (m/2) log|C| − ½ tr(Ω Y C⁻¹ Yᵀ).

Everything here works in d-space and in the *variance* parametrisation ``γ = 1/α`` so that a pruned
feature (``α = ∞``) is the exact value ``γ = 0``. With ``B = I_d + Γ^{1/2} G Γ^{1/2}``, ``G = XXᵀ``:
``|C| = |B|`` (determinant lemma), ``Σ = (K + G)⁻¹ = Γ^{1/2} B⁻¹ Γ^{1/2}``, ``M = Y Xᵀ Σ`` and
(Woodbury) ``Y C⁻¹ Yᵀ = YYᵀ − (YXᵀ) Σ (XYᵀ) = (Y − MX)(Y − MX)ᵀ + M K Mᵀ``. The penalised
objective of all four algorithms is ``L = log p(Y|α, Ω) − (N/2)·λ·‖Ω‖₁,off``, scaled so that its
Ω-part is ``(N/2)·[log|Ω| − tr(Ω S) − λ‖Ω‖₁,off]`` with ``S = Y C⁻¹ Yᵀ / N``: exactly the graphical
lasso of scikit-learn with ``alpha = λ``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = [
    "Posterior",
    "Stats",
    "log_marginal_likelihood",
    "objective",
    "penalised_gaussian",
    "posterior",
    "initial_gamma",
    "residual_cov",
    "suff_stats",
]


class Stats(NamedTuple):
    """Sufficient statistics of (X, Y) for the exact methods (``nard``, ``sequential``).

    The surrogate methods read :class:`~jaxlab.methods.nard.bound.SurrogateStats` instead, which
    has no d×d matrix.

    Attributes:
      gram: ``G = XXᵀ`` (d×d).
      cross: ``P = YXᵀ`` (m×d).
      yy: ``YYᵀ`` (m×m).
      n: the number of samples N (a float scalar).
    """

    gram: Float[Array, "d d"]
    cross: Float[Array, "m d"]
    yy: Float[Array, "m m"]
    n: Float[Array, ""]


def suff_stats(X: Float[Array, "d N"], Y: Float[Array, "m N"]) -> Stats:
    """Computes :class:`Stats` (O(d²N + mdN + m²N))."""
    return Stats(X @ X.T, Y @ X.T, Y @ Y.T, jnp.asarray(X.shape[1], X.dtype))


def initial_gamma(X: Float[Array, "d N"]) -> Float[Array, " d"]:
    """``γ₀ = N / (d ‖x_i‖²)``: the prior explains about one noise variance in total.

    Starting every feature at unit prior variance instead lets d > N features explain Y exactly at
    first, and the ascent then needs many more iterations to prune them again. A zero row (a
    constant feature after centring) carries no information: its ``γ₀`` is 0, which prunes it for
    good, and d counts only the non-zero rows, so such rows change nothing else.
    """
    n = X.shape[1]
    norms = jnp.sum(X * X, axis=1)
    nonzero = norms > 0
    d = jnp.maximum(jnp.sum(nonzero), 1).astype(X.dtype)
    return jnp.where(nonzero, n / (d * jnp.where(nonzero, norms, 1.0)), 0.0)


class Posterior(NamedTuple):
    """Posterior quantities of W for given γ (all that an α-step or an Ω-step needs).

    Attributes:
      mean: ``M = Y Xᵀ Σ`` (m×d), the posterior mean of W.
      sigma_diag: ``diag Σ`` (d,).
      well_determined: ``1 − α_i Σ_ii`` (d,), MacKay's γ_i, computed without cancellation.
      sigma: ``Σ`` (d×d).
      logdet_c: ``log|C| = log|B|``.
    """

    mean: Float[Array, "m d"]
    sigma_diag: Float[Array, " d"]
    well_determined: Float[Array, " d"]
    sigma: Float[Array, "d d"]
    logdet_c: Float[Array, ""]


def posterior(
    gamma: Float[Array, " d"], gram: Float[Array, "d d"], cross: Float[Array, "m d"]
) -> Posterior:
    """Posterior of W for prior variances ``γ = 1/α`` (γ_i = 0 prunes feature i exactly).

    The one place the posterior is factorised: ``nard`` passes all d features, ``sequential`` the
    p slots of its active set (``G_AA``, ``P_A``; empty slots carry γ = 0). Uses one Cholesky of
    ``B = I + Γ^{1/2} G Γ^{1/2}`` (well conditioned for any γ ≥ 0).
    ``1 − α_i Σ_ii = 1 − (B⁻¹)_ii = (B⁻¹ (B − I))_ii`` is summed directly, which stays accurate
    when ``γ_i G_ii`` is below float precision (where ``1 − (B⁻¹)_ii`` would cancel to 0).
    """
    d = gamma.shape[0]
    sg = jnp.sqrt(gamma)
    a = sg[:, None] * gram * sg[None, :]
    chol = jnp.linalg.cholesky(jnp.eye(d, dtype=a.dtype) + a)
    b_inv = jax.scipy.linalg.cho_solve((chol, True), jnp.eye(d, dtype=a.dtype))
    sigma = sg[:, None] * b_inv * sg[None, :]
    return Posterior(
        mean=cross @ sigma,
        sigma_diag=jnp.diagonal(sigma),
        well_determined=jnp.sum(b_inv * a, axis=1),
        sigma=sigma,
        logdet_c=2.0 * jnp.sum(jnp.log(jnp.diagonal(chol))),
    )


def residual_cov(
    sigma: Float[Array, "d d"], cross: Float[Array, "m d"], yy: Float[Array, "m m"], n: Array
) -> Float[Array, "m m"]:
    """``S = Y C⁻¹ Yᵀ / N = [YYᵀ − P Σ Pᵀ] / N`` (the Ω-step's covariance), symmetrised.

    The one place S is formed, for all d features or an active set's block (see :func:`posterior`).
    """
    s = (yy - cross @ sigma @ cross.T) / n
    return 0.5 * (s + s.T)


def penalised_gaussian(
    precision: Float[Array, "m m"], cov: Float[Array, "m m"], lam: Float[Array, ""] | float
) -> Float[Array, ""]:
    """``log|Ω| − tr(Ω S) − λ ‖Ω‖₁,off``: the graphical-lasso objective (scikit-learn's sign)."""
    sign, logdet = jnp.linalg.slogdet(precision)
    logdet = jnp.where(sign > 0, logdet, -jnp.inf)  # Ω must be positive definite.
    off = jnp.sum(jnp.abs(precision)) - jnp.sum(jnp.abs(jnp.diagonal(precision)))
    return logdet - jnp.sum(precision * cov) - lam * off


def objective(
    logdet_c: Array,
    cov: Float[Array, "m m"],
    precision: Float[Array, "m m"],
    lam: Float[Array, ""] | float,
    n: Array,
) -> Float[Array, ""]:
    """Penalised log marginal likelihood from ``log|C|`` and ``S = Y C⁻¹ Yᵀ / N``.

    ``L = −(mN/2) log 2π − (m/2) log|C| + (N/2)[log|Ω| − tr(Ω S) − λ‖Ω‖₁,off]``.
    """
    m = cov.shape[0]
    return (
        -0.5 * m * n * math.log(2 * math.pi)
        - 0.5 * m * logdet_c
        + 0.5 * n * penalised_gaussian(precision, cov, lam)
    )


def log_marginal_likelihood(
    X: Float[Array, "d N"],
    Y: Float[Array, "m N"],
    alpha: Float[Array, " d"],
    precision: Float[Array, "m m"],
) -> Float[Array, ""]:
    """``log p(Y | α, Ω)`` evaluated in d-space (``α_i = inf`` allowed: feature i is pruned).

    Args:
      X: inputs, d×N.
      Y: outputs, m×N.
      alpha: prior precisions of the d features.
      precision: output precision Ω (m×m, positive definite).

    Returns:
      The log marginal likelihood (no ℓ1 penalty).
    """
    stats = suff_stats(X, Y)
    post = posterior(1.0 / alpha, stats.gram, stats.cross)
    cov = residual_cov(post.sigma, stats.cross, stats.yy, stats.n)
    return objective(post.logdet_c, cov, precision, 0.0, stats.n)
