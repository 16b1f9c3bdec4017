"""Graphical lasso in JAX: block coordinate descent on the covariance (Friedman et al., 2008).

Solves ``max_Ω log|Ω| − tr(S Ω) − λ Σ_{i≠j} |Ω_ij|`` (scikit-learn's convention: the diagonal is not
penalised) for an m×m empirical covariance S. The dual variable ``W = Ω⁻¹`` keeps ``W_jj = S_jj``;
for each column j, with ``W₁₁`` the other rows/columns, the column update is the lasso

    β_j = argmin_β ½ βᵀ W₁₁ β − βᵀ s₁₂ + λ‖β‖₁,   w₁₂ ← W₁₁ β_j,

solved by cyclic coordinate descent ``β_k ← soft(s_k − Σ_{l≠k} W_kl β_l, λ) / W_kk``. At the end
``Ω_jj = 1 / (W_jj − w₁₂ᵀ β_j)`` and ``Ω₁₂ = −β_j Ω_jj`` (Friedman et al. 2008, eqs. 2.4-2.6).
Shapes stay static: column j is handled on the full m-vector with ``β_j`` pinned to 0. A previous
precision warm-starts the solve (``W = Ω₀⁻¹`` with its diagonal reset to S's, ``β_j = −Ω₀[:, j] /
Ω₀[j, j]``), which is how the NARD solvers call it once per iteration. Convergence: the largest
change of W over a sweep below ``tol`` times the mean of diag S.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

__all__ = ["GlassoResult", "graphical_lasso"]


class GlassoResult(NamedTuple):
    """Output of :func:`graphical_lasso`.

    Attributes:
      precision: Ω (m×m, symmetric).
      covariance: W = the estimated covariance (m×m).
      n_iter: outer sweeps over the columns.
      converged: whether the change of W fell below tolerance before ``max_iter``.
    """

    precision: Float[Array, "m m"]
    covariance: Float[Array, "m m"]
    n_iter: Int[Array, ""]
    converged: Bool[Array, ""]


def _soft(x: Array, t: Array) -> Array:
    return jnp.sign(x) * jnp.maximum(jnp.abs(x) - t, 0.0)


def _lasso_column(w, s_col, beta, j, lam, lasso_iter, lasso_tol):
    """Coordinate descent for column j's lasso on the full m-vector (β_j pinned to 0)."""
    m = w.shape[0]
    scale = jnp.mean(jnp.abs(s_col)) + jnp.finfo(w.dtype).tiny

    def coord(k, beta):
        r = s_col[k] - w[k] @ beta + w[k, k] * beta[k]
        new = jnp.where(k == j, 0.0, _soft(r, lam) / w[k, k])
        return beta.at[k].set(new)

    def body(carry):
        it, beta, _ = carry
        new = lax.fori_loop(0, m, coord, beta)
        return it + 1, new, jnp.max(jnp.abs(new - beta))

    def cond(carry):
        it, _, delta = carry
        return (it < lasso_iter) & (delta > lasso_tol * scale)

    init = (jnp.asarray(0), beta, jnp.asarray(jnp.inf, w.dtype))
    return lax.while_loop(cond, body, init)[1]


def _sweep(w, betas, s, lam, lasso_iter, lasso_tol):
    m = w.shape[0]

    def column(j, carry):
        w, betas = carry
        beta = _lasso_column(w, s[:, j], betas[:, j], j, lam, lasso_iter, lasso_tol)
        col = jnp.where(jnp.arange(m) == j, s[j, j], w @ beta)
        w = w.at[:, j].set(col).at[j, :].set(col)
        return w, betas.at[:, j].set(beta)

    return lax.fori_loop(0, m, column, (w, betas))


def graphical_lasso(
    cov: Float[Array, "m m"],
    lam: Float[Array, ""] | float,
    *,
    init: Float[Array, "m m"] | None = None,
    tol: float = 1e-6,
    max_iter: int = 200,
    lasso_iter: int = 500,
    lasso_tol: float = 1e-10,
) -> GlassoResult:
    """Sparse inverse covariance by block coordinate descent (jit-able, warm-startable).

    Args:
      cov: empirical covariance S (m×m, symmetric PSD with a positive diagonal).
      lam: ℓ1 penalty on the off-diagonal entries of Ω (scikit-learn's ``alpha``); ``lam = 0``
        gives ``S⁻¹`` when S is positive definite.
      init: a previous precision to warm-start from; ``None`` starts from ``W = S``, ``β = 0``.
      tol: stop when ``max |ΔW| < tol · mean(diag S)`` over a sweep.
      max_iter: maximum number of sweeps over the m columns.
      lasso_iter: maximum coordinate-descent sweeps of each column's lasso.
      lasso_tol: relative tolerance of each column's lasso.

    Returns:
      A :class:`GlassoResult`.
    """
    m = cov.shape[0]
    s = 0.5 * (cov + cov.T)
    lam = jnp.asarray(lam, s.dtype)
    diag_s = jnp.diagonal(s)
    # Tolerances below the dtype's resolution would only burn the iteration caps (float32).
    eps = float(jnp.finfo(s.dtype).eps)
    tol, lasso_tol = max(tol, 10 * eps), max(lasso_tol, 10 * eps)
    if init is None:
        w0, b0 = s, jnp.zeros_like(s)
    else:
        # Rescale Ω₀⁻¹ by a positive diagonal D so that diag W₀ = diag S: unlike overwriting the
        # diagonal this keeps W₀ positive definite. β_j follows from D⁻¹ Ω₀ D⁻¹.
        w_prev = jnp.linalg.inv(init)
        w_prev = 0.5 * (w_prev + w_prev.T)
        scale = jnp.sqrt(diag_s / jnp.diagonal(w_prev))
        w0 = scale[:, None] * w_prev * scale[None, :]
        w0 = w0.at[jnp.diag_indices(m)].set(diag_s)
        theta = init / (scale[:, None] * scale[None, :])
        b0 = -theta / jnp.diagonal(theta)[None, :]
        b0 = b0.at[jnp.diag_indices(m)].set(0.0)
    scale = jnp.mean(diag_s)

    def body(carry):
        it, w, betas, _ = carry
        new_w, new_b = _sweep(w, betas, s, lam, lasso_iter, lasso_tol)
        return it + 1, new_w, new_b, jnp.max(jnp.abs(new_w - w))

    def cond(carry):
        it, _, _, delta = carry
        return (it < max_iter) & (delta > tol * scale)

    it, w, betas, delta = lax.while_loop(
        cond, body, (jnp.asarray(0), w0, b0, jnp.asarray(jnp.inf, s.dtype))
    )
    # Ω from (W, β): Ω_jj = 1/(W_jj − w₁₂ᵀβ_j), Ω_{·j} = −β_j Ω_jj (β_jj = 0).
    theta_jj = 1.0 / (jnp.diagonal(w) - jnp.sum(w * betas, axis=0))
    prec = -betas * theta_jj[None, :]
    prec = prec.at[jnp.diag_indices(m)].set(theta_jj)
    prec = 0.5 * (prec + prec.T)
    return GlassoResult(prec, w, it, delta <= tol * scale)
