"""One result type and one dispatcher for the NARD family; partial correlations of Ω.

``fit_any`` must return the same :class:`NARDResult` for a NARD algorithm and for each baseline
(numpy arrays, the house solver fields), ``score_fit`` must score that result against the truth,
and ``partial_correlations`` must equal the partial correlations computed without the precision
matrix: from the conditional covariance of each pair given the rest (a Schur complement of Σ).
"""

import math

import numpy as np
import pytest

from jaxlab.data.nard_synthetic import make_problem
from jaxlab.methods.nard import NARDResult, partial_correlations
from jaxlab.methods.nard.baselines import BASELINES
from jaxlab.methods.nard.evaluate import fit_any, score_fit
from jaxlab.methods.nard.scores import support_rates


@pytest.fixture(scope="module")
def problem():
    return make_problem(12, m=4, n=50, p=2, seed=1)


@pytest.mark.parametrize("name", ["surrogate", *BASELINES])
def test_methods_and_baselines_return_one_result_type(x64, problem, name):
    res = fit_any(name, problem.X, problem.Y, 0.1)
    assert type(res) is NARDResult
    assert isinstance(res.coef, np.ndarray) and res.coef.shape == (4, 12)
    assert isinstance(res.selected, np.ndarray) and res.selected.dtype == bool
    assert res.selected.shape == (12,)
    assert isinstance(res.n_iter, int) and res.n_iter >= 1 and isinstance(res.converged, bool)
    assert res.seconds > 0 and res.seconds_per_iter == pytest.approx(res.seconds / res.n_iter)
    if name in BASELINES:
        assert res.gamma is None and res.alpha is None and res.objective is None
        assert math.isnan(res.stats_seconds)
        assert (res.precision is None) == (name != "two_stage")
    else:
        assert res.objective.shape == (res.n_iter + 1,) and 0 < res.stats_seconds < res.seconds
        assert res.gamma.shape == (12,) and np.all(np.isinf(res.alpha[res.gamma == 0]))
    if res.precision is not None:
        assert res.precision.shape == (4, 4)


def test_score_fit_scores_the_dispatched_fit(x64, problem):
    row = score_fit("nard", problem, 0.1)
    res = fit_any("nard", problem.X, problem.Y, 0.1)
    assert (row["tpr"], row["fpr"]) == support_rates(res.selected, problem.support)
    rmse = np.sqrt(np.mean((res.coef - problem.coef) ** 2))
    assert row["coef_rmse"] == pytest.approx(rmse, rel=1e-9)
    assert row["n_iter"] == res.n_iter and row["converged"] == float(res.converged)
    assert math.isnan(score_fit("mtlasso", problem, 0.1)["omega_rel_error"])  # no network


def test_partial_correlations_match_the_conditional_covariance():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 5))
    cov = a @ a.T + 5 * np.eye(5)
    want = np.eye(5)
    for i in range(5):
        for j in range(i + 1, 5):
            pair, rest = [i, j], [k for k in range(5) if k not in (i, j)]
            s = cov[np.ix_(pair, pair)] - cov[np.ix_(pair, rest)] @ np.linalg.solve(
                cov[np.ix_(rest, rest)], cov[np.ix_(rest, pair)]
            )
            want[i, j] = want[j, i] = s[0, 1] / np.sqrt(s[0, 0] * s[1, 1])
    np.testing.assert_allclose(partial_correlations(np.linalg.inv(cov)), want, atol=1e-12)
