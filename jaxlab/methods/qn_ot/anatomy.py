"""Anatomy of one SPLR iteration: each phase timed on a real mid-run iterate, beside the C++ SPLR.

One iteration of SPLR (Wang & Qiu, ICML 2025, Algorithm 1) is: a dual evaluation (the plan, its
marginals, the objective; Eqs. 3–4), the top-``ρ`` threshold of ``T̃`` (Section 3.1), the assembly
of ``H_Ω`` as triplets (mask, compaction, gather), the CG solve with ``H_Ω + τI`` (Section 3.3) and
the line search, which costs one more dual evaluation per trial (the plan at ``x`` rescaled, as
the solve does while its drift bound holds; "evaluation" is the one from the cost, the solve's
first trials). :func:`splr_anatomy` runs SPLR to
half its iteration count, takes that iterate (``x``, the density of that iteration) and times each
phase as a separately jitted function on it, all interleaved with the whole solve and with
``regot.sinkhorn_splr`` on the same problem (:func:`jaxlab.core.timing.time_interleaved`). The C++
code prints its own phase times with ``verbose=2`` (``lin_solve``, ``line_search``, ``grad``,
``hess``, in ms); they are read from its standard output and averaged over its iterations. Its
line search re-evaluates nothing after acceptance except the gradient sums (``grad``), and it
does not report its evaluation count. The phases are timed alone, so their sum is an estimate of
an iteration, not a measurement of the fused loop; the whole-solve time per iteration is the
measurement.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.timing import time_interleaved
from jaxlab.data.ot_problems import OTProblem
from jaxlab.methods.qn_ot.api import compile_solve
from jaxlab.methods.qn_ot.direction import density_threshold
from jaxlab.methods.qn_ot.gathered_hessian import (
    LevelledHessian,
    capacity_levels,
    default_capacity,
    gathered_levels,
    on_level,
)
from jaxlab.methods.qn_ot.runners import import_regot
from jaxlab.ot.dual import dual_value_grad, dual_value_grad_rescaled, join
from jaxlab.ot.line_search import more_thuente
from jaxlab.ot.linsolve import schur_cg

__all__ = ["PHASES", "regot_phases", "splr_anatomy"]

PHASES = ("evaluation", "threshold", "assembly", "cg", "line_search")
_REGOT_PHASES = ("lin_solve", "line_search", "grad", "hess")


def regot_phases(problem: OTProblem, eta: float, tol: float, max_iter: int) -> dict[str, float]:
    """Mean milliseconds per iteration of each phase the C++ SPLR prints with ``verbose=2``.

    The C++ code writes to the process's standard output (not Python's ``sys.stdout``), so file
    descriptor 1 is redirected to a temporary file for the call.
    """
    regot = import_regot()
    cost = np.asfortranarray(problem.cost)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(1)
        try:
            os.dup2(tmp.fileno(), 1)
            regot.sinkhorn_splr(
                cost, problem.a, problem.b, eta, tol=tol, max_iter=max_iter, verbose=2
            )
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out = {}
    for name in _REGOT_PHASES:
        values = [float(v) for v in re.findall(rf"{name} = ([0-9.eE+-]+)", text)]
        out[name] = float(np.mean(values)) if values else float("nan")
    return out


def _phase_fns(problem: OTProblem, eta: float, x, density, capacity: int, cg_tol: float):
    """Zero-argument callables, one per phase, each a jitted function on the iterate's arrays."""
    cost, a, b = (jnp.asarray(v, jnp.float64) for v in (problem.cost, problem.a, problem.b))
    n = cost.shape[0]
    density = jnp.asarray(density, jnp.float64)

    evaluate = jax.jit(lambda x: dual_value_grad(x, cost, a, b, eta))
    threshold = jax.jit(density_threshold)  # as in the solve

    levels = capacity_levels(capacity)

    @jax.jit
    def assemble(T, g, t):
        # As in the solve: the products run on the smallest level that holds Ω.
        sums = (g[:n] + a, g[n:] + b[:-1])
        return gathered_levels(T, eta, t, levels, sums=sums)

    @jax.jit
    def cg(H, g):
        # As in the solve: the whole CG loop runs on the level's prefix (one switch around it).
        tau = jnp.minimum(jnp.linalg.norm(g), 1e-3)
        z, steps = on_level(H, lambda Hl, g: schur_cg(Hl, tau, g, cg_tol, 1000), g)
        return -z, steps

    @jax.jit
    def line_search(x, d, f, g, T):
        # As in the solve: the trials rescale the plan at x (its drift is within the bound here).
        ls = more_thuente(
            lambda z: dual_value_grad(z, cost, a, b, eta),
            x,
            d,
            f,
            g,
            T,
            1.0,
            along=lambda t: dual_value_grad_rescaled(x, d, t, T, a, b, eta),
        )
        return ls.step, ls.n_evals

    f, g, T = evaluate(x)
    t, threshold_trips = threshold(T, density)
    H = assemble(T, g, t)
    level = levels[int(H.index)] if isinstance(H, LevelledHessian) else capacity
    d, cg_steps = cg(H, g)
    dispatch = jax.jit(lambda x: x + 1.0)
    # The bare cost of a while_loop trip on XLA CPU: a scalar body, run for as many trips as the
    # threshold and CG loops take together and for none (the difference is the loops' overhead).
    trips = int(threshold_trips) + int(cg_steps)
    empty_loop = jax.jit(
        lambda x, n: jax.lax.while_loop(
            lambda c: c[1] < n, lambda c: (c[0] * 0.5, c[1] + 1), (x, 0)
        )[0]
    )
    calls = {
        "dispatch": lambda: dispatch(x),
        "empty_loop": lambda: empty_loop(f, trips),
        "empty_loop_0": lambda: empty_loop(f, 0),
        "evaluation": lambda: evaluate(x),
        "threshold": lambda: threshold(T, density),
        "assembly": lambda: assemble(T, g, t),
        "cg": lambda: cg(H, g),
        "line_search": lambda: line_search(x, d, f, g, T),
    }
    counts = {
        "threshold_trips": int(threshold_trips),
        "cg_steps": int(cg_steps),
        "ls_evals_here": int(line_search(x, d, f, g, T)[1]),
        "empty_loop_trips": trips,
        "cg_capacity": level,
    }
    return calls, counts


