"""The dual's closed forms (Wang & Qiu, ICML 2025, Eqs. 3-4) against JAX autodiff."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.ot.dual import dual_hessian, dual_value, dual_value_grad, gauge, plan, split


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
    np.testing.assert_allclose(g, jax.grad(dual_value)(x, cost, a, b, eps), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        dual_hessian(T, eps), jax.hessian(dual_value)(x, cost, a, b, eps), rtol=1e-12, atol=1e-12
    )


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
