"""The seeded synthetic generator: determinism, shapes, and the chain precision."""

import numpy as np
import pytest

from jaxlab.data.nard_synthetic import chain_precision, make_problem


def test_deterministic_and_shaped():
    a, b = make_problem(50, m=6, n=30, p=5, seed=3), make_problem(50, m=6, n=30, p=5, seed=3)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.X.shape == (50, 30) and a.Y.shape == (6, 30) and a.coef.shape == (6, 50)
    assert a.support.sum() == 5
    active = np.abs(a.coef[:, a.support])
    assert active.min() >= 0.5 and active.max() <= 1.5
    assert np.all(a.coef[:, ~a.support] == 0)
    assert not np.array_equal(make_problem(50, m=6, n=30, p=5, seed=4).X, a.X)


def test_chain_precision_is_tridiagonal_and_positive_definite():
    prec = chain_precision(8, 0.45)
    assert np.linalg.eigvalsh(prec).min() > 0
    assert np.count_nonzero(prec - np.diag(np.diag(prec))) == 2 * 7
    with pytest.raises(ValueError):
        chain_precision(4, 0.5)
