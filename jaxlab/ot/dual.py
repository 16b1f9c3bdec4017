"""The entropic-OT dual: objective, gradient, Hessian and plan, in log space with a fixed gauge.

Wang & Qiu (ICML 2025), Section 2: for a cost ``M`` (n × m), marginals ``a``, ``b`` and
regularisation ``η``, the dual of ``min_T <T, M> - η h(T)`` s.t. ``T 1 = a``, ``Tᵀ 1 = b`` is the
smooth convex problem

    min_{α, β} f(α, β) = η Σ_ij exp((α_i + β_j - M_ij) / η) - aᵀα - bᵀβ        (Eq. 3)

whose minimiser gives the plan ``T_ij = exp((α_i + β_j - M_ij) / η)``. ``f`` is invariant to
``(α + c, β - c)``, so the paper fixes the gauge ``β_m = 0`` and optimises over
``x = (α, β̃) ∈ R^{n+m-1}``, ``β̃ = β_{1:m-1}``. Then

    ∇f = (T 1 - a, T̃ᵀ 1 - b̃),     ∇²f = (1/η) [[diag(T 1), T̃], [T̃ᵀ, diag(T̃ᵀ 1)]]   (Eq. 4)

where ``T̃`` is ``T`` without its last column. The exponent is formed once per call (log space);
nothing ever forms ``exp(-M/η)`` on its own, so tiny ``η`` does not underflow the kernel.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp
from jaxtyping import Array, Float

__all__ = [
    "dual_hessian",
    "dual_value",
    "dual_value_grad",
    "dual_value_grad_rescaled",
    "gauge",
    "initial_point",
    "join",
    "plan",
    "split",
]


def split(x: Float[Array, " k"], n: int) -> tuple[Float[Array, " n"], Float[Array, " m"]]:
    """Splits ``x = (α, β̃)`` into ``α`` (n) and the full ``β`` with the gauge ``β_m = 0``."""
    alpha, beta_t = x[:n], x[n:]
    return alpha, jnp.concatenate([beta_t, jnp.zeros((1,), x.dtype)])


def join(alpha: Float[Array, " n"], beta: Float[Array, " m"]) -> Float[Array, " k"]:
    """Inverse of :func:`split` after moving ``β_m`` into ``α`` (the plan does not change)."""
    alpha, beta = gauge(alpha, beta)
    return jnp.concatenate([alpha, beta[:-1]])


def gauge(
    alpha: Float[Array, " n"], beta: Float[Array, " m"]
) -> tuple[Float[Array, " n"], Float[Array, " m"]]:
    """Returns ``(α + β_m, β - β_m)``: same plan, with the paper's gauge ``β_m = 0``."""
    shift = beta[-1]
    return alpha + shift, beta - shift


def plan(
    alpha: Float[Array, " n"], beta: Float[Array, " m"], cost: Float[Array, "n m"], epsilon
) -> Float[Array, "n m"]:
    """``T_ij = exp((α_i + β_j - M_ij) / η)`` (Eq. 3).

    Multiplied by ``1/η`` rather than divided by ``η``: a division per entry costs several
    multiplications on CPU, and this pass is most of a dual evaluation (the qn_ot README has the
    measurement); the two differ by at most one rounding of the exponent.
    """
    return jnp.exp((alpha[:, None] + beta[None, :] - cost) * (1.0 / epsilon))


def initial_point(cost, a, b, epsilon) -> Float[Array, " k"]:
    """``α = 0`` and ``β = η log b - η LSE_i(-M_ij/η)`` (exact column marginals), gauged.

    The start point of every dual solver here, as in the authors' code: one Sinkhorn half-step
    from ``α = 0``.
    """
    alpha = jnp.zeros(cost.shape[0], cost.dtype)
    beta = epsilon * (jnp.log(b) - logsumexp(-cost / epsilon, axis=0))
    return join(alpha, beta)


