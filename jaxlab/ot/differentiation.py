"""The entropic-OT value from optimal potentials, in three conventions, with envelope gradients.

At the dual optimum ``(α*, β*)`` the optimal value of ``min <T, M> - η h(T)`` (with
``h(T) = -Σ T_ij (log T_ij - 1)``) equals

    v(a, b, M, η) = aᵀα* + bᵀβ* - η Σ_ij T*_ij,     T*_ij = exp((α*_i + β*_j - M_ij) / η)

(strong duality, Wang & Qiu, ICML 2025, Eq. 3): the ``"paper"`` convention. ott-jax reports the
same optimum with other constants: ``SinkhornOutput.ent_reg_cost`` is ``<T, M> - η H(T)`` with
``H(T) = -Σ T log T``, i.e. ``v + η ‖a‖₁‖b‖₁`` (``η`` more for probability marginals), and
``SinkhornOutput.reg_ot_cost`` is ``<T, M> + η KL(T ‖ a bᵀ)``, i.e.
``v + η (‖a‖₁‖b‖₁ - Σ a log a - Σ b log b)`` (:data:`CONVENTIONS`). Since ``(α*, β*)`` is a
stationary point of the dual, the implicit-function theorem reduces to the envelope theorem: the
derivative of ``v`` is the partial derivative of this expression with the potentials held fixed,
``∂v/∂M = T*``, ``∂v/∂a = α*``, ``∂v/∂b = β*`` (the gradient in ``a, b`` is defined up to a
constant, because the masses must stay equal) and ``∂v/∂η = -h(T*)``. :func:`value_from_potentials`
therefore stops the gradient at the potentials and lets autodiff take the closed form: no
derivative flows through a solver's iterations, whichever solver produced the potentials.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy
from jaxtyping import Array, Float

from jaxlab.ot.dual import plan
from jaxlab.ot.problem import check_choice

__all__ = ["CONVENTIONS", "check_convention", "value_from_potentials"]

# The value conventions: the paper's dual value (Eq. 3), and ott-jax's two (SinkhornOutput's
# attributes of these names).
CONVENTIONS = ("paper", "ent_reg_cost", "reg_ot_cost")


def check_convention(convention: Any) -> str:
    """``convention`` if it is one of :data:`CONVENTIONS`, else a one-line ConfigError."""
    return check_choice("convention", convention, CONVENTIONS)


def value_from_potentials(
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    cost: Float[Array, "n m"],
    epsilon,
    potentials: tuple[Float[Array, " n"], Float[Array, " m"]],
    convention: str = "paper",
) -> Float[Array, ""]:
    """The OT value at optimal potentials, differentiable in ``a, b, M, η`` (envelope theorem).

    Args:
      a, b: marginals.
      cost: cost matrix ``M``.
      epsilon: regularisation ``η``.
      potentials: ``(α*, β*)`` at the dual optimum (any gauge), e.g. a solver's
        ``OTOutput.potentials``. Gradients do not flow into them (envelope theorem); they are
        cast to the dtype of the other inputs.
      convention: ``"paper"`` (``aᵀα + bᵀβ - η Σ T``, Eq. 3), or ott-jax's ``"ent_reg_cost"`` or
        ``"reg_ot_cost"`` (module docstring).

    Returns:
      The optimal value; its gradients are the envelope-theorem closed forms.
    """
    check_convention(convention)
    dtype = jnp.result_type(a, b, cost)
    alpha, beta = (jax.lax.stop_gradient(jnp.asarray(p).astype(dtype)) for p in potentials)
    value = a @ alpha + b @ beta - epsilon * jnp.sum(plan(alpha, beta, cost, epsilon))
    if convention == "paper":
        return value
    value = value + epsilon * jnp.sum(a) * jnp.sum(b)
    if convention == "ent_reg_cost":
        return value
    return value - epsilon * (jnp.sum(xlogy(a, a)) + jnp.sum(xlogy(b, b)))
