"""``fit``: support recovery of all four variants, the result contract, λ by CV, input errors."""

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from sklearn.model_selection import KFold

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
    assert res.converged and res.n_iter > 0 and res.stats_seconds > 0
    assert res.seconds > res.stats_seconds
    assert res.seconds_per_iter == pytest.approx(res.seconds / res.n_iter)
    assert np.all(np.isfinite(np.asarray(res.objective)))
    assert res.coef.shape == (20, 300) and res.alpha.shape == (300,)
    assert res.precision.shape == (20, 20) and res.objective.shape == (res.n_iter + 1,)
    assert np.all(np.isinf(np.asarray(res.alpha)[np.asarray(res.coef).any(0) == 0]))
    # The chain edges of Ω are found: every true edge is non-zero in the estimate.
    est = np.abs(np.asarray(res.precision)) > 1e-3
    assert np.all(est[problem.precision != 0])


@pytest.fixture(scope="module")
def small():
    return make_problem(40, m=5, n=80, p=4, seed=0)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("change", ["scaled_by_5", "constant_at_5"])
def test_one_feature_on_another_scale_changes_no_variants_answer(small, method, change, x64):
    # A feature 5 times larger than the others, or a constant row at 5, once made the surrogate
    # methods prune everything and report convergence (their Lipschitz bound is isotropic). fit
    # runs every method on unit-RMS rows: the support is the one found on the plain data, and the
    # exact methods' coefficients are equivariant (the rescaled feature's weight scales back).
    j = next(i for i in range(39, 0, -1) if not small.support[i])
    X = np.array(small.X)
    X[j] = X[j] * 5 if change == "scaled_by_5" else 5.0
    plain = fit(small.X, small.Y, method=method)
    res = fit(X, small.Y, method=method)
    np.testing.assert_array_equal(res.selected, small.support)
    np.testing.assert_array_equal(plain.selected, small.support)
    assert res.converged
    if method in ("nard", "sequential") and change == "scaled_by_5":
        keep = np.arange(40) != j
        np.testing.assert_allclose(res.coef[:, keep], plain.coef[:, keep], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(res.coef[:, j] * 5, plain.coef[:, j], rtol=1e-6, atol=1e-9)


def test_lambda_by_cross_validation_is_the_argmax_of_an_independent_cv_curve(x64):
    # A fine grid whose held-out curve peaks inside it: neighbouring λ differ by ~1-2 % of the
    # score, and the in-sample curve peaks elsewhere, so scoring the wrong samples, a wrong sign or
    # scale of a term, or misassigned folds would choose another λ.
    pr = make_problem(12, m=6, n=60, p=2, seed=5)
    X, Y = pr.X, pr.Y
    lams = tuple(float(v) for v in np.round(np.geomspace(0.005, 0.5, 9), 4))
    opts = dict(max_iter=200, tol=1e-8)
    cv = select_lam(
        jnp.asarray(X),
        jnp.asarray(Y),
        "nard",
        lams=lams,
        folds=3,
        seed=0,
        alpha_update="mackay",
        max_active=12,
        **opts,
    )
    # The documented folds (a seeded permutation cut into near-equal consecutive parts) built with
    # scikit-learn's unshuffled KFold; each fold scored with scipy's Gaussian log-density.
    perm = np.random.default_rng(0).permutation(60)
    held, insample = [], []
    for lam in lams:
        h, i = [], []
        for train_idx, test_idx in KFold(3).split(perm):
            train, test = perm[train_idx], perm[test_idx]
            res = fit(X[:, train], Y[:, train], method="nard", lam=lam, **opts)
            cov = np.linalg.inv(np.asarray(res.precision))
            coef = np.asarray(res.coef)
            for part, out in ((test, h), (train, i)):
                r = (Y[:, part] - coef @ X[:, part]).T
                out.append(scipy.stats.multivariate_normal(np.zeros(6), cov).logpdf(r).mean())
        held.append(np.mean(h))
        insample.append(np.mean(i))
    np.testing.assert_allclose(cv.scores, held, rtol=1e-9)
    best = int(np.argmax(held))
    assert 0 < best < len(lams) - 1 and cv.best == lams[best]
    assert int(np.argmax(insample)) != best
    res = fit(X, Y, method="nard", lam="cv", lams=lams, cv_folds=3, **opts)
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
        (np.ones((3, 5)), np.ones((2, 5)), {"lam": np.inf}, "lam must be a finite"),
        (np.ones((3, 5)), np.ones((2, 5)), {"lam": np.nan}, "lam must be a finite"),
        (np.ones((3, 5)), np.ones((2, 5)), {"lam": [0.1]}, "lam must be a finite"),
        (np.ones((3, 5)), np.ones((2, 5)), {"lam": True}, "lam must be a finite"),
        (np.ones((3, 5)), np.ones((2, 5)), {"lam": "cv", "lams": (0.1, np.inf)}, "lams"),
        (np.ones((3, 5)), np.ones((2, 5)), {"tol": np.inf}, "tol"),
        (np.ones((3, 5)), np.ones((2, 5)), {"tol": "1e-6"}, "tol"),
        (np.ones((3, 5)), np.ones((2, 5)), {"max_iter": 0}, "max_iter"),
        (np.ones((3, 5)), np.ones((2, 5)), {"max_iter": 2.5}, "max_iter"),
        (np.ones((3, 5)), np.ones((2, 5)), {"threshold": np.nan}, "threshold"),
    ],
)
def test_input_errors(X, Y, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        fit(X, Y, **kwargs)


@pytest.mark.parametrize("method", METHODS)
def test_all_zero_feature_rows_are_rejected_by_name(method):
    # Before, method="surrogate" accepted such a row and reported converged=True after one
    # iteration with objective −inf and an empty support.
    pr = make_problem(20, m=3, n=15, p=2, seed=0)
    X = pr.X.copy()
    X[[4, 11]] = 0.0
    with pytest.raises(ConfigError, match=r"feature rows 4, 11 of X are identically zero"):
        fit(X, pr.Y, method=method)
