"""Differentiating the entropic-OT value through any solver, by the envelope theorem.

At the dual optimum ``(α*, β*)`` the optimal value of ``min <T, M> - η h(T)`` (with
``h(T) = -Σ T_ij (log T_ij - 1)``) equals

    v(a, b, M, η) = aᵀα* + bᵀβ* - η Σ_ij T*_ij,     T*_ij = exp((α*_i + β*_j - M_ij) / η)

(strong duality, Wang & Qiu, ICML 2025, Eq. 3). Since ``(α*, β*)`` is a stationary point of the
dual, the implicit-function theorem reduces to the envelope theorem: the derivative of ``v`` is the
partial derivative of this expression with the potentials held fixed, ``∂v/∂M = T*``,
``∂v/∂a = α*``, ``∂v/∂b = β*`` (the gradient in ``a, b`` is defined up to a constant, because
the masses must stay equal) and ``∂v/∂η = -h(T*)``. :func:`value_from_potentials` therefore
stops the gradient at the potentials and lets autodiff take the closed form: no derivative flows
through a solver's iterations, whichever solver produced the potentials.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.ot.dual import plan

__all__ = ["value_from_potentials"]


def value_from_potentials(
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    cost: Float[Array, "n m"],
    epsilon,
    potentials: tuple[Float[Array, " n"], Float[Array, " m"]],
) -> Float[Array, ""]:
    """``aᵀα + bᵀβ - η Σ T``: the OT value at optimal potentials, differentiable in ``a, b, M, η``.

    Args:
      a, b: marginals.
      cost: cost matrix ``M``.
      epsilon: regularisation ``η``.
      potentials: ``(α*, β*)`` at the dual optimum (any gauge), e.g. a solver's
        ``OTOutput.potentials``. Gradients do not flow into them (envelope theorem); they are
        cast to the dtype of the other inputs.

    Returns:
      The optimal value; its gradients are the envelope-theorem closed forms.
    """
    dtype = jnp.result_type(a, b, cost)
    alpha, beta = (jax.lax.stop_gradient(jnp.asarray(p).astype(dtype)) for p in potentials)
    return a @ alpha + b @ beta - epsilon * jnp.sum(plan(alpha, beta, cost, epsilon))