def splr_anatomy(
    problem: OTProblem,
    eta: float,
    *,
    tol: float = 1e-8,
    max_iter: int = 1000,
    repeats: int = 5,
    density_max: float = 0.01,
    cg_tol: float = 1e-8,
) -> dict[str, Any]:
    """Times each phase of one SPLR iteration on its mid-run iterate, beside the C++ SPLR.

    Returns milliseconds: each phase (``PHASES``), their sum, the whole solve per iteration for
    SPLR and regot (timed interleaved with the phases), regot's own phases (``regot_<phase>``),
    the trips of each nested loop on the timed iterate (``threshold_trips``, ``cg_steps``,
    ``ls_evals_here``) with the cost of one trip (``threshold_trip``, ``cg_step``, ``ls_eval``:
    the phase after its dispatch over its trips) beside a scalar-body ``while_loop`` run for as
    many trips and for none (``empty_loop``, ``empty_loop_0``; ``empty_loop_trip``: the loop's own
    overhead per trip), the line-search evaluations per iteration over the solve, the time of a
    trivial jitted call (``dispatch``: the per-call overhead included in every phase), the
    iteration counts, and the ratio of the whole-solve times (SPLR / regot).
    """
    regot = import_regot()
    full = compile_solve(
        problem.a, problem.b, problem.cost, epsilon=eta, tol=tol, max_iter=max_iter
    )
    out = full()
    k = int(out.n_iter)
    mid = compile_solve(
        problem.a, problem.b, problem.cost, epsilon=eta, tol=tol, max_iter=max(k // 2, 1)
    )
    x = join(*mid().potentials)
    density = float(np.asarray(out.densities)[max(k // 2, 1)])
    n, m = problem.cost.shape
    capacity = default_capacity(n, m, density_max)
    calls, counts = _phase_fns(problem, eta, x, density, capacity, cg_tol)
    cost = np.asfortranarray(problem.cost)

    def cpp():
        return regot.sinkhorn_splr(cost, problem.a, problem.b, eta, tol=tol, max_iter=max_iter)

    timings = time_interleaved({**calls, "splr": full, "regot": cpp}, repeats=repeats)
    cpp_iters = int(cpp().niter)
    row: dict[str, Any] = {
        name: 1e3 * timings[name].median
        for name in (*PHASES, "dispatch", "empty_loop", "empty_loop_0")
    }
    row["phases_sum"] = sum(row[name] for name in PHASES)
    row["splr_per_iter"] = 1e3 * timings["splr"].median / max(k, 1)
    row["regot_per_iter"] = 1e3 * timings["regot"].median / max(cpp_iters, 1)
    for name, ms in regot_phases(problem, eta, tol, max_iter).items():
        row[f"regot_{name}"] = ms
    row.update(counts)
    # One trip of each nested loop: its phase after the call's dispatch, over its trips (the
    # threshold's includes its min/max passes, CG's its preconditioner and right-hand side).
    for name, phase, trips in (
        ("threshold_trip", "threshold", counts["threshold_trips"]),
        ("cg_step", "cg", counts["cg_steps"]),
        ("ls_eval", "line_search", counts["ls_evals_here"]),
    ):
        row[name] = (row[phase] - row["dispatch"]) / max(trips, 1)
    loop_trips = max(counts["empty_loop_trips"], 1)
    row["empty_loop_trip"] = (row["empty_loop"] - row["empty_loop_0"]) / loop_trips
    row["ls_evals_per_iter"] = (int(out.n_evals) - 1) / max(k, 1)
    row["density"] = density
    row["splr_iters"], row["regot_iters"] = k, cpp_iters
    row["splr_over_regot_seconds"] = timings["splr"].median / timings["regot"].median
    return row
