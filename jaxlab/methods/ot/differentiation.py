"""Differentiating the entropic-OT value through the solver by the envelope theorem.

At the dual optimum ``(α*, β*)`` the optimal value of ``min <T, M> - η h(T)`` (with
``h(T) = -Σ T_ij (log T_ij - 1)``) equals ``aᵀα* + bᵀβ* - η Σ_ij T*_ij`` (strong duality, Wang &
Qiu, ICML 2025, Eq. 3). Since ``(α*, β*)`` is a stationary point, the implicit-function theorem
reduces to the envelope theorem: ``∂/∂M = T*``, ``∂/∂a = α*``, ``∂/∂b = β*`` (the gradient
in ``a, b`` is defined up to a constant because the masses must stay equal). No derivative flows
through the solver's iterations; ``custom_vjp`` returns these closed forms.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["entropic_ot_value"]


@partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def entropic_ot_value(
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    cost: Float[Array, "n m"],
    epsilon: float,
    method: str = "splr",
    tol: float = 1e-10,
) -> Float[Array, ""]:
    """Optimal value of the entropic OT problem, differentiable in ``a``, ``b`` and ``cost``."""
    return _forward(a, b, cost, epsilon, method, tol)[0]


def _forward(a, b, cost, epsilon, method, tol):
    from jaxlab.methods.ot.api import solve

    out = solve(a, b, cost, epsilon=epsilon, method=method, tol=tol)
    alpha, beta = out.potentials
    value = a @ alpha + b @ beta - epsilon * jnp.sum(out.matrix)
    return value, (alpha, beta, out.matrix)


def _bwd(epsilon, method, tol, residuals, cotangent):
    alpha, beta, T = residuals
    return cotangent * alpha, cotangent * beta, cotangent * T


entropic_ot_value.defvjp(_forward, _bwd)