def dual_value_grad(
    x: Float[Array, " k"],
    cost: Float[Array, "n m"],
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    epsilon,
) -> tuple[Float[Array, ""], Float[Array, " k"], Float[Array, "n m"]]:
    """Dual objective ``f`` (Eq. 3), its gradient (Eq. 4) and the plan ``T`` at ``x``.

    Returns:
      ``(f, g, T)`` with ``g = (T 1 - a, T̃ᵀ 1 - b̃)`` of length ``n + m - 1``.
    """
    n, m = cost.shape
    alpha, beta = split(x, n)
    return _value_grad(x, plan(alpha, beta, cost, epsilon), a, b, epsilon)


def dual_value_grad_rescaled(
    x: Float[Array, " k"],
    d: Float[Array, " k"],
    step,
    T: Float[Array, "n m"],
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    epsilon,
) -> tuple[Float[Array, ""], Float[Array, " k"], Float[Array, "n m"]]:
    """:func:`dual_value_grad` at ``x + t d`` from the plan ``T`` at ``x``, without the cost.

    By Eq. 3 the plan at ``x + t d`` is ``T ⊙ exp(t d_α / η) exp(t d_β / η)ᵀ`` (``d_β`` with the
    gauge entry 0): a rank-one rescaling, two multiplications per entry instead of an ``exp``.
    Its entries carry the relative rounding of ``T`` plus a few ulps, and an entry of ``T`` that
    underflowed stays 0, so a caller rescales only over moves whose exponents ``|t d / η|`` add
    up to a bounded amount since the last exact :func:`dual_value_grad` (SPLR's line search:
    :data:`jaxlab.methods.qn_ot.splr.RESCALE_MAX_DRIFT`).
    """
    n = T.shape[0]
    d_alpha, d_beta = split(d, n)
    scale = step * (1.0 / epsilon)
    T = T * jnp.exp(scale * d_alpha)[:, None] * jnp.exp(scale * d_beta)[None, :]
    return _value_grad(x + step * d, T, a, b, epsilon)


def _value_grad(x, T, a, b, epsilon):
    """``(f, g, T)`` of :func:`dual_value_grad` from the plan ``T`` at ``x``."""
    n, m = T.shape
    alpha, beta = split(x, n)
    # The marginals as matrix-vector products: one BLAS pass over T each, where XLA's CPU
    # reductions of a plan-sized array cost more (the column sums most). HIGHEST keeps them exact
    # sums where a float32 product would otherwise run in bfloat16 (TPU) or TF32 (GPU).
    ones_m, ones_n = jnp.ones(m, T.dtype), jnp.ones(n, T.dtype)
    rows = jnp.matmul(T, ones_m, precision=lax.Precision.HIGHEST)
    cols = jnp.matmul(ones_n, T, precision=lax.Precision.HIGHEST)
    value = epsilon * jnp.sum(rows) - a @ alpha - b @ beta
    grad = jnp.concatenate([rows - a, cols[:-1] - b[:-1]])
    return value, grad, T


def dual_value(x, cost, a, b, epsilon) -> Float[Array, ""]:
    """Dual objective alone (Eq. 3); used by the tests through ``jax.grad`` / ``jax.hessian``."""
    return dual_value_grad(x, cost, a, b, epsilon)[0]


def dual_hessian(T: Float[Array, "n m"], epsilon) -> Float[Array, "k k"]:
    """Dense Hessian ``(1/η) [[diag(T1), T̃], [T̃ᵀ, diag(T̃ᵀ1)]]`` (Eq. 4), ``k = n + m - 1``."""
    T_t = T[:, :-1]
    top = jnp.concatenate([jnp.diag(T.sum(axis=1)), T_t], axis=1)
    bottom = jnp.concatenate([T_t.T, jnp.diag(T_t.sum(axis=0))], axis=1)
    return jnp.concatenate([top, bottom], axis=0) / epsilon
