"""Reading problems from ott-jax's types, and the one-line checks of inputs and settings."""

import jax.numpy as jnp
import numpy as np
import pytest
from ott.geometry.geometry import Geometry
from ott.problems.linear.linear_problem import LinearProblem

from jaxlab.core.errors import ConfigError
from jaxlab.ot.problem import check_inputs, check_positive, from_linear_problem, unpack_cost


def test_geometry_and_linear_problem(x64):
    cost = jnp.asarray(np.random.default_rng(0).random((4, 3)))
    geom = Geometry(cost_matrix=cost, epsilon=0.2)
    matrix, eps = unpack_cost(geom, None)
    np.testing.assert_array_equal(matrix, cost)
    assert float(eps) == pytest.approx(0.2)
    assert float(unpack_cost(geom, 0.5)[1]) == 0.5  # an explicit epsilon wins
    c, a, b, eps = from_linear_problem(LinearProblem(geom))  # uniform marginals by default
    np.testing.assert_allclose(a, np.full(4, 0.25))
    np.testing.assert_allclose(b, np.full(3, 1 / 3))
    with pytest.raises(ConfigError, match="unbalanced"):
        from_linear_problem(LinearProblem(geom, tau_a=0.9))
    with pytest.raises(ConfigError, match="epsilon is required"):
        unpack_cost(cost, None)


@pytest.mark.parametrize(
    "value, match",
    [
        ("0.1", r"got '0.1' \(str\)"),
        (True, r"got True \(bool\)"),
        (None, r"\(NoneType\)"),
        ([0.1], r"\(list\)"),
        (0.0, "got 0.0"),
        (-1, "got -1"),
        (float("nan"), "got nan"),
        (float("inf"), "got inf"),
    ],
)
def test_check_positive_refuses_in_one_line(value, match):
    with pytest.raises(ConfigError, match=match) as err:
        check_positive("epsilon", value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", [0.1, 1, np.float32(0.5), np.asarray(2.0), jnp.asarray(1e-3)])
def test_check_positive_accepts_numbers(value):
    check_positive("epsilon", value)


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
