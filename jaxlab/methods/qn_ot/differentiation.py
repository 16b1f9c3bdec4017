"""The entropic-OT value of any of this package's solvers, differentiable in ``a``, ``b``, ``M``.

:func:`entropic_ot_value` solves with :func:`jaxlab.methods.qn_ot.solve` (SPLR by default) on
inputs whose gradient is stopped, and hands the optimal potentials to
:func:`jaxlab.ot.differentiation.value_from_potentials`, whose gradients are the envelope-theorem
closed forms ``∂/∂M = T*``, ``∂/∂a = α*``, ``∂/∂b = β*`` (Wang & Qiu, ICML 2025, Eq. 3): no
derivative flows through the solver's iterations.
"""

from __future__ import annotations

import jax
from jaxtyping import Array, Float

from jaxlab.methods.qn_ot.api import solve
from jaxlab.ot.differentiation import value_from_potentials

__all__ = ["entropic_ot_value"]


def _stop(x):
    # Only tracers need it; a concrete numpy input stays numpy (and float64 with x64 off).
    return jax.lax.stop_gradient(x) if isinstance(x, jax.core.Tracer) else x


def entropic_ot_value(
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    cost: Float[Array, "n m"],
    epsilon: float,
    method: str = "splr",
    tol: float = 1e-10,
) -> Float[Array, ""]:
    """Optimal value of the entropic OT problem, differentiable in ``a``, ``b`` and ``cost``."""
    out = solve(_stop(a), _stop(b), _stop(cost), epsilon=epsilon, method=method, tol=tol)
    return value_from_potentials(a, b, cost, epsilon, out.potentials)
