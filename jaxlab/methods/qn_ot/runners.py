"""Runners of the side-by-side convergence benchmark: jaxlab, ott-jax and POT Sinkhorn, C++ SPLR.

The protocol of Wang & Qiu (ICML 2025, Section 5) at CPU size: for each problem and ``η``, every
method runs to ``‖g‖₂ < tol`` (or its budget) in this process, on the same float64 input; we record
iterations, seconds, the final error, the ℓ1 distance of the plan to a long reference solve (C++
SPLR, tol 1e-10), and the ``‖g‖`` traces. The C++ anchor is ``regot.sinkhorn_splr`` (the authors'
package); ott-jax's ``Sinkhorn`` runs as the library baseline (``lse_mode``, ``norm_error=2``;
plain, momentum and Anderson acceleration with the error checked every iteration, and plain at
ott's default cadence, every tenth iteration), and POT's log-domain ``ot.sinkhorn`` (numpy, its
error checked every tenth iteration) as the NumPy one.

Every solver is a :class:`Runner` (a zero-argument call and a function that turns its result into
a table row), and :func:`run_case` times all of a case's runners with one protocol,
:func:`jaxlab.core.timing.time_interleaved`: one warm-up call each (JAX programs are compiled
ahead of time before it), then ``repeats`` interleaved rounds, the median per solver. JAX solvers
are timed as their compiled program on device-resident inputs, ``regot`` as its Python call.
Per-iteration times of the JAX solvers are not observable inside a compiled loop; their time axis
spreads the median evenly over the iterations (``regot`` reports real per-iteration times).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import ConfigError
from jaxlab.core.timing import time_interleaved
from jaxlab.data.ot_problems import OTProblem
from jaxlab.methods.qn_ot.api import compile_solve

__all__ = [
    "OTT_VARIANTS",
    "Runner",
    "import_regot",
    "jaxlab_runner",
    "ott_runner",
    "pot_runner",
    "reference_plan",
    "regot_runner",
    "run_case",
]


class Runner(NamedTuple):
    """One solver on one problem: ``call()`` runs it once; ``row(result, seconds)`` tabulates it."""

    name: str
    call: Callable[[], Any]
    row: Callable[[Any, float], dict[str, Any]]


def _trace_row(method, errors, times, seconds, converged, plan, ref, iters=None) -> dict[str, Any]:
    """A table row; ``iters`` defaults to the trace's length less its starting entry (solvers
    that record the error every iteration from the start), else the solver's own count."""
    errors = np.asarray(errors, np.float64)
    return {
        "method": method,
        "iters": int(len(errors) - 1) if iters is None else int(iters),
        "seconds": float(seconds),
        "converged": bool(converged),
        "final_error": float(errors[-1]),
        "plan_l1_to_ref": float(np.abs(np.asarray(plan) - ref).sum()) if ref is not None else None,
        "errors": errors,
        "times": np.asarray(times, np.float64),
    }


def run_case(runners: list[Runner], repeats: int) -> list[dict[str, Any]]:
    """Times ``runners`` side by side (:func:`~jaxlab.core.timing.time_interleaved`, median of
    ``repeats`` after one warm-up) and returns one row per runner, built from its last result."""
    results: dict[str, Any] = {}

    def keeping(runner: Runner) -> Callable[[], Any]:
        def call():
            results[runner.name] = runner.call()
            return results[runner.name]

        return call

    timings = time_interleaved({r.name: keeping(r) for r in runners}, repeats=repeats, warmup=1)
    return [r.row(results[r.name], timings[r.name].median) for r in runners]


def jaxlab_runner(
    problem: OTProblem, eta: float, method: str, tol: float, max_iter: int, ref=None
) -> Runner:
    """``solve(method=...)``'s compiled program (compiled here, before any timing)."""
    compiled = compile_solve(
        problem.a, problem.b, problem.cost, epsilon=eta, method=method, tol=tol, max_iter=max_iter
    )

    def row(result, seconds):
        out = compiled.output(result, seconds)
        k = int(out.n_iter)
        errors = np.asarray(out.errors[: k + 1])
        times = np.linspace(0.0, seconds, k + 1)
        return _trace_row(method, errors, times, seconds, out.converged, out.matrix, ref)

    return Runner(method, compiled, row)


def import_regot():
    """The authors' C++ package, an optional dependency of the benchmark only."""
    try:
        import regot
    except ImportError:
        raise ConfigError(
            "ot_benchmark compares against the C++ SPLR in `regot`: pip install -e '.[bench]'"
        ) from None
    return regot


