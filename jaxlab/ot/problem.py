"""The entropic-OT problem as arrays, read from ott-jax's types, and checked once outside ``jit``.

jaxlab defines no problem class of its own: a cost is a matrix or an ott-jax ``Geometry`` (which
carries ``ε``), and a whole balanced problem is an ott-jax ``LinearProblem`` (``tau_a = tau_b =
1``).
The solvers of :mod:`jaxlab.ot` work on plain arrays ``(cost, a, b, ε)`` inside ``jit``; this module
turns the user's objects into those arrays (:func:`unpack_cost`, :func:`from_linear_problem`) and
checks concrete inputs (:func:`check_inputs`, :func:`check_positive`) so that a mistake raises one
:class:`~jaxlab.core.errors.ConfigError` line instead of a solver that quietly returns NaN. Under
``jax.jit`` the values are unknown and the checks are skipped (:func:`is_traced`).
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import numpy as np

from jaxlab.core.errors import ConfigError

__all__ = [
    "check_arrays",
    "check_inputs",
    "check_positive",
    "check_solver_call",
    "from_linear_problem",
    "is_traced",
    "unpack_cost",
]


def is_traced(*xs: Any) -> bool:
    """True when any leaf of ``xs`` is a JAX tracer (the call is being traced, e.g. by ``jit``)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(xs))


def check_positive(name: str, value: Any) -> None:
    """Raises ConfigError unless ``value`` is a finite positive real number (not a str or bool)."""
    arr = np.asarray(value) if not isinstance(value, str | bytes) else None
    if arr is None or arr.shape != () or arr.dtype.kind not in "fiu":
        raise ConfigError(
            f"{name} must be a positive number, got {value!r} ({type(value).__name__})"
        )
    if not (np.isfinite(arr) and arr > 0):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


def unpack_cost(cost: Any, epsilon: Any) -> tuple[Any, Any]:
    """``(cost matrix, ε)`` from a matrix or an ott-jax ``Geometry`` (whose ``ε`` is the default).

    Raises:
      ConfigError: ``cost`` is a matrix and ``epsilon`` is None.
    """
    # A Geometry exists only once its module is loaded: importing ott-jax here for a plain matrix
    # would add seconds to the first solve of a process.
    geometry = sys.modules.get("ott.geometry.geometry")
    if geometry is not None and isinstance(cost, geometry.Geometry):
        return cost.cost_matrix, cost.epsilon if epsilon is None else epsilon
    if epsilon is None:
        raise ConfigError("epsilon is required when cost is a matrix (pass epsilon=...)")
    return cost, epsilon


def from_linear_problem(problem: Any) -> tuple[Any, Any, Any, Any]:
    """``(cost, a, b, ε)`` of a balanced ott-jax ``LinearProblem`` (uniform marginals if unset).

    Raises:
      ConfigError: the problem is unbalanced (``tau_a`` or ``tau_b`` below 1): that is KL-relaxed
        transport, a different problem from the one these solvers solve.
    """
    if problem.tau_a != 1.0 or problem.tau_b != 1.0:
        raise ConfigError(
            f"the problem is unbalanced (tau_a={problem.tau_a}, tau_b={problem.tau_b}); "
            "these solvers need tau_a = tau_b = 1"
        )
    cost, epsilon = unpack_cost(problem.geom, None)
    return cost, problem.a, problem.b, epsilon


def check_arrays(a: Any, b: Any, cost: Any, *, min_points: int = 1) -> tuple[np.ndarray, ...]:
    """``(a, b, cost)`` as numpy arrays, or a ConfigError: an ``(n, m)`` real, finite cost with
    ``n, m >= min_points`` and real, finite marginals of shapes ``(n,)`` and ``(m,)``."""
    a, b, cost = np.asarray(a), np.asarray(b), np.asarray(cost)
    if cost.ndim != 2 or min(cost.shape) < min_points:
        at_least = f" with n, m >= {min_points}" if min_points > 1 else ""
        raise ConfigError(f"cost must be an (n, m) matrix{at_least}, got shape {cost.shape}")
    if a.shape != (cost.shape[0],) or b.shape != (cost.shape[1],):
        raise ConfigError(
            f"marginals of shapes {a.shape}, {b.shape} do not fit a cost of shape {cost.shape}"
        )
    for name, x in (("a", a), ("b", b), ("cost", cost)):
        if x.dtype.kind not in "fiu":
            raise ConfigError(f"{name} must hold real numbers, got dtype {x.dtype}")
        if not np.all(np.isfinite(x)):
            raise ConfigError(f"{name} contains NaN or inf; pass finite values")
    return a, b, cost


def check_inputs(a: Any, b: Any, cost: Any, epsilon: Any, init: Any = None) -> None:
    """Raises ConfigError for marginals or costs the dual cannot handle (concrete values only).

    The dual (Wang & Qiu, ICML 2025, Eq. 3) needs an ``(n, m)`` cost with ``n, m ≥ 2``, finite
    values, strictly positive marginals (``log a`` appears in every solver) of equal mass, and a
    finite ``ε > 0``; a warm start ``init = (α₀, β₀)`` needs finite potentials of shapes ``(n,)``
    and ``(m,)``.
    """
    check_positive("epsilon", epsilon)
    a, b, cost = check_arrays(a, b, cost, min_points=2)
    for name, x in (("a", a), ("b", b)):
        if np.any(x < 0):
            raise ConfigError(f"marginal {name} has negative entries; pass non-negative weights")
        if np.any(x == 0):
            raise ConfigError(
                f"marginal {name} has zero entries; drop zero-mass points or add a small constant"
            )
    if abs(a.sum() - b.sum()) > 1e-6 * max(a.sum(), b.sum()):
        raise ConfigError(f"marginals have different mass ({a.sum():.6g} vs {b.sum():.6g})")
    if init is not None:
        if not isinstance(init, tuple | list) or len(init) != 2:
            raise ConfigError("init must be a pair of potentials (alpha0, beta0)")
        for name, x, n in (("alpha0", init[0], cost.shape[0]), ("beta0", init[1], cost.shape[1])):
            x = np.asarray(x)
            if x.shape != (n,) or x.dtype.kind not in "fiu" or not np.all(np.isfinite(x)):
                raise ConfigError(
                    f"init {name} must hold {n} finite numbers for a cost of shape "
                    f"{cost.shape}, got shape {x.shape}"
                )


def check_solver_call(a, b, cost, epsilon, init, *, tol: Any, max_iter: Any) -> None:
    """The checks of a direct call of one of :mod:`jaxlab.ot`'s dual solvers (eager calls only).

    :func:`check_inputs` plus a positive ``tol`` and an integer ``max_iter >= 1``; skipped when
    any input is traced (the caller, e.g. :func:`jaxlab.methods.qn_ot.solve`, checked them).
    """
    if is_traced(a, b, cost, epsilon, init):
        return
    check_positive("tol", tol)
    if isinstance(max_iter, bool) or not isinstance(max_iter, int | np.integer) or max_iter < 1:
        raise ConfigError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    check_inputs(a, b, cost, epsilon, init)
