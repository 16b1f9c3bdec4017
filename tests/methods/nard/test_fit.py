"""``fit``: support recovery of all four variants, the result contract, λ by CV, input errors."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data.nard_synthetic import make_problem
from jaxlab.methods.nard import METHODS, NARDResult, fit, select_lam


@pytest.fixture(scope="module")
def problem():
    return make_problem(300, m=20, n=200, p=10, seed=0)


@pytest.mark.parametrize("method", METHODS)
def test_support_recovery(problem, method):
    res = fit(problem.X, problem.Y, method=method)
    assert isinstance(res, NARDResult)
    sel = np.asarray(res.selected)
    tpr = (sel & problem.support).sum() / problem.support.sum()
    fpr = (sel & ~problem.support).sum() / (~problem.support).sum()
    assert (tpr, fpr) == (1.0, 0.0)
    assert res.converged and res.n_iter > 0 and res.seconds_per_iter > 0
    assert res.coef.shape == (20, 300) and res.alpha.shape == (300,)
    assert res.precision.shape == (20, 20) and res.objective.shape == (res.n_iter + 1,)
    assert np.all(np.isinf(np.asarray(res.alpha)[np.asarray(res.coef).any(0) == 0]))
    # The chain edges of Ω are found: every true edge is non-zero in the estimate.
    est = np.abs(np.asarray(res.precision)) > 1e-3
    assert np.all(est[problem.precision != 0])


def test_lambda_by_cross_validation():
    pr = make_problem(12, m=4, n=60, p=2, seed=5)
    X, Y = map(jnp.asarray, (pr.X, pr.Y))
    # sequential_surrogate reads only the N-free statistics: one compilation serves every fold.
    cv = select_lam(
        X,
        Y,
        "sequential_surrogate",
        lams=(0.01, 3.0),
        folds=3,
        max_iter=200,
        tol=1e-6,
        alpha_update="mackay",
        max_active=12,
    )
    assert cv.best == 0.01 and cv.scores[0] > cv.scores[1]  # λ = 3 empties Ω's off-diagonal
    res = fit(
        pr.X,
        pr.Y,
        method="sequential_surrogate",
        lam="cv",
        lams=(0.01, 3.0),
        cv_folds=3,
        max_iter=200,
        max_active=12,
    )
    assert np.asarray(res.selected)[pr.support].all()


@pytest.mark.parametrize(
    ("X", "Y", "kwargs", "match"),
    [
        (np.full((3, 5), np.nan), np.ones((2, 5)), {}, "NaN"),
        (np.ones((3, 5)), np.ones((2, 6)), {}, "N=5"),
        (np.ones((0, 5)), np.ones((2, 5)), {}, "d=0"),
        (np.ones(5), np.ones((2, 5)), {}, "2-D"),
        (np.ones((3, 5)), np.ones((2, 5)), {"method": "nrad"}, "did you mean 'nard'"),
        (np.ones((3, 5)), np.ones((2, 5)), {"lam": -1.0}, "lam"),
        (np.ones((3, 5)), np.ones((2, 5)), {"lam": "auto"}, "lam"),
        (np.ones((3, 5)), np.ones((2, 5)), {"alpha_update": "newton"}, "alpha_update"),
        (np.ones((3, 5)), np.zeros((2, 5)), {}, "zero"),
    ],
)
def test_input_errors(X, Y, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        fit(X, Y, **kwargs)
