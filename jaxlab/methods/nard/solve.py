"""Runs one NARD solver on validated arrays: its statistics, one compilation, and the timing.

:func:`run_solver` is what :func:`~jaxlab.methods.nard.api.fit` and the cross-validation of λ
(:mod:`~jaxlab.methods.nard.cv`) call. A run is two compiled programs: the statistics the method
reads (:func:`~jaxlab.methods.nard.model.suff_stats`, with the d×d Gram matrix, for ``nard`` and
``sequential``; :func:`~jaxlab.methods.nard.bound.surrogate_stats`, without it, for the surrogate
methods) and the solver. Each is ``jax.jit``-ed once where it is defined and compiled ahead of time
once per (method, options, shapes) here, cached, so repeated fits of one size do not recompile and
compilation is never timed. Both programs are timed with :func:`jaxlab.core.timing.time_call`: one
call each and no warm-up call, because a warm-up would run the whole solver twice (the
compilation it exists to exclude has already happened).
"""

from __future__ import annotations

import enum
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.timing import time_call
from jaxlab.methods.nard.bound import surrogate_stats
from jaxlab.methods.nard.model import initial_gamma, suff_stats
from jaxlab.methods.nard.nard import solve_nard
from jaxlab.methods.nard.output import NARDResult
from jaxlab.methods.nard.sequential import solve_sequential
from jaxlab.methods.nard.sequential_surrogate import solve_sequential_surrogate
from jaxlab.methods.nard.surrogate import solve_surrogate

__all__ = ["METHODS", "SURROGATE_METHODS", "Method", "run_solver", "solver_inputs"]


class Method(enum.StrEnum):
    """The four NARD algorithms (Zhang et al., ICML 2025, Sec. 4)."""

    NARD = "nard"
    SEQUENTIAL = "sequential"
    SURROGATE = "surrogate"
    SEQUENTIAL_SURROGATE = "sequential_surrogate"


METHODS = tuple(m.value for m in Method)
# The methods that never form the d×d Gram matrix XXᵀ.
SURROGATE_METHODS = (Method.SURROGATE.value, Method.SEQUENTIAL_SURROGATE.value)


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
    lam: float,
    *,
    max_iter: int,
    tol: float,
    alpha_update: str = "mackay",
    max_active: int = 100,
) -> NARDResult:
    """Computes ``method``'s statistics, runs its solver, and times both (see module docstring).

    Returns:
      The solver's :class:`~jaxlab.methods.nard.output.NARDResult` with ``seconds`` (the
      statistics plus the solver loop) and ``stats_seconds`` (the statistics alone) filled in.
    """
    kind = "surrogate" if method in SURROGATE_METHODS else "exact"
    prep = _compiled(("inputs", kind, _signature((X, Y))), solver_inputs(method), (X, Y), {}, {})
    inputs, stats_seconds = _timed(prep, (X, Y), {})
    lam = jnp.asarray(lam, X.dtype)
    opts = {"max_iter": max_iter, "alpha_update": alpha_update, "max_active": max_active}
    fn, args, static = _solver_call(method, X, Y, inputs, lam, **opts)
    key = (method, tuple(sorted(static.items())), _signature(args))
    solver = _compiled(key, fn, args, static, {"tol": tol})
    out, solve_seconds = _timed(solver, args, {"tol": tol})
    return out._replace(seconds=stats_seconds + solve_seconds, stats_seconds=stats_seconds)
