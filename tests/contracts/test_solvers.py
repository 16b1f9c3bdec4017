"""Contract of every iterative solver in jaxlab, parametrised over one registry.

A solver joins by adding one line to ``SOLVERS``: its family (how to build a small problem, call
the solver, read its trace, and what its stopping rule is) and its name. Every member must:

* report ``converged`` honestly: True exactly when the stopping rule holds at the last recorded,
  finite value of the trace (``‖g‖ < tol`` for the OT solvers; a relative objective change
  ``<= tol`` for NARD), and the trace is NaN after ``n_iter``;
* converge on the small problem (so the first property is not tested vacuously);
* run under ``jax.jit`` end to end and give the same answer as the eager call;
* stop without converging when the data make the objective non-finite;
* refuse bad input with a one-line :class:`~jaxlab.core.errors.ConfigError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data.nard_synthetic import make_problem
from jaxlab.methods import nard
from jaxlab.methods.nard.bound import surrogate_stats
from jaxlab.methods.nard.model import initial_gamma, suff_stats
from jaxlab.methods.nard.nard import solve_nard
from jaxlab.methods.nard.sequential import solve_sequential
from jaxlab.methods.nard.sequential_surrogate import solve_sequential_surrogate
from jaxlab.methods.nard.surrogate import solve_surrogate
from jaxlab.methods.qn_ot import Method as OTMethod
from jaxlab.methods.qn_ot import solve as ot_solve
from jaxlab.ot.partial import partial_ot


@dataclasses.dataclass(frozen=True)
class Family:
    """How the contract drives one family of solvers."""

    problem: Callable[[], Any]  # a small problem (built once per module)
    call: Callable[[str, Any, Any], Any]  # (name, problem, parameter) -> output
    parameter: Any  # the regularisation the small problem is solved at
    non_finite: Any  # a parameter value that makes the objective non-finite
    trace: Callable[[Any], np.ndarray]
    converged_by_rule: Callable[[np.ndarray, int], bool]
    bad_input: Callable[[str, Any], Any]  # must raise a one-line ConfigError


# ----------------------------------------------------------------------------- OT (qn_ot)
OT_TOL = 1e-9


def _ot_problem():
    rng = np.random.default_rng(0)
    x, y = rng.random((16, 2)), rng.random((12, 2))
    cost = ((x[:, None] - y[None]) ** 2).sum(-1)
    a, b = rng.random(16) + 0.2, rng.random(12) + 0.2
    return jnp.asarray(cost), jnp.asarray(a / a.sum()), jnp.asarray(b / b.sum())


def _ot_call(name, problem, epsilon):
    cost, a, b = problem
    options = {"density_max": 0.3} if name == "sparse_newton" else {}
    return ot_solve(a, b, cost, epsilon=epsilon, method=name, tol=OT_TOL, max_iter=3000, **options)


OT = Family(
    problem=_ot_problem,
    call=_ot_call,
    parameter=jnp.asarray(0.05),
    non_finite=jnp.nan,  # epsilon = NaN under jit (checks are skipped when traced)
    trace=lambda out: np.asarray(out.errors),
    converged_by_rule=lambda t, n: bool(np.isfinite(t[n]) and t[n] < OT_TOL),
    bad_input=lambda name, problem: ot_solve(
        problem[1], problem[2], problem[0], epsilon="0.05", method=name
    ),
)

# ----------------------------------------------------------------------------- NARD
NARD_TOL = 1e-8


def _nard_problem():
    pr = make_problem(12, m=3, n=20, p=2, seed=1)
    return jnp.asarray(pr.X, jnp.float32), jnp.asarray(pr.Y, jnp.float32)


def _nard_call(name, problem, lam):
    X, Y = problem
    kw = dict(max_iter=200, tol=NARD_TOL)
    if name == "nard":
        return solve_nard(suff_stats(X, Y), lam, initial_gamma(X), **kw)
    if name == "sequential":
        return solve_sequential(suff_stats(X, Y), lam, max_active=12, **kw)
    if name == "surrogate":
        return solve_surrogate(X, Y, surrogate_stats(X, Y), lam, initial_gamma(X), **kw)
    return solve_sequential_surrogate(X, surrogate_stats(X, Y), lam, max_active=12, **kw)


def _relative_change(t, n):
    return bool(n >= 1 and np.isfinite(t[n]) and abs(t[n] - t[n - 1]) <= NARD_TOL * abs(t[n - 1]))


NARD = Family(
    problem=_nard_problem,
    call=_nard_call,
    parameter=jnp.asarray(0.1, jnp.float32),
    non_finite=jnp.asarray(jnp.nan, jnp.float32),
    trace=lambda out: np.asarray(out.objective),
    converged_by_rule=_relative_change,
    bad_input=lambda name, problem: nard.fit(*problem, method=name, lam=float("inf")),
)

# ----------------------------------------------------------------------------- partial OT (Dykstra)
PARTIAL_TOL = 1e-10


def _partial_call(name, problem, epsilon):
    cost, a, b = problem
    return partial_ot(0.8 * a / a.max(), b, cost, mass=0.7, epsilon=epsilon, tol=PARTIAL_TOL)


PARTIAL = dataclasses.replace(
    OT,
    call=_partial_call,
    converged_by_rule=lambda t, n: bool(np.isfinite(t[n]) and t[n] < PARTIAL_TOL),
    bad_input=lambda name, problem: partial_ot(
        problem[1], problem[2], problem[0], mass=2.0, epsilon=0.05
    ),
)

# ----------------------------------------------------------------------------- the registry
SOLVERS = [(OT, m.value) for m in OTMethod] + [(NARD, m.value) for m in nard.Method]
SOLVERS += [(PARTIAL, "partial_entropic")]
FAMILY_NAMES = {id(OT): "ot", id(NARD): "nard", id(PARTIAL): "ot"}
IDS = [f"{FAMILY_NAMES[id(fam)]}-{name}" for fam, name in SOLVERS]


@pytest.fixture(scope="module")
def problems():
    with jax.enable_x64(True):
        return {id(OT): OT.problem(), id(NARD): _nard_problem_x64(), id(PARTIAL): OT.problem()}


def _nard_problem_x64():
    X, Y = _nard_problem()
    return jnp.asarray(X, jnp.float64), jnp.asarray(Y, jnp.float64)


@pytest.fixture(scope="module")
def solved(problems):
    """Each solver's outputs on its family's small problem (x64): eager, jitted, and jitted again
    with the non-finite parameter (one compilation serves both jitted calls)."""
    out = {}
    with jax.enable_x64(True):
        for family, name in SOLVERS:
            problem = problems[id(family)]
            jitted = jax.jit(lambda p, q, f=family, n=name: f.call(n, p, q))
            out[name, id(family)] = (
                family.call(name, problem, family.parameter),
                jitted(problem, family.parameter),
                jitted(
                    problem, jnp.asarray(family.non_finite, jnp.asarray(family.parameter).dtype)
                ),
            )
    return out


def _n_iter(out) -> int:
    return int(out.n_iter)


@pytest.mark.parametrize("family, name", SOLVERS, ids=IDS)
def test_converges_and_says_so_honestly(solved, family, name):
    eager, _, _ = solved[name, id(family)]
    trace, n = family.trace(eager), _n_iter(eager)
    assert bool(eager.converged), f"{name} did not converge on the small problem"
    assert bool(eager.converged) == family.converged_by_rule(trace, n)
    assert np.all(np.isfinite(trace[: n + 1])) and np.all(np.isnan(trace[n + 1 :]))


@pytest.mark.parametrize("family, name", SOLVERS, ids=IDS)
def test_runs_under_jit_with_the_same_answer(solved, family, name):
    eager, jitted, _ = solved[name, id(family)]
    assert _n_iter(jitted) == _n_iter(eager) and bool(jitted.converged) == bool(eager.converged)
    np.testing.assert_allclose(family.trace(jitted), family.trace(eager), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("family, name", SOLVERS, ids=IDS)
def test_non_finite_objective_is_never_converged(solved, family, name):
    out = solved[name, id(family)][2]
    assert not bool(out.converged)
    trace = family.trace(out)
    assert not np.all(np.isfinite(trace[: _n_iter(out) + 1]))


@pytest.mark.parametrize("family, name", SOLVERS, ids=IDS)
def test_bad_input_is_one_line(problems, family, name):
    with pytest.raises(ConfigError) as err:
        family.bad_input(name, problems[id(family)])
    assert len(str(err.value).splitlines()) == 1