def regot_runner(problem: OTProblem, eta: float, tol: float, max_iter: int, ref=None) -> Runner:
    """The authors' C++ SPLR (``regot.sinkhorn_splr``), a plain Python call."""
    regot = import_regot()
    cost = np.asfortranarray(problem.cost)

    def call():
        return regot.sinkhorn_splr(cost, problem.a, problem.b, eta, tol=tol, max_iter=max_iter)

    def row(res, seconds):
        errors = np.asarray(res.mar_errs)
        times = np.asarray(res.run_times) / 1000.0
        return _trace_row("regot_splr", errors, times, seconds, errors[-1] < tol, res.plan, ref)

    return Runner("regot_splr", call, row)


def reference_plan(problem: OTProblem, eta: float, tol: float = 1e-10) -> tuple[np.ndarray, float]:
    """A long C++ SPLR solve (independent of this package) and its final marginal error."""
    regot = import_regot()

    res = regot.sinkhorn_splr(
        np.asfortranarray(problem.cost), problem.a, problem.b, eta, tol=tol, max_iter=1000
    )
    return np.asarray(res.plan), float(res.mar_errs[-1])


#: The ott-jax Sinkhorn variants :func:`ott_runner` runs (see there).
OTT_VARIANTS = ("plain", "momentum", "anderson", "plain_every10")


def ott_runner(
    problem: OTProblem, eta: float, variant: str, tol: float, max_iter: int, ref=None
) -> Runner:
    """ott-jax ``Sinkhorn`` (x64, lse_mode, norm_error=2), compiled here.

    ``variant`` (:data:`OTT_VARIANTS`): ``plain``, ``momentum`` and ``anderson`` check the error
    every iteration (``inner_iterations=1``, the like-for-like baseline); ``plain_every10`` is
    plain Sinkhorn at ott's default cadence (``inner_iterations=10``: the error every tenth
    iteration, so it stops up to nine iterations late and spends less per iteration). The row's
    ``iters`` is ott's ``n_iters``. Call it inside ``jax.enable_x64(True)`` (the benchmark runs in
    that scope).
    """
    from ott.geometry.geometry import Geometry
    from ott.problems.linear.linear_problem import LinearProblem
    from ott.solvers.linear import acceleration
    from ott.solvers.linear.sinkhorn import Sinkhorn

    extra = {
        "plain": {},
        "momentum": {"momentum": acceleration.Momentum(start=20, value=1.5)},
        "anderson": {"anderson": acceleration.AndersonAcceleration(memory=5)},
        "plain_every10": {},
    }[variant]
    inner = 10 if variant == "plain_every10" else 1
    solver = Sinkhorn(
        lse_mode=True,
        threshold=tol,
        norm_error=2,
        inner_iterations=inner,
        min_iterations=0,
        max_iterations=max_iter,
        **extra,
    )

    def run(cost, a, b):
        out = solver(LinearProblem(Geometry(cost_matrix=cost, epsilon=eta), a=a, b=b))
        return out.matrix, out.errors, out.n_iters, out.converged

    args = tuple(jnp.asarray(x, jnp.float64) for x in (problem.cost, problem.a, problem.b))
    compiled = jax.jit(run).lower(*args).compile()

    def row(result, seconds):
        plan, errors, n_iters, converged = result
        errors = np.asarray(errors)
        errors = errors[errors >= 0]  # one entry per check, -1 where none was made
        times = np.linspace(0.0, seconds, len(errors))
        return _trace_row(
            f"ott_{variant}", errors, times, seconds, converged, plan, ref, iters=int(n_iters)
        )

    return Runner(f"ott_{variant}", lambda: compiled(*args), row)


def pot_runner(problem: OTProblem, eta: float, tol: float, max_iter: int, ref=None) -> Runner:
    """POT's log-domain Sinkhorn (``ot.sinkhorn(method="sinkhorn_log")``), a plain Python call.

    It stops when ``‖πᵀ1 - b‖₂ < tol``, checked every tenth iteration after the row update (so the
    rows are exact: the ℓ2 norm of the dual gradient, the others' rule); ``iters`` is the number
    of iterations it ran (its log's ``niter`` is the index of the last). POT's default
    ``method="sinkhorn"`` works with ``exp(-M/η)``, which underflows at the benchmark's η.
    """
    import ot

    def call():
        return ot.sinkhorn(
            problem.a, problem.b, problem.cost, eta, method="sinkhorn_log",
            numItermax=max_iter, stopThr=tol, log=True, warn=False,
        )  # fmt: skip

    def row(result, seconds):
        plan, log = result
        errors = np.asarray(log["err"], np.float64)
        times = np.linspace(0.0, seconds, len(errors))
        iters = int(log["niter"]) + 1
        return _trace_row(
            "pot_sinkhorn_log", errors, times, seconds, errors[-1] < tol, plan, ref, iters=iters
        )

    return Runner("pot_sinkhorn_log", call, row)
