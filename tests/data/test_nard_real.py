"""The offline real datasets of the NARD experiments: shapes, names, the noise mask, errors."""

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data.nard_real import DATASETS, load


def test_linnerud_is_scikit_learns():
    data = load("linnerud")
    assert data.X.shape == (3, 20) and data.Y.shape == (3, 20)
    assert data.features == ("Chins", "Situps", "Jumps") and not data.noise.any()


def test_diabetes_has_products_and_seeded_distractors():
    data = load("diabetes", n_noise=7, seed=3)
    assert data.X.shape == (5 + 14 + 7, 442) and data.Y.shape == (6, 442)
    assert len(data.features) == data.X.shape[0] and "sex*sex" not in data.features
    np.testing.assert_array_equal(data.noise, np.r_[np.zeros(19, bool), np.ones(7, bool)])
    # bmi*bp is the product of the standardised columns it names.
    i, j, k = (data.features.index(n) for n in ("bmi", "bp", "bmi*bp"))
    np.testing.assert_allclose(data.X[k], data.X[i] * data.X[j])
    np.testing.assert_array_equal(load("diabetes", n_noise=7, seed=3).X, data.X)
    assert not np.array_equal(load("diabetes", n_noise=7, seed=4).X[-1], data.X[-1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"name": "iris"}, "unknown dataset"), ({"name": DATASETS[1], "n_noise": -1}, "n_noise")],
)
def test_bad_requests_raise_one_line(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        load(**kwargs)
