"""OT problem generators are valid and seeded (the benchmark experiment: tests/experiments)."""

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data.ot_problems import (
    image_cost,
    make_problem,
    mnist_pair,
    parse_problem_spec,
    synthetic_1,
    synthetic_2,
)


@pytest.mark.parametrize("gen", [synthetic_1, synthetic_2])
def test_synthetic_problems_are_valid_and_seeded(gen):
    p = gen(30, 25, seed=3)
    assert p.cost.shape == (30, 25) and p.a.shape == (30,) and p.b.shape == (25,)
    assert np.all(p.a > 0) and np.all(p.b > 0)
    np.testing.assert_allclose([p.a.sum(), p.b.sum()], 1.0)
    np.testing.assert_array_equal(gen(30, 25, seed=3).cost, p.cost)
    assert p.cost.max() <= 1.0 and p.cost.min() >= 0.0


def test_mnist_pair_histograms_and_l1_grid_cost():
    rng = np.random.default_rng(0)
    images = (rng.random((3, 6, 6)) * 255 * (rng.random((3, 6, 6)) > 0.7)).astype(np.uint8)
    p = mnist_pair(0, 2, images=images)
    assert p.cost.shape == (36, 36) and p.cost.max() == 1.0
    assert p.cost[0, 1] == pytest.approx(1 / 10) and p.cost[0, 35] == 1.0
    assert np.all(p.a > 0) and p.a.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(
        image_cost(2), [[0, 0.5, 0.5, 1], [0.5, 0, 1, 0.5], [0.5, 1, 0, 0.5], [1, 0.5, 0.5, 0]]
    )
    with pytest.raises(ConfigError):
        mnist_pair(0, 5, images=images)
    with pytest.raises(ConfigError):
        make_problem("gaussian", 10)


def test_shipped_mnist_pair():
    p = make_problem("mnist", 784)
    assert p.cost.shape == (784, 784) and np.all(p.b > 0)


def test_problem_specs_parse_or_say_what_to_write():
    assert parse_problem_spec("synthetic1:200") == ("synthetic1", 200)
    for bad in ("synthetic1", "sinkhorn:200", "mnist:x", "synthetic2:1"):
        with pytest.raises(ConfigError, match="look like synthetic1:200"):
            parse_problem_spec(bad)
