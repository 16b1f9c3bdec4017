"""Side-by-side convergence benchmark: jaxlab's solvers, ott-jax's Sinkhorn and the C++ SPLR.

The protocol of Wang & Qiu (ICML 2025, Section 5) at CPU size: for each problem and ``η``, every
method runs to ``‖g‖₂ < tol`` (or its budget) in this process, on the same float64 input; we record
iterations, seconds (compiled JAX runs exclude compilation; the best of ``repeats`` runs), the final
error, the ℓ1 distance of the plan to a long reference solve (C++ SPLR, tol 1e-10), and the
``‖g‖`` traces. The C++ anchor is ``regot.sinkhorn_splr`` (the authors' package); ott-jax's
``Sinkhorn`` runs as the library baseline (``lse_mode``, ``norm_error=2``, ``inner_iterations=1``;
plain, momentum and Anderson acceleration). Per-iteration times of the JAX solvers are not
observable inside a compiled ``while_loop``; their time axis spreads the measured total evenly over
the iterations (regot reports real per-iteration times).
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from jaxlab.core.errors import ConfigError
from jaxlab.data.ot_problems import OTProblem
from jaxlab.methods.ot.api import solve

__all__ = ["plot_traces", "reference_plan", "run_jaxlab", "run_ott", "run_regot"]


def _trace_row(method, errors, times, seconds, converged, plan, ref) -> dict[str, Any]:
    errors = np.asarray(errors, np.float64)
    return {
        "method": method,
        "iters": int(len(errors) - 1),
        "seconds": float(seconds),
        "converged": bool(converged),
        "final_error": float(errors[-1]),
        "plan_l1_to_ref": float(np.abs(np.asarray(plan) - ref).sum()) if ref is not None else None,
        "errors": errors,
        "times": np.asarray(times, np.float64),
    }


def run_jaxlab(
    problem: OTProblem, eta: float, method: str, tol: float, max_iter: int, repeats: int, ref=None
) -> dict[str, Any]:
    """Runs ``solve(method=...)``; the first call compiles, the best of ``repeats`` is kept."""
    best = None
    for _ in range(repeats):
        out = solve(
            problem.a,
            problem.b,
            problem.cost,
            epsilon=eta,
            method=method,
            tol=tol,
            max_iter=max_iter,
        )
        if best is None or out.seconds < best.seconds:
            best = out
    k = int(best.n_iters)
    errors = np.asarray(best.errors[: k + 1])
    times = np.linspace(0.0, best.seconds, k + 1)
    return _trace_row(method, errors, times, best.seconds, best.converged, best.matrix, ref)


def _regot():
    """The authors' C++ package, an optional dependency of the benchmark only."""
    try:
        import regot
    except ImportError:
        raise ConfigError(
            "ot_benchmark compares against the C++ SPLR in `regot`: pip install -e '.[bench]'"
        ) from None
    return regot


def run_regot(
    problem: OTProblem, eta: float, tol: float, max_iter: int, repeats: int, ref=None
) -> dict[str, Any]:
    """Runs the authors' C++ SPLR (``regot.sinkhorn_splr``) and times it here."""
    regot = _regot()

    cost = np.asfortranarray(problem.cost)
    best, best_s = None, np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        res = regot.sinkhorn_splr(cost, problem.a, problem.b, eta, tol=tol, max_iter=max_iter)
        seconds = time.perf_counter() - start
        if seconds < best_s:
            best, best_s = res, seconds
    errors = np.asarray(best.mar_errs)
    times = np.asarray(best.run_times) / 1000.0
    return _trace_row("regot_splr", errors, times, best_s, errors[-1] < tol, best.plan, ref)


def reference_plan(problem: OTProblem, eta: float, tol: float = 1e-10) -> tuple[np.ndarray, float]:
    """A long C++ SPLR solve (independent of this package) and its final marginal error."""
    regot = _regot()

    res = regot.sinkhorn_splr(
        np.asfortranarray(problem.cost), problem.a, problem.b, eta, tol=tol, max_iter=1000
    )
    return np.asarray(res.plan), float(res.mar_errs[-1])


def run_ott(
    problem: OTProblem, eta: float, variant: str, tol: float, max_iter: int, ref=None
) -> dict[str, Any]:
    """ott-jax ``Sinkhorn`` (x64, lse_mode, norm_error=2, one inner iteration), timed compiled."""
    from ott.geometry.geometry import Geometry
    from ott.problems.linear.linear_problem import LinearProblem
    from ott.solvers.linear import acceleration
    from ott.solvers.linear.sinkhorn import Sinkhorn

    extra = {
        "plain": {},
        "momentum": {"momentum": acceleration.Momentum(start=20, value=1.5)},
        "anderson": {"anderson": acceleration.AndersonAcceleration(memory=5)},
    }[variant]
    solver = Sinkhorn(
        lse_mode=True,
        threshold=tol,
        norm_error=2,
        inner_iterations=1,
        min_iterations=0,
        max_iterations=max_iter,
        **extra,
    )

    def run(cost, a, b):
        out = solver(LinearProblem(Geometry(cost_matrix=cost, epsilon=eta), a=a, b=b))
        return out.matrix, out.errors, out.n_iters, out.converged

    args = tuple(jnp.asarray(x, jnp.float64) for x in (problem.cost, problem.a, problem.b))
    compiled = jax.jit(run).lower(*args).compile()
    start = time.perf_counter()
    plan, errors, n_iters, converged = jax.block_until_ready(compiled(*args))
    seconds = time.perf_counter() - start
    errors = np.asarray(errors)
    errors = errors[errors >= 0][: int(n_iters) + 1]
    times = np.linspace(0.0, seconds, len(errors))
    return _trace_row(f"ott_{variant}", errors, times, seconds, converged, plan, ref)


def plot_traces(rows: list[dict[str, Any]], title: str, tol: float, path) -> None:
    """``log10 ‖g‖`` against iterations and against seconds, one line per method."""
    fig = Figure(figsize=(11, 4.2))
    ax_it, ax_t = fig.subplots(1, 2)
    for row in rows:
        err = np.maximum(row["errors"], 1e-300)
        style = {"lw": 2.2} if row["method"] in ("splr", "regot_splr") else {"lw": 1.2}
        ax_it.plot(np.arange(len(err)), np.log10(err), label=row["method"], **style)
        ax_t.plot(row["times"], np.log10(err), label=row["method"], **style)
    for ax, xlabel in ((ax_it, "iteration"), (ax_t, "seconds")):
        ax.axhline(np.log10(tol), color="k", ls=":", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("log10 ||g||")
        ax.grid(alpha=0.3)
    ax_it.set_xscale("symlog", linthresh=100)
    ax_t.set_xscale("log")
    ax_t.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
