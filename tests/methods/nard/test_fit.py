"""``fit``: support recovery of all four variants, the result contract, λ by CV, input errors,
the intercept (against scikit-learn's ARD and a float64 numpy construction of the fixed point) and
the compute dtype."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from sklearn.covariance import graphical_lasso
from sklearn.linear_model import ARDRegression
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
    # Without centring, as the problem arose (centring would turn the constant row into zeros).
    j = next(i for i in range(39, 0, -1) if not small.support[i])
    X = np.array(small.X)
    X[j] = X[j] * 5 if change == "scaled_by_5" else 5.0
    plain = fit(small.X, small.Y, method=method, fit_intercept=False)
    res = fit(X, small.Y, method=method, fit_intercept=False)
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
            coef, intercept = np.asarray(res.coef), np.asarray(res.intercept)[:, None]
            for part, out in ((test, h), (train, i)):
                r = (Y[:, part] - coef @ X[:, part] - intercept).T
                out.append(scipy.stats.multivariate_normal(np.zeros(6), cov).logpdf(r).mean())
        held.append(np.mean(h))
        insample.append(np.mean(i))
    np.testing.assert_allclose(cv.scores, held, rtol=1e-9)
    best = int(np.argmax(held))
    assert 0 < best < len(lams) - 1 and cv.best == lams[best]
    assert int(np.argmax(insample)) != best
    res = fit(X, Y, method="nard", lam="cv", lams=lams, cv_folds=3, **opts)
    assert np.asarray(res.selected)[pr.support].all()


ONES, RAMP = np.ones((3, 5)), np.arange(10.0).reshape(2, 5)


@pytest.mark.parametrize(
    ("X", "Y", "kwargs", "match"),
    [
        (np.full((3, 5), np.nan), RAMP, {}, "NaN"),
        (ONES, np.ones((2, 6)), {}, "N=5"),
        (np.ones((0, 5)), RAMP, {}, "d=0"),
        (np.ones(5), RAMP, {}, "2-D"),
        (ONES + 0j, RAMP, {}, "real numbers"),
        (ONES, RAMP, {"method": "nrad"}, "did you mean 'nard'"),
        (ONES, RAMP, {"lam": -1.0}, "lam"),
        (ONES, RAMP, {"lam": "auto"}, "lam"),
        (ONES, RAMP, {"alpha_update": "newton"}, "alpha_update"),
        (ONES, np.zeros((2, 5)), {"fit_intercept": False}, r"rows 0, 1 of Y are identically 0"),
        (ONES, RAMP * [[1], [0]] + 3, {}, r"output rows 1 of Y are constant"),
        (ONES, RAMP, {"fit_intercept": 1}, "fit_intercept"),
        (ONES, RAMP, {"lam": np.inf}, "lam must be a finite"),
        (ONES, RAMP, {"lam": np.nan}, "lam must be a finite"),
        (ONES, RAMP, {"lam": [0.1]}, "lam must be a finite"),
        (ONES, RAMP, {"lam": True}, "lam must be a finite"),
        (ONES, RAMP, {"lam": "cv", "lams": (0.1, np.inf)}, "lams"),
        (ONES, RAMP, {"tol": np.inf}, "tol"),
        (ONES, RAMP, {"tol": "1e-6"}, "tol"),
        (ONES, RAMP, {"max_iter": 0}, "max_iter"),
        (ONES, RAMP, {"max_iter": 2.5}, "max_iter"),
        (ONES, RAMP, {"threshold": np.nan}, "threshold"),
    ],
)
def test_input_errors(X, Y, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        fit(X, Y, **kwargs)


def test_input_errors_are_one_line():
    with pytest.raises(ConfigError) as err:
        fit(ONES, RAMP, tol=1e-9)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("method", METHODS)
def test_zero_and_constant_feature_rows_are_pruned_and_change_nothing_else(small, method, x64):
    # An all-zero row, and (centred) a constant one, carry no information. They were refused, or,
    # before that, made the surrogate methods prune everything; now they start and stay pruned,
    # and the fit equals the fit without them. With centring, every constant row of the raw data
    # must become exact zeros (a rounded mean would leave a tiny row that scaling blows up to ±1).
    zero, const = [i for i in range(39, 0, -1) if not small.support[i]][:2]
    X = np.array(small.X)
    X[zero], X[const] = 0.0, 0.1
    keep = np.setdiff1d(np.arange(40), [zero, const])
    opts = dict(method=method, max_active=10, tol=1e-9)
    res, ref = fit(X, small.Y, **opts), fit(small.X[keep], small.Y, **opts)
    assert res.converged and ref.converged
    np.testing.assert_array_equal(res.selected[keep], ref.selected)
    np.testing.assert_array_equal(res.selected, small.support)
    out = np.array([zero, const])
    assert np.all(np.asarray(res.coef)[:, out] == 0) and np.all(np.isinf(res.alpha[out]))
    np.testing.assert_allclose(res.coef[:, keep], ref.coef, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(res.intercept, ref.intercept, rtol=1e-6, atol=1e-9)


# ----------------------------------------------------------------------------- the intercept


@pytest.fixture(scope="module")
def uncentred(small):
    """The small problem with the features and outputs moved far from 0: Y = W X + b."""
    rng = np.random.default_rng(7)
    shift_x, b = rng.uniform(-5, 5, (40, 1)), rng.uniform(-10, 10, (5, 1))
    return small.X + shift_x, small.Y + small.coef @ shift_x + b


@pytest.mark.parametrize("method", METHODS)
def test_uncentred_data_select_the_true_support(small, uncentred, method):
    # Uncentred, the means act like a feature shared by all outputs: before centring, 12 to 25 of
    # the 40 features were selected here (the surrogates: none) instead of the true 4.
    X, Y = uncentred
    res = fit(X, Y, method=method)
    np.testing.assert_array_equal(res.selected, small.support)
    assert res.converged and res.intercept.shape == (5,)
    # b = ȳ − W x̄: the residuals have mean 0 for every output (up to float32 rounding of Y ~ 10).
    np.testing.assert_allclose(np.mean(Y - res.predict(X), axis=1), 0, atol=1e-4)


def test_single_output_is_scikit_learns_ard_with_intercept(x64):
    # With one output, NARD is ARD: Ω is the noise precision β and α_i Ω the weight precision λ_i
    # (prior W ~ MN(0, V, K⁻¹)); both maximise one evidence, so their fixed points agree.
    # scikit-learn centres for its intercept; its default hyperpriors (1e-6) and pruning at
    # λ > 1e4 differ from NARD's by far less than the tolerances.
    rng = np.random.default_rng(0)
    d, n = 8, 100
    X = rng.standard_normal((d, n)) * rng.uniform(0.5, 2, (d, 1)) + rng.uniform(-5, 5, (d, 1))
    w = np.zeros(d)
    w[[1, 4, 6]] = [1.5, -1.0, 0.8]
    y = w @ X + 7.0 + 0.5 * rng.standard_normal(n)
    ard = ARDRegression(tol=1e-12, max_iter=10000).fit(X.T, y)
    for method in ("nard", "sequential"):
        res = fit(X, y[None], method=method, tol=1e-12, max_iter=1000)
        assert res.converged
        np.testing.assert_allclose(res.coef[0], ard.coef_, atol=1e-4)
        np.testing.assert_allclose(res.intercept[0], ard.intercept_, atol=1e-4)
        kept = ard.lambda_ < ard.threshold_lambda
        np.testing.assert_allclose(res.alpha[kept] * res.precision[0, 0], ard.lambda_[kept], 1e-3)
        np.testing.assert_allclose(res.precision[0, 0], ard.alpha_, rtol=1e-5)
        np.testing.assert_array_equal(np.flatnonzero(res.selected), [1, 4, 6])


def test_fixed_point_is_the_papers_posterior_on_the_centred_data(small, uncentred, x64):
    # A float64 numpy construction of Sec. 3 on the centred data, at NARD's (γ, λ): the posterior
    # mean M = Y_c X_cᵀ (Γ⁻¹ + X_c X_cᵀ)⁻¹ is the coefficient, the intercept is ȳ − M x̄, Ω is
    # scikit-learn's graphical lasso of S = Y_c C⁻¹ Y_cᵀ / N, and γ satisfies the MacKay fixed
    # point γ_i = u_i / (m (1 − Σ_ii / γ_i)), u = diag(MᵀΩM), on the features that are not on
    # their slow way to γ = 0 (a fixed point they reach only in the limit).
    X, Y = uncentred
    lam = 0.05
    res = fit(X, Y, method="nard", lam=lam, tol=1e-12, max_iter=2000)
    assert res.converged
    xc, yc = X - X.mean(1, keepdims=True), Y - Y.mean(1, keepdims=True)
    a = np.asarray(res.gamma) > 0
    g = np.asarray(res.gamma)[a]
    sigma = np.linalg.inv(np.diag(1 / g) + xc[a] @ xc[a].T)
    mean = yc @ xc[a].T @ sigma
    np.testing.assert_allclose(res.coef[:, a], mean, rtol=1e-8, atol=1e-12)
    assert np.all(res.coef[:, ~a] == 0)
    np.testing.assert_allclose(res.intercept, Y.mean(1) - mean @ X[a].mean(1), rtol=1e-8)
    cov = (yc @ yc.T - yc @ xc[a].T @ sigma @ xc[a] @ yc.T) / X.shape[1]
    _, omega = graphical_lasso(cov, alpha=lam, tol=1e-8, enet_tol=1e-10, max_iter=1000)
    np.testing.assert_allclose(res.precision, omega, rtol=1e-6, atol=1e-8)
    u = np.sum(mean * (np.asarray(res.precision) @ mean), axis=0)
    big = g * np.sum(xc[a] ** 2, axis=1) >= 1
    want = u / (5 * (1 - np.diag(sigma) / g))
    np.testing.assert_allclose(g[big], want[big], rtol=1e-6)
    # Every true feature is active and its fixed point checked.
    assert np.all(a[small.support]) and np.all(big[small.support[a]])


# ----------------------------------------------------------------------------- the compute dtype


@pytest.mark.parametrize(
    ("dtype", "want"),
    [("float32", "float32"), ("float64", "float64"), ("bfloat16", "float32"), ("int32", "float32")],
)
def test_computes_in_the_inputs_dtype_and_returns_it(small, dtype, want, x64):
    # JAX's rule: the inputs' dtype, promoted to at least float32. With x64 on, float32 inputs were
    # computed and returned in float64.
    X = jnp.asarray(np.round(small.X * 8), dtype)
    Y = jnp.asarray(np.round(small.Y * 8), dtype)
    res = fit(X, Y, method="surrogate")
    for name in ("coef", "gamma", "precision", "objective", "intercept"):
        assert getattr(res, name).dtype == want, name
    assert res.converged


def test_a_tolerance_the_dtype_cannot_resolve_is_refused(small):
    # float32's eps is 1.2e-7: a relative change of 1e-9 cannot be resolved, so such a tolerance
    # was "met" only when the iteration stalled exactly. float64 with x64 resolves it.
    with pytest.raises(ConfigError, match=r"tol=1e-09 is below what float32 resolves.*X64=1"):
        fit(small.X, small.Y, tol=1e-9)
    with jax.enable_x64(True):
        res = fit(small.X, small.Y, tol=1e-9)
    assert res.converged and res.coef.dtype == jnp.float64
    # The default tolerance follows the dtype: one float32 resolves with a wide margin.
    assert fit(small.X, small.Y).n_iter == fit(small.X, small.Y, tol=1e-5).n_iter
