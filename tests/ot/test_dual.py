"""The dual's closed forms (Wang & Qiu, ICML 2025, Eqs. 3-4) against JAX autodiff."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.ot.dual import (
    dual_hessian,
    dual_value,
    dual_value_grad,
    dual_value_grad_rescaled,
    gauge,
    plan,
    split,
)


def _problem(seed, n=7, m=5, eps=0.3):
    rng = np.random.default_rng(seed)
    cost = jnp.asarray(rng.random((n, m)))
    a = jnp.asarray(rng.random(n) + 0.1)
    b = jnp.asarray(rng.random(m) + 0.1)
    a, b = a / a.sum(), b / b.sum()
    x = jnp.asarray(rng.normal(size=n + m - 1) * 0.1)
    return cost, a, b, eps, x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradient_and_hessian_match_autodiff(x64, seed):
    cost, a, b, eps, x = _problem(seed)
    _, g, T = dual_value_grad(x, cost, a, b, eps)
    want_g = jax.jit(jax.grad(dual_value))(x, cost, a, b, eps)
    np.testing.assert_allclose(g, want_g, rtol=1e-12, atol=1e-14)
    want_h = jax.jit(jax.hessian(dual_value))(x, cost, a, b, eps)
    np.testing.assert_allclose(dual_hessian(T, eps), want_h, rtol=1e-12, atol=1e-12)


def test_plan_is_invariant_to_the_gauge(x64):
    cost, _, _, eps, x = _problem(3)
    alpha, beta = split(x, cost.shape[0])
    shifted = plan(alpha + 0.7, beta - 0.7, cost, eps)
    np.testing.assert_allclose(shifted, plan(alpha, beta, cost, eps), rtol=1e-12)
    alpha_g, beta_g = gauge(alpha + 0.7, beta - 0.7)
    assert beta_g[-1] == 0
    np.testing.assert_allclose(alpha_g, alpha, atol=1e-12)


def test_gradient_is_the_marginal_residual(x64):
    cost, a, b, eps, x = _problem(4)
    _, g, T = dual_value_grad(x, cost, a, b, eps)
    np.testing.assert_allclose(g[:7], T.sum(1) - a, atol=1e-14)
    np.testing.assert_allclose(g[7:], T.sum(0)[:-1] - b[:-1], atol=1e-14)


def test_value_gradient_hessian_and_start_against_the_papers_equations_in_numpy(x64):
    """Eqs. 3-4 of Wang & Qiu (ICML 2025) written out in float64 numpy with β_m = 0:
    f = η Σ_ij exp((α_i + β_j − M_ij)/η) − aᵀα − bᵀβ, ∇f = (T1 − a, T̃ᵀ1 − b̃) and
    ∇²f = (1/η)[[diag T1, T̃], [T̃ᵀ, diag T̃ᵀ1]] by explicit loops; the start point (α = 0, then
    the exact β) must give T's column sums b."""
    from jaxlab.ot.dual import initial_point

    cost, a, b, eps, x = (np.asarray(v) if not isinstance(v, float) else v for v in _problem(5))
    n, m = cost.shape
    alpha, beta = x[:n], np.append(x[n:], 0.0)
    T = np.array([[np.exp((alpha[i] + beta[j] - cost[i, j]) / eps) for j in range(m)]
                  for i in range(n)])  # fmt: skip
    f = eps * T.sum() - a @ alpha - b @ beta
    g = np.concatenate([T.sum(1) - a, T.sum(0)[:-1] - b[:-1]])
    H = np.zeros((n + m - 1, n + m - 1))
    for i in range(n):
        H[i, i] = T[i].sum() / eps
        for j in range(m - 1):
            H[i, n + j] = H[n + j, i] = T[i, j] / eps
    for j in range(m - 1):
        H[n + j, n + j] = T[:, j].sum() / eps
    got_f, got_g, got_T = dual_value_grad(*map(jnp.asarray, (x, cost, a, b)), eps)
    np.testing.assert_allclose(got_T, T, rtol=1e-13)
    np.testing.assert_allclose(got_f, f, rtol=1e-13)
    np.testing.assert_allclose(got_g, g, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dual_hessian(got_T, eps), H, rtol=1e-13)
    x0 = np.asarray(initial_point(*map(jnp.asarray, (cost, a, b)), eps))
    alpha0, beta0 = x0[:n], np.append(x0[n:], 0.0)
    T0 = np.exp((alpha0[:, None] + beta0[None] - cost) / eps)
    np.testing.assert_allclose(T0.sum(0), b, rtol=1e-12)
    np.testing.assert_allclose(alpha0, alpha0[0])  # α = 0 moved by one gauge constant


@pytest.mark.parametrize("step", [0.0, 0.37, 1.0, 2.5])
def test_rescaled_evaluation_is_eq3_at_the_moved_point(x64, step):
    # The plan at x + t d from the plan at x (a rank-one rescaling): f, ∇f and T against Eq. 3
    # written in numpy at the moved point, η = 1e-2 so that the exponents move by up to ~25.
    cost, a, b, _, x = (np.asarray(v) if not isinstance(v, float) else v for v in _problem(6))
    eps = 1e-2
    n, m = cost.shape
    d = np.random.default_rng(7).normal(size=n + m - 1) * 0.1
    y = x + step * d
    alpha, beta = y[:n], np.append(y[n:], 0.0)
    T = np.exp((alpha[:, None] + beta[None, :] - cost) / eps)
    f = eps * T.sum() - a @ alpha - b @ beta
    g = np.concatenate([T.sum(1) - a, T.sum(0)[:-1] - b[:-1]])
    _, _, T_x = dual_value_grad(*map(jnp.asarray, (x, cost, a, b)), eps)
    got_f, got_g, got_T = dual_value_grad_rescaled(
        jnp.asarray(x), jnp.asarray(d), step, T_x, jnp.asarray(a), jnp.asarray(b), eps
    )
    np.testing.assert_allclose(got_T, T, rtol=1e-12)
    np.testing.assert_allclose(got_f, f, rtol=1e-12)
    np.testing.assert_allclose(got_g, g, rtol=1e-11, atol=1e-14)
