"""The OT value from optimal potentials: primal = dual in each convention; envelope gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import ot
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.ot.differentiation import value_from_potentials
from jaxlab.ot.dual import split
from jaxlab.ot.sinkhorn import sinkhorn

N, M_, EPS = 8, 6, 0.1


def _value(a, b, cost):
    raw = sinkhorn(cost, a, b, EPS, tol=1e-13, max_iter=10_000)
    return value_from_potentials(a, b, cost, EPS, split(raw.x, cost.shape[0]))


def test_value_equals_the_primal_objective_of_pots_plan(x64):
    rng = np.random.default_rng(0)
    cost = rng.random((N, M_))
    a, b = np.full(N, 1 / N), np.full(M_, 1 / M_)
    T = ot.sinkhorn(a, b, cost, EPS, method="sinkhorn_log", stopThr=1e-14, numItermax=100_000)
    primal = np.sum(T * cost) + EPS * np.sum(T * (np.log(T) - 1))  # <T, M> - η h(T)
    np.testing.assert_allclose(jax.jit(_value)(a, b, cost), primal, rtol=1e-10)


def test_ott_conventions_are_the_primal_objectives_they_name(x64):
    # ott-jax's ent_reg_cost = <T, M> - ε H(T) with H(T) = -Σ T log T, and its reg_ot_cost =
    # <T, M> + ε KL(T‖abᵀ) (generalised KL), here from POT's plan, independent of jaxlab.
    rng = np.random.default_rng(2)
    cost = rng.random((N, M_))
    a, b = rng.random(N) + 0.1, rng.random(M_) + 0.1
    a, b = a / a.sum(), b / b.sum()
    T = ot.sinkhorn(a, b, cost, EPS, method="sinkhorn_log", stopThr=1e-14, numItermax=100_000)
    transport = np.sum(T * cost)
    expected = {
        "ent_reg_cost": transport + EPS * np.sum(T * np.log(T)),
        "reg_ot_cost": transport
        + EPS * (np.sum(T * np.log(T / np.outer(a, b))) - T.sum() + a.sum() * b.sum()),
    }
    raw = sinkhorn(cost, a, b, EPS, tol=1e-13, max_iter=10_000)
    for convention, value in expected.items():
        got = value_from_potentials(a, b, cost, EPS, split(raw.x, N), convention)
        np.testing.assert_allclose(got, value, rtol=1e-10)
    with pytest.raises(ConfigError, match="convention must be one of 'paper', 'ent_reg_cost'"):
        value_from_potentials(a, b, cost, EPS, split(raw.x, N), "ott")


def test_gradients_match_finite_differences(x64):
    rng = np.random.default_rng(1)
    cost = jnp.asarray(rng.random((N, M_)))
    a, b = jnp.full(N, 1 / N), jnp.full(M_, 1 / M_)
    value = jax.jit(_value)
    grad_cost, grad_a = jax.jit(jax.grad(_value, argnums=(2, 0)))(a, b, cost)
    h = 1e-5
    direction = jnp.asarray(rng.normal(size=(N, M_)))
    fd = (value(a, b, cost + h * direction) - value(a, b, cost - h * direction)) / (2 * h)
    np.testing.assert_allclose(jnp.sum(grad_cost * direction), fd, rtol=1e-6)
    da = jnp.asarray(rng.normal(size=N))
    da = da - da.mean()  # masses must stay equal
    fd_a = (value(a + h * da, b, cost) - value(a - h * da, b, cost)) / (2 * h)
    np.testing.assert_allclose(grad_a @ da, fd_a, rtol=1e-6)
