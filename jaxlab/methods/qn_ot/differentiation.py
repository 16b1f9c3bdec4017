"""The entropic-OT value of any of this package's solvers, differentiable in ``a, b, M, ε``.

:func:`entropic_ot_value` solves with :func:`jaxlab.methods.qn_ot.solve` (SPLR by default) on
inputs whose gradient is stopped, and hands the optimal potentials to
:func:`jaxlab.ot.differentiation.value_from_potentials`, whose gradients are the envelope-theorem
closed forms ``∂/∂M = T*``, ``∂/∂a = α*``, ``∂/∂b = β*``, ``∂/∂ε = -h(T*)`` (Wang & Qiu, ICML 2025,
Eq. 3): no derivative flows through the solver's iterations, and no linear system is solved (the
plan and potentials of :func:`~jaxlab.methods.qn_ot.solve` need one; the value does not).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.checks import compute_dtype, is_traced
from jaxlab.methods.qn_ot.api import solve
from jaxlab.ot.differentiation import check_convention, value_from_potentials
from jaxlab.ot.problem import read_problem

__all__ = ["entropic_ot_value"]


def _stop(x):
    # Only tracers need it; a concrete numpy input stays numpy (and float64 with x64 off).
    return jax.lax.stop_gradient(x) if is_traced(x) else x


def entropic_ot_value(
    a: Float[Array, " n"] | None,
    b: Float[Array, " m"] | None,
    cost: Any,
    epsilon: Any = None,
    *,
    method: str = "splr",
    tol: float | None = None,
    convention: str = "paper",
    unconverged: str = "warn",
    **options: Any,
) -> Float[Array, ""]:
    """Optimal value of the entropic OT problem, differentiable in ``a``, ``b``, the cost and ``ε``.

    The value is ``<T*, M> - η h(T*)`` with ``h(T) = -Σ T (log T - 1)``, which by strong duality is
    the dual optimum ``aᵀα* + bᵀβ* - η Σ T*`` (Wang & Qiu, ICML 2025, Eq. 3); ott-jax's
    conventions differ from it by constants (:mod:`jaxlab.ot.differentiation`).

    Args:
      a, b, cost, epsilon: the problem as :func:`~jaxlab.methods.qn_ot.solve` takes it (a matrix,
        an ott-jax ``Geometry`` / ``PointCloud``, or a ``LinearProblem`` with ``a = b = None``).
        Gradients reach a geometry's points through its cost matrix.
      method, tol, unconverged: as for :func:`~jaxlab.methods.qn_ot.solve`. The value's error is
        about ``tol`` times the size of the potentials: pass a small ``tol`` (float64) when
        comparing values, e.g. by finite differences.
      **options: the method's options, as for :func:`~jaxlab.methods.qn_ot.solve`.
      convention: ``"paper"`` (above), or ott-jax's ``"ent_reg_cost"`` (``<T, M> - η H(T)``,
        ``H(T) = -Σ T log T``: ``η`` more for probability marginals) or ``"reg_ot_cost"``
        (``<T, M> + η KL(T ‖ a bᵀ)``).

    Returns:
      The value, a scalar in the inputs' dtype.
    """
    check_convention(convention)
    cost, a, b, epsilon = read_problem(a, b, cost, epsilon)
    dtype = compute_dtype(a, b, cost)
    out = solve(
        _stop(a),
        _stop(b),
        _stop(cost),
        epsilon=_stop(epsilon),
        method=method,
        tol=tol,
        unconverged=unconverged,
        **options,
    )
    a, b, cost, epsilon = (jnp.asarray(x, dtype) for x in (a, b, cost, epsilon))
    return value_from_potentials(a, b, cost, epsilon, out.potentials, convention)
