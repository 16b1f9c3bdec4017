"""The entropic-OT problem as arrays read from ott-jax's types, its dtype, tolerance and checks.

jaxlab defines no problem class of its own: a cost is a matrix or an ott-jax ``Geometry`` (a
``PointCloud`` included; it carries ``ε``), and a whole balanced problem is an ott-jax
``LinearProblem`` (``tau_a = tau_b = 1``; it carries ``a`` and ``b``). The solvers of
:mod:`jaxlab.ot` work on plain arrays ``(cost, a, b, ε)`` inside ``jit``; :func:`read_problem` turns
the user's objects into those arrays wherever a cost is accepted. Precision follows JAX: a solve
computes in the dtype of ``a``, ``b`` and the cost under JAX's promotion, at least float32
(:func:`jaxlab.core.checks.compute_dtype`), with a default tolerance per dtype and a one-line
refusal of a tolerance that dtype cannot resolve (:func:`resolve_tol`). Concrete inputs are checked
here (:func:`check_inputs`, :func:`~jaxlab.core.checks.check_positive`) so that a mistake raises
one :class:`~jaxlab.core.errors.ConfigError` line instead of a solver that quietly returns NaN;
under ``jax.jit`` the values are unknown and the checks are skipped
(:func:`jaxlab.core.checks.is_traced`).
"""

from __future__ import annotations

import sys
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_positive, check_tol, compute_dtype, is_traced
from jaxlab.core.errors import ConfigError

__all__ = [
    "DEFAULT_TOL",
    "MIN_TOL_ULPS",
    "check_arrays",
    "check_choice",
    "check_inputs",
    "check_solver_call",
    "from_linear_problem",
    "min_tol",
    "read_problem",
    "resolve_tol",
    "unpack_cost",
]

# Default stopping tolerance per compute dtype: the paper's ‖g‖₂ < 1e-8 (Wang & Qiu, ICML 2025,
# Section 5) in float64; in float32 the marginal error of an iterate rounds at 1e-8 to 1e-6
# (the smaller η, the larger), so its default is one that float32 reaches.
DEFAULT_TOL = {np.dtype(np.float64): 1e-8, np.dtype(np.float32): 1e-5}
# A tolerance below this many units in the last place of 1 (marginals of unit mass) is below the
# rounding of the marginal error itself: refused rather than run to the budget.
MIN_TOL_ULPS = 4


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a one-line ConfigError naming them."""
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def min_tol(dtype: Any) -> float:
    """The smallest tolerance :func:`resolve_tol` accepts in ``dtype`` (``MIN_TOL_ULPS`` ulps)."""
    return MIN_TOL_ULPS * float(jnp.finfo(dtype).eps)


def resolve_tol(tol: Any, dtype: Any) -> float:
    """``tol``, or the default of ``dtype`` when None; a one-line ConfigError when ``dtype``
    cannot resolve it (:data:`DEFAULT_TOL`, :func:`min_tol`)."""
    dtype = np.dtype(dtype)
    if tol is None:
        return DEFAULT_TOL[dtype]
    return check_tol(tol, dtype, min_tol(dtype))


def _ott_instance(x: Any, module: str, name: str) -> bool:
    # ott-jax's types exist only once their module is loaded: importing ott-jax here for a plain
    # matrix would add seconds to the first solve of a process.
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(x, getattr(loaded, name))


def unpack_cost(cost: Any, epsilon: Any) -> tuple[Any, Any]:
    """``(cost matrix, ε)`` from a matrix or an ott-jax ``Geometry`` (whose ``ε`` is the default).

    Returns ``epsilon`` unchanged (possibly None) for a matrix.
    """
    if _ott_instance(cost, "ott.geometry.geometry", "Geometry"):
        return cost.cost_matrix, cost.epsilon if epsilon is None else epsilon
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


def read_problem(
    a: Any, b: Any, cost: Any, epsilon: Any, *, require_epsilon: bool = True
) -> tuple[Any, Any, Any, Any]:
    """``(cost matrix, a, b, ε)`` from what a user passes where a cost is accepted.

    Args:
      a, b: marginals, or None for uniform ones (ott-jax's default); must be None when ``cost``
        is a ``LinearProblem``, which carries its own.
      cost: a cost matrix, an ott-jax ``Geometry`` (``PointCloud`` included) or a balanced
        ``LinearProblem``.
      epsilon: the regularisation; None takes the geometry's ``ε``.
      require_epsilon: refuse a cost matrix without ``epsilon``.

    Raises:
      ConfigError: marginals given beside a ``LinearProblem``, an unbalanced problem, or a matrix
        without ``epsilon`` when one is required.
    """
    if _ott_instance(cost, "ott.problems.linear.linear_problem", "LinearProblem"):
        if a is not None or b is not None:
            raise ConfigError(
                "a LinearProblem carries its marginals: pass a=None, b=None, or pass its "
                "geometry (problem.geom) with your a, b"
            )
        matrix, a, b, geom_eps = from_linear_problem(cost)
        return matrix, a, b, geom_eps if epsilon is None else epsilon
    matrix, epsilon = unpack_cost(cost, epsilon)
    if epsilon is None and require_epsilon:
        raise ConfigError(
            "epsilon is required when cost is a matrix (pass epsilon=..., or an ott-jax "
            "Geometry that carries it)"
        )
    # Uniform marginals in the cost's dtype, built by numpy (no program is compiled for them).
    shape = np.shape(matrix)
    if a is None and len(shape) == 2:
        a = np.full(shape[0], 1.0 / shape[0], compute_dtype(matrix))
    if b is None and len(shape) == 2:
        b = np.full(shape[1], 1.0 / shape[1], compute_dtype(matrix))
    return matrix, a, b, epsilon


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


def check_solver_call(a, b, cost, epsilon, init, *, tol: Any, max_iter: Any) -> float:
    """The checks of a direct call of one of :mod:`jaxlab.ot`'s dual solvers; returns the tol.

    ``tol`` is resolved for the dtype of the inputs (:func:`resolve_tol`: None gives the default,
    an unreachable one is refused) in every call; :func:`check_inputs` and an integer
    ``max_iter >= 1`` are checked on eager calls only (when an input is traced the caller, e.g.
    :func:`jaxlab.methods.qn_ot.solve`, checked them).
    """
    tol = resolve_tol(tol, compute_dtype(a, b, cost))
    if is_traced(a, b, cost, epsilon, init):
        return tol
    if isinstance(max_iter, bool) or not isinstance(max_iter, int | np.integer) or max_iter < 1:
        raise ConfigError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    check_inputs(a, b, cost, epsilon, init)
    return tol
