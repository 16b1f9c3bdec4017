"""The JAX graphical lasso against scikit-learn's, warm starts, and the λ = 0 limit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.covariance import graphical_lasso as sk_graphical_lasso

from jaxlab.methods.nard import graphical_lasso


def _cov(m=7, n=25, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, m)) @ rng.standard_normal((m, m))
    return np.cov(a.T)


@pytest.mark.parametrize("lam", [0.02, 0.1, 0.5])
def test_matches_sklearn(x64, lam):
    s = _cov()
    _, ref = sk_graphical_lasso(s, lam, tol=1e-10, enet_tol=1e-12, max_iter=1000)
    ours = jax.jit(graphical_lasso)(jnp.asarray(s), lam)
    assert bool(ours.converged)
    # Both solvers stop on their own criteria; 1e-6 of Ω's scale is what both reach.
    np.testing.assert_allclose(np.asarray(ours.precision), ref, atol=1e-6 * np.abs(ref).max())
    np.testing.assert_array_equal(np.abs(np.asarray(ours.precision)) > 1e-8, np.abs(ref) > 1e-8)


def test_warm_start_reaches_the_same_solution_faster(x64):
    s = jnp.asarray(_cov(seed=1))
    solve = jax.jit(
        lambda lam, init: graphical_lasso(s, lam, init=init, tol=1e-10, lasso_tol=1e-12)
    )
    cold = jax.jit(lambda lam: graphical_lasso(s, lam, tol=1e-10, lasso_tol=1e-12))(0.1)
    warm = solve(0.1, solve(0.12, cold.precision).precision)
    np.testing.assert_allclose(np.asarray(warm.precision), np.asarray(cold.precision), atol=1e-8)
    again = solve(0.1, cold.precision)
    assert int(again.n_iter) <= 2 < int(cold.n_iter)


def test_lambda_zero_is_the_inverse(x64):
    s = _cov(seed=2)
    np.testing.assert_allclose(
        np.asarray(
            graphical_lasso(jnp.asarray(s), 0.0, lasso_tol=1e-13, lasso_iter=20000).precision
        ),
        np.linalg.inv(s),
        rtol=1e-8,
    )
