"""Reading problems from ott-jax's types, and the one-line checks of inputs and settings."""

import jax.numpy as jnp
import numpy as np
import pytest
from ott.geometry.geometry import Geometry
from ott.problems.linear.linear_problem import LinearProblem

from jaxlab.core.errors import ConfigError
from jaxlab.ot.problem import (
    check_inputs,
    from_linear_problem,
    read_problem,
    resolve_tol,
)


def test_geometry_and_linear_problem(x64):
    cost = jnp.asarray(np.random.default_rng(0).random((4, 3)))
    geom = Geometry(cost_matrix=cost, epsilon=0.2)
    a, b = np.full(4, 0.25), np.full(3, 1 / 3)
    matrix, a_, b_, eps = read_problem(a, b, geom, None)
    np.testing.assert_array_equal(matrix, cost)
    assert a_ is a and b_ is b
    assert float(eps) == pytest.approx(0.2)
    assert float(read_problem(a, b, geom, 0.5)[3]) == 0.5  # an explicit epsilon wins
    c, a, b, eps = from_linear_problem(LinearProblem(geom))  # uniform marginals by default
    np.testing.assert_allclose(a, np.full(4, 0.25))
    np.testing.assert_allclose(b, np.full(3, 1 / 3))
    with pytest.raises(ConfigError, match="unbalanced"):
        from_linear_problem(LinearProblem(geom, tau_a=0.9))
    with pytest.raises(ConfigError, match="epsilon is required"):
        read_problem(a, b, cost, None)


def test_a_linear_problem_gives_its_marginals_and_refuses_others(x64):
    # The issue's `solve(a, b, problem)` failed with "epsilon is required when cost is a matrix".
    rng = np.random.default_rng(1)
    geom = Geometry(cost_matrix=jnp.asarray(rng.random((4, 3))), epsilon=0.3)
    a, b = jnp.asarray([0.1, 0.2, 0.3, 0.4]), jnp.asarray([0.5, 0.25, 0.25])
    matrix, a_, b_, eps = read_problem(None, None, LinearProblem(geom, a, b), None)
    np.testing.assert_array_equal(matrix, geom.cost_matrix)
    np.testing.assert_array_equal(a_, a)
    np.testing.assert_array_equal(b_, b)
    assert float(eps) == pytest.approx(0.3)
    with pytest.raises(ConfigError, match="carries its marginals: pass a=None, b=None") as err:
        read_problem(a, b, LinearProblem(geom, a, b), None)
    assert "\n" not in str(err.value)


def test_missing_marginals_are_uniform_in_the_costs_dtype():
    _, a, b, _ = read_problem(None, None, np.ones((4, 5), np.float32), 0.1)
    np.testing.assert_allclose(a, np.full(4, 0.25))
    np.testing.assert_allclose(b, np.full(5, 0.2))
    assert a.dtype == b.dtype == np.float32


def test_tolerances_default_per_dtype_and_unreachable_ones_are_refused():
    assert resolve_tol(None, np.float64) == 1e-8  # the paper's (Section 5)
    assert resolve_tol(None, np.float32) == 1e-5
    assert resolve_tol(1e-6, np.float32) == 1e-6
    assert resolve_tol(1e-12, np.float64) == 1e-12
    for tol, dtype, hint in [(1e-9, np.float32, "JAX_ENABLE_X64=1"), (1e-17, np.float64, "larger")]:
        with pytest.raises(ConfigError, match=f"tol={tol:g} is below what") as err:
            resolve_tol(tol, dtype)
        assert hint in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="tol must be a positive number"):
        resolve_tol(0.0, np.float64)


def test_check_inputs_refuses_non_numeric_arrays():
    cost = np.ones((3, 3))
    with pytest.raises(ConfigError, match="real numbers"):
        check_inputs(np.full(3, 1 / 3), np.array(["a", "b", "c"]), cost, 0.1)


GOOD = {"cost": np.ones((3, 4)), "a": np.full(3, 1 / 3), "b": np.full(4, 0.25), "epsilon": 0.1}


@pytest.mark.parametrize("solver", ["sinkhorn", "lbfgs"])
@pytest.mark.parametrize(
    "change, message",
    [
        ({"cost": np.full((3, 4), np.nan)}, "cost contains NaN or inf"),
        ({"cost": np.ones((4, 3))}, "do not fit a cost of shape"),
        ({"a": np.full(3, 0.5)}, "marginals have different mass"),
        ({"epsilon": -1.0}, "epsilon must be a positive number"),
        ({"tol": 0.0}, "tol must be a positive number"),
        ({"max_iter": 0}, "max_iter must be an integer >= 1"),
        ({"init": (np.zeros(3), np.zeros(3))}, "init beta0 must hold 4 finite numbers"),
        ({"init": (np.full(3, np.inf), np.zeros(4))}, "init alpha0 must hold 3 finite numbers"),
    ],
)
def test_direct_solver_calls_check_their_inputs(solver, change, message):
    # jaxlab.ot's solvers called eagerly check their inputs as qn_ot.solve does (one line), instead
    # of returning NaN potentials or failing deep inside JAX.
    from jaxlab.ot.lbfgs import lbfgs
    from jaxlab.ot.sinkhorn import sinkhorn

    fn = {"sinkhorn": sinkhorn, "lbfgs": lbfgs}[solver]
    kw = {**GOOD, **change}
    with pytest.raises(ConfigError, match=message) as err:
        fn(kw.pop("cost"), kw.pop("a"), kw.pop("b"), kw.pop("epsilon"), **kw)
    assert len(str(err.value).splitlines()) == 1
