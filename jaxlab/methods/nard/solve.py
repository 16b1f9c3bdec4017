"""Runs one NARD solver on validated arrays: centring, scaling, statistics, solver and timing.

:func:`fit_arrays` is what :func:`~jaxlab.methods.nard.api.fit` and the cross-validation of λ
(:mod:`~jaxlab.methods.nard.cv`) call once the inputs are checked. It centres X and Y (when
``fit_intercept``, as scikit-learn's linear models do: the model ``Y = W X + E`` has no intercept,
so the fit runs on ``X − x̄``, ``Y − ȳ`` and the intercept is ``ȳ − W x̄``), divides each feature
by its root mean square (see :mod:`~jaxlab.methods.nard.api`), runs :func:`run_solver` and maps the
estimate back to the user's units. A feature row that is zero after centring (a constant feature,
or an all-zero row) carries no information: it starts and stays pruned (``γ₀ = 0``).

:func:`run_solver` is two compiled programs: the statistics the method reads
(:func:`~jaxlab.methods.nard.model.suff_stats`, with the d×d Gram matrix, for ``nard`` and
``sequential``; :func:`~jaxlab.methods.nard.bound.surrogate_stats`, without it, for the surrogate
methods) and the solver. Called with concrete arrays, each is compiled ahead of time once per
(method, options, shapes), cached, so repeated fits of one size do not recompile and compilation is
never timed; both are timed with :func:`jaxlab.core.timing.time_call`: one call each and no warm-up
call, because a warm-up would run the whole solver twice (the compilation it exists to exclude has
already happened). Called under a JAX transformation (``jax.jit``, ``jax.vmap``: any input is a
tracer) it calls the same jitted functions inside the caller's trace and times nothing.
"""

from __future__ import annotations

import enum
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.checks import is_traced
from jaxlab.core.timing import time_call
from jaxlab.methods.nard.bound import surrogate_stats
from jaxlab.methods.nard.model import initial_gamma, suff_stats
from jaxlab.methods.nard.nard import solve_nard
from jaxlab.methods.nard.output import NARDResult
from jaxlab.methods.nard.sequential import solve_sequential
from jaxlab.methods.nard.sequential_surrogate import solve_sequential_surrogate
from jaxlab.methods.nard.surrogate import solve_surrogate

__all__ = [
    "DEFAULT_MAX_ITER",
    "DEFAULT_TOL",
    "METHODS",
    "SURROGATE_METHODS",
    "Method",
    "default_tol",
    "fit_arrays",
    "run_solver",
    "solver_inputs",
]


class Method(enum.StrEnum):
    """The four NARD algorithms (Zhang et al., ICML 2025, Sec. 4)."""

    NARD = "nard"
    SEQUENTIAL = "sequential"
    SURROGATE = "surrogate"
    SEQUENTIAL_SURROGATE = "sequential_surrogate"


METHODS = tuple(m.value for m in Method)
# The methods that never form the d×d Gram matrix XXᵀ.
SURROGATE_METHODS = (Method.SURROGATE.value, Method.SEQUENTIAL_SURROGATE.value)

DEFAULT_MAX_ITER = {
    "nard": 500,
    "surrogate": 1000,
    "sequential": 2000,
    "sequential_surrogate": 3000,
}
# The default relative-change tolerance per compute dtype. float32 gets a looser one: a relative
# change of 1e-6 is only about 8 units in the last place of a float32 objective, so whether it is
# reached there depends on rounding; 1e-5 is resolved with a wide margin.
DEFAULT_TOL = {"float32": 1e-5, "float64": 1e-6}


def default_tol(dtype) -> float:
    """The default ``tol`` of a fit computed in ``dtype`` (:data:`DEFAULT_TOL`)."""
    return DEFAULT_TOL[jnp.dtype(dtype).name]


@jax.jit
def _exact_inputs(X, Y):
    return suff_stats(X, Y), initial_gamma(X)


@jax.jit
def _surrogate_inputs(X, Y):
    return surrogate_stats(X, Y), initial_gamma(X)


def solver_inputs(method: str):
    """The jitted statistics program of ``method``: ``(X, Y) -> (stats, γ₀)``."""
    return _surrogate_inputs if method in SURROGATE_METHODS else _exact_inputs


def _solver_call(method, X, Y, inputs, lam, *, max_iter, alpha_update, max_active):
    """(jitted solver, positional arguments, static keyword arguments) of ``method``."""
    stats, gamma0 = inputs
    if method == "nard":
        return solve_nard, (stats, lam, gamma0), {"max_iter": max_iter, "rule": alpha_update}
    if method == "sequential":
        return solve_sequential, (stats, lam), {"max_iter": max_iter, "max_active": max_active}
    if method == "surrogate":
        return solve_surrogate, (X, Y, stats, lam, gamma0), {"max_iter": max_iter}
    if method == "sequential_surrogate":
        static = {"max_iter": max_iter, "max_active": max_active}
        return solve_sequential_surrogate, (X, stats, lam), static
    raise ValueError(f"unknown method {method!r}; use one of {METHODS}")


_COMPILED: dict = {}


