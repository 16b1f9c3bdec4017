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
