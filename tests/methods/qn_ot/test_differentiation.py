"""Differentiating the OT value through the solver (envelope theorem) vs finite differences."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.methods.qn_ot import entropic_ot_value


def test_gradient_in_cost_matches_finite_differences(x64):
    rng = np.random.default_rng(0)
    n, m, eps = 8, 6, 0.1
    cost = jnp.asarray(rng.random((n, m)))
    a, b = jnp.full(n, 1.0 / n), jnp.full(m, 1.0 / m)
    grad = jax.grad(entropic_ot_value, argnums=2)(a, b, cost, eps)
    direction = jnp.asarray(rng.normal(size=(n, m)))
    h = 1e-5
    fd = (
        entropic_ot_value(a, b, cost + h * direction, eps)
        - entropic_ot_value(a, b, cost - h * direction, eps)
    ) / (2 * h)
    np.testing.assert_allclose(jnp.sum(grad * direction), fd, rtol=1e-6)
    # a mass-preserving change of a
    da = jnp.asarray(rng.normal(size=n))
    da = da - da.mean()
    ga = jax.grad(entropic_ot_value, argnums=0)(a, b, cost, eps)
    fd_a = (
        entropic_ot_value(a + h * da, b, cost, eps) - entropic_ot_value(a - h * da, b, cost, eps)
    ) / (2 * h)
    np.testing.assert_allclose(ga @ da, fd_a, rtol=1e-6)