def _compiled(key, fn, args, static, dynamic):
    """``fn`` compiled ahead of time for these argument shapes and static options (cached)."""
    if key not in _COMPILED:
        _COMPILED[key] = fn.lower(*args, **static, **dynamic).compile()
    return _COMPILED[key]


def _signature(tree) -> tuple:
    return tuple((a.shape, str(a.dtype)) for a in jax.tree.leaves(tree))


def _timed(compiled, args, kwargs) -> tuple[Any, float]:
    """One timed call of a compiled program: its result and seconds."""
    box = []

    def call():
        box.append(compiled(*args, **kwargs))
        return box[-1]

    timing = time_call(call, repeats=1, warmup=0)
    return box[-1], timing.median


def run_solver(
    method: str,
    X: Float[Array, "d N"],
    Y: Float[Array, "m N"],
    lam: float | Array,
    *,
    max_iter: int,
    tol: float | Array,
    alpha_update: str = "mackay",
    max_active: int = 100,
) -> NARDResult:
    """Computes ``method``'s statistics and runs its solver on (X, Y) as given (see module
    docstring); concrete inputs are timed, traced ones are not.

    Returns:
      The solver's :class:`~jaxlab.methods.nard.output.NARDResult`, with ``seconds`` (the
      statistics plus the solver loop) and ``stats_seconds`` (the statistics alone) filled in when
      the inputs are concrete.
    """
    lam, tol = jnp.asarray(lam, X.dtype), jnp.asarray(tol, X.dtype)
    opts = {"max_iter": max_iter, "alpha_update": alpha_update, "max_active": max_active}
    if is_traced(X, Y, lam, tol):
        inputs = solver_inputs(method)(X, Y)
        fn, args, static = _solver_call(method, X, Y, inputs, lam, **opts)
        return fn(*args, **static, tol=tol)
    kind = "surrogate" if method in SURROGATE_METHODS else "exact"
    prep = _compiled(("inputs", kind, _signature((X, Y))), solver_inputs(method), (X, Y), {}, {})
    inputs, stats_seconds = _timed(prep, (X, Y), {})
    fn, args, static = _solver_call(method, X, Y, inputs, lam, **opts)
    key = (method, tuple(sorted(static.items())), _signature(args))
    solver = _compiled(key, fn, args, static, {"tol": tol})
    out, solve_seconds = _timed(solver, args, {"tol": tol})
    return out._replace(seconds=stats_seconds + solve_seconds, stats_seconds=stats_seconds)


def fit_arrays(
    method: str,
    X: Float[Array, "d N"],
    Y: Float[Array, "m N"],
    lam: float | Array,
    *,
    fit_intercept: bool = True,
    max_iter: int | None = None,
    tol: float | Array | None = None,
    alpha_update: str = "mackay",
    max_active: int | None = None,
    threshold: float | Array = 10.0,
) -> NARDResult:
    """Fits ``method`` on checked arrays of one float dtype (module docstring); the options as in
    :func:`~jaxlab.methods.nard.fit`, whose defaults (``None``) are resolved here.

    Returns:
      The :class:`~jaxlab.methods.nard.output.NARDResult` in the units of X and Y, with the
      intercept and the selected features. Concrete inputs give the objective trace cut to its
      ``n_iter + 1`` values and Python ``n_iter`` / ``converged``; traced inputs the full
      ``max_iter + 1`` trace padded with NaN, arrays for both, and no times.
    """
    d, n = X.shape
    max_iter = DEFAULT_MAX_ITER[method] if max_iter is None else max_iter
    max_active = min(d, n, 100) if max_active is None else max_active
    tol = default_tol(X.dtype) if tol is None else tol
    if fit_intercept:
        x_mean, y_mean = jnp.mean(X, axis=1), jnp.mean(Y, axis=1)
        # A constant row is set to exact zeros: X − x̄ would leave the rounding error of the mean.
        constant = jnp.max(X, axis=1) == jnp.min(X, axis=1)
        X = jnp.where(constant[:, None], 0.0, X - x_mean[:, None])
        Y = Y - y_mean[:, None]
    rms = jnp.sqrt(jnp.mean(X * X, axis=1))
    # A zero row stays zero (γ₀ = 0 prunes it for good: both α-updates map 0 to 0).
    rms = jnp.where(rms > 0, rms, 1.0)
    Xs = X / rms[:, None]
    out = run_solver(
        method,
        Xs,
        Y,
        lam,
        max_iter=max_iter,
        tol=tol,
        alpha_update=alpha_update,
        max_active=max_active,
    )
    coef = out.coef / rms[None, :]
    intercept = y_mean - coef @ x_mean if fit_intercept else jnp.zeros(Y.shape[0], X.dtype)
    norms = jnp.sum(Xs * Xs, axis=1)
    out = out._replace(
        coef=coef,
        gamma=out.gamma / rms**2,
        selected=out.gamma * norms >= threshold,
        intercept=intercept,
    )
    if out.seconds is None:  # traced: shapes must stay static
        return out
    n_iter = int(out.n_iter)
    return out._replace(
        objective=out.objective[: n_iter + 1], n_iter=n_iter, converged=bool(out.converged)
    )
