"""Moré–Thuente search: strong-Wolfe steps, and never an increase of the objective."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.ot.dual import dual_value_grad
from jaxlab.ot.line_search import more_thuente


def test_strong_wolfe_on_a_quartic(x64):
    def fun(x):
        f = jnp.sum(x**4) + jnp.sum((x - 1.0) ** 2)
        return f, jax.grad(lambda z: jnp.sum(z**4) + jnp.sum((z - 1.0) ** 2))(x), None

    x = jnp.array([3.0, -2.0, 0.5])
    f0, g0, _ = fun(x)
    d = -g0
    search = jax.jit(lambda step0: more_thuente(fun, x, d, f0, g0, None, step0))
    for step0 in [1e-4, 1e-2, 1.0, 10.0]:
        ls = search(step0)
        f, g, _ = fun(x + ls.step * d)
        assert bool(ls.wolfe)
        assert f <= f0 + 1e-4 * ls.step * (g0 @ d)
        assert abs(g @ d) <= 0.9 * abs(g0 @ d)
        np.testing.assert_allclose(ls.value, f, rtol=1e-12)


@pytest.mark.parametrize("seed", range(2))
def test_dual_objective_never_increases(x64, seed):
    rng = np.random.default_rng(seed)
    n, m, eps = 10, 8, 0.01
    cost = jnp.asarray(rng.random((n, m)))
    a = jnp.full(n, 1.0 / n)
    b = jnp.full(m, 1.0 / m)

    def fun(x):
        return dual_value_grad(x, cost, a, b, eps)

    x = jnp.asarray(rng.normal(size=n + m - 1) * 0.01)
    f0, g0, T0 = fun(x)
    search = jax.jit(lambda *args: more_thuente(fun, *args, 1.0))
    for _ in range(5):
        d = -g0 * jnp.asarray(rng.uniform(0.1, 10.0, size=g0.shape))  # a descent direction
        ls = search(x, d, f0, g0, T0)
        assert ls.value <= f0
        x = x + ls.step * d
        f0, g0, T0 = fun(x)
        np.testing.assert_allclose(f0, ls.value, rtol=1e-12)


@pytest.mark.parametrize("max_evals", [1, 2, 30])
def test_returned_aux_belongs_to_the_returned_step(x64, max_evals):
    """The aux (here the trial point itself) is that of the returned step, also when the budget
    runs out and the search falls back to the best step seen (the aux is then evaluated again)."""

    def fun(z):
        return 0.5 * z @ z, z, z

    x, d = jnp.array([-1.0, 2.0]), jnp.array([1.0, -2.0])
    f0, g0, aux0 = fun(x)
    search = jax.jit(lambda s0: more_thuente(fun, x, d, f0, g0, aux0, s0, max_evals=max_evals))
    for step0 in [1e-3, 1e-2, 3.0]:
        ls = search(step0)
        np.testing.assert_allclose(ls.aux, x + ls.step * d, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(ls.value, fun(x + ls.step * d)[0], rtol=1e-12)
