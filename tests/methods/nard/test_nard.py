"""Block coordinate ascent: monotone objective, the α-step as standard ARD, and the λ = 0 Ω-step."""

import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import ARDRegression

from jaxlab.data.nard_synthetic import make_problem
from jaxlab.methods.nard.model import posterior, residual_cov, suff_stats
from jaxlab.methods.nard.nard import alpha_step, solve_nard


@pytest.mark.parametrize("rule", ["em", "mackay"])
def test_objective_never_decreases(x64, rule):
    # EM is monotone by construction; for MacKay this is an empirical check on this problem.
    pr = make_problem(40, m=5, n=30, p=4, seed=0)
    stats = suff_stats(jnp.asarray(pr.X), jnp.asarray(pr.Y))
    out = solve_nard(stats, jnp.asarray(0.05), jnp.ones(40), max_iter=150, tol=1e-10, rule=rule)
    trace = np.asarray(out.objective)[: int(out.n_iter) + 1]
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))
    assert trace[-1] > trace[0] + 10


def test_alpha_step_with_identity_omega_and_one_output_is_sklearn_ard(x64):
    rng = np.random.default_rng(0)
    n, d = 40, 6
    X = rng.standard_normal((n, d))
    y = X[:, :2] @ np.array([1.0, -0.7]) + 0.5 * rng.standard_normal(n)
    y = y / np.std(y)  # var(y) = 1, so sklearn's initial noise precision 1/(var + eps) is Ω = 1
    ard = ARDRegression(
        max_iter=1, fit_intercept=False, lambda_1=0.0, lambda_2=0.0, threshold_lambda=1e300
    ).fit(X, y)
    omega = 1.0 / (np.var(y) + np.finfo(np.float64).eps)
    stats = suff_stats(jnp.asarray(X.T), jnp.asarray(y[None, :]))
    # sklearn's weight precision λ is α Ω in our parametrisation (prior cov of W is V/α); λ₀ = 1.
    gamma = jnp.full((d,), omega)
    post = posterior(gamma, stats.gram, stats.cross)
    new = alpha_step(post, jnp.asarray([[omega]]), gamma, "mackay")
    np.testing.assert_allclose(omega / np.asarray(new), ard.lambda_, rtol=1e-9)


def test_lambda_zero_gives_the_inverse_residual_covariance(x64):
    # Same static arguments and shapes as the monotonicity test: the compiled solver is reused.
    pr = make_problem(40, m=5, n=60, p=4, seed=1)
    stats = suff_stats(jnp.asarray(pr.X), jnp.asarray(pr.Y))
    out = solve_nard(stats, jnp.asarray(0.0), jnp.ones(40), max_iter=150, tol=1e-10, rule="mackay")
    post = posterior(out.gamma, stats.gram, stats.cross)
    cov = np.asarray(residual_cov(post.sigma, stats.cross, stats.yy, stats.n))
    np.testing.assert_allclose(np.asarray(out.precision), np.linalg.inv(cov), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out.coef), np.asarray(post.mean), rtol=1e-10)


def _vec_posterior(X, Y, gamma, prec):
    """The posterior of vec(W) (columns stacked) built from the model of Sec. 3 in float64 numpy:
    precision (K + XXᵀ) ⊗ Ω, mean solving it against vec(Ω Y Xᵀ); no Woodbury, no γ algebra."""
    m, d = Y.shape[0], X.shape[0]
    post_prec = np.kron(np.diag(1 / gamma) + X @ X.T, prec)
    cov = np.linalg.inv(post_prec)
    mean = np.linalg.solve(post_prec, (prec @ Y @ X.T).ravel(order="F")).reshape((m, d), order="F")
    blocks = [cov[i * m : (i + 1) * m, i * m : (i + 1) * m] for i in range(d)]
    return mean, blocks


def test_alpha_step_rules_against_the_vec_posterior_and_the_likelihood_gradient(x64):
    """Sec. 4.1's α-step for m = 3 outputs and a non-diagonal Ω, from the dense posterior of vec(W).

    EM: α_i ← m / E[w_iᵀ Ω w_i]; MacKay: α_i ← (m − α_i tr(Ω Cov w_i)) / (m̄_iᵀ Ω m̄_i), the
    rearrangement of ∂ log p/∂α_i = ½[m/α_i − tr(Ω Cov w_i) − m̄_iᵀ Ω m̄_i] = 0, whose form is
    checked here against central differences of scipy's matrix-normal log density.
    """
    import scipy.stats

    rng = np.random.default_rng(5)
    d, m, n = 4, 3, 7
    X, Y = rng.standard_normal((d, n)), rng.standard_normal((m, n))
    alpha = rng.uniform(0.3, 3.0, d)
    a = rng.standard_normal((m, m))
    prec = a @ a.T + m * np.eye(m)
    mean, blocks = _vec_posterior(X, Y, 1 / alpha, prec)
    quad = np.array([mean[:, i] @ prec @ mean[:, i] for i in range(d)])
    trace = np.array([np.trace(prec @ c) for c in blocks])

    def logp(al):
        c = np.eye(n) + X.T @ np.diag(1 / al) @ X
        rowcov = np.linalg.inv(prec)
        return scipy.stats.matrix_normal(mean=np.zeros((m, n)), rowcov=rowcov, colcov=c).logpdf(Y)

    h = 1e-6
    fd = np.array([(logp(alpha + h * e) - logp(alpha - h * e)) / (2 * h) for e in np.eye(d)])
    np.testing.assert_allclose(fd, 0.5 * (m / alpha - trace - quad), rtol=1e-6)

    stats = suff_stats(jnp.asarray(X), jnp.asarray(Y))
    gamma = jnp.asarray(1 / alpha)
    post = posterior(gamma, stats.gram, stats.cross)
    em = alpha_step(post, jnp.asarray(prec), gamma, "em")
    mackay = alpha_step(post, jnp.asarray(prec), gamma, "mackay")
    np.testing.assert_allclose(1 / np.asarray(em), m / (quad + trace), rtol=1e-10)
    np.testing.assert_allclose(1 / np.asarray(mackay), (m - alpha * trace) / quad, rtol=1e-10)
