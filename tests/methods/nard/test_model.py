"""The d-space marginal likelihood against direct dense densities (scipy, float64)."""

import jax.numpy as jnp
import numpy as np
import scipy.stats

from jaxlab.methods.nard.model import log_marginal_likelihood, posterior, residual_cov, suff_stats


def _problem(d=4, m=3, n=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((d, n))
    Y = rng.standard_normal((m, n))
    alpha = rng.uniform(0.3, 3.0, d)
    a = rng.standard_normal((m, m))
    prec = a @ a.T + m * np.eye(m)
    return X, Y, alpha, prec


def test_loglik_matches_matrix_normal_and_kron_density(x64):
    X, Y, alpha, prec = _problem()
    c = np.eye(X.shape[1]) + X.T @ np.diag(1 / alpha) @ X
    v = np.linalg.inv(prec)
    ours = float(
        log_marginal_likelihood(
            jnp.asarray(X), jnp.asarray(Y), jnp.asarray(alpha), jnp.asarray(prec)
        )
    )
    ref_mn = scipy.stats.matrix_normal(mean=np.zeros_like(Y), rowcov=v, colcov=c).logpdf(Y)
    # vec stacks the columns of Y (order="F"): cov(vec Y) = C ⊗ V.
    ref_vec = scipy.stats.multivariate_normal(cov=np.kron(c, v)).logpdf(Y.ravel(order="F"))
    np.testing.assert_allclose(ours, ref_mn, rtol=1e-10)
    np.testing.assert_allclose(ours, ref_vec, rtol=1e-10)


def test_infinite_alpha_prunes_the_feature(x64):
    X, Y, alpha, prec = _problem(seed=1)
    alpha_inf = alpha.copy()
    alpha_inf[2] = np.inf
    full = log_marginal_likelihood(*map(jnp.asarray, (X, Y, alpha_inf, prec)))
    dropped = log_marginal_likelihood(
        *map(jnp.asarray, (np.delete(X, 2, 0), Y, np.delete(alpha, 2), prec))
    )
    np.testing.assert_allclose(float(full), float(dropped), rtol=1e-12)


def test_residual_cov_equals_its_two_forms(x64):
    X, Y, alpha, _ = _problem(d=6, m=3, n=9, seed=2)
    stats = suff_stats(jnp.asarray(X), jnp.asarray(Y))
    post = posterior(jnp.asarray(1 / alpha), stats.gram, stats.cross)
    s = np.asarray(residual_cov(post.sigma, stats.cross, stats.yy, stats.n))
    mean = np.asarray(post.mean)
    r = Y - mean @ X
    c_inv = np.linalg.inv(np.eye(9) + X.T @ np.diag(1 / alpha) @ X)
    np.testing.assert_allclose(s, (r @ r.T + mean @ np.diag(alpha) @ mean.T) / 9, rtol=1e-10)
    np.testing.assert_allclose(s, Y @ c_inv @ Y.T / 9, rtol=1e-10)
    sigma = np.linalg.inv(np.diag(alpha) + X @ X.T)
    np.testing.assert_allclose(
        np.asarray(post.well_determined), 1 - alpha * np.diag(sigma), rtol=1e-10
    )


def test_initial_gamma_by_hand():
    """γ₀ = N / (d ‖x_i‖²) with d the number of non-zero rows; a zero row starts at 0 (pruned)."""
    from jaxlab.methods.nard.model import initial_gamma

    X = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])  # ‖x‖² = 25, 0, 3; N = 3
    np.testing.assert_allclose(initial_gamma(jnp.asarray(X)), [3 / (2 * 25), 0.0, 3 / (2 * 3)])
