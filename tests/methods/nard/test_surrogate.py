"""The surrogate methods: the bound never decreases and stays below the objective."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.nard_synthetic import make_problem
from jaxlab.methods.nard.model import objective, posterior, residual_cov, suff_stats
from jaxlab.methods.nard.sequential_surrogate import solve_sequential_surrogate
from jaxlab.methods.nard.surrogate import surrogate_init, surrogate_step


@jax.jit
def _objective(gamma, precision, stats, lam):
    post = posterior(gamma, stats.gram, stats.cross)
    cov = residual_cov(post.sigma, stats.cross, stats.yy, stats.n)
    return objective(post.logdet_c, cov, precision, lam, stats.n)


def _true_objective(gamma, precision, stats, lam):
    return float(_objective(gamma, precision, stats, lam))


def test_surrogate_is_a_lower_bound_that_never_decreases(x64):
    pr = make_problem(40, m=5, n=30, p=4, seed=0)
    X, Y, lam = jnp.asarray(pr.X), jnp.asarray(pr.Y), jnp.asarray(0.05)
    stats = suff_stats(X, Y)
    state = surrogate_init(X, Y, stats, lam, jnp.ones(40), max_iter=60)
    step = jax.jit(lambda s: surrogate_step(s, X, Y, stats, lam, tol=0.0))
    values = [float(state.value)]
    for _ in range(60):
        state = step(state)
        values.append(float(state.value))
        assert values[-1] <= _true_objective(state.gamma, state.precision, stats, lam) + 1e-8
    assert np.all(np.diff(values) >= -1e-9 * np.abs(values[:-1]))
    assert values[-1] > values[0] + 10
    # At a fixed point the anchor is the exact posterior mean for the final α.
    np.testing.assert_allclose(
        np.asarray(state.w),
        np.asarray(posterior(state.gamma, stats.gram, stats.cross).mean),
        atol=1e-3,
    )


def test_sequential_surrogate_never_decreases_and_bounds(x64):
    pr = make_problem(40, m=5, n=30, p=4, seed=2)
    stats = suff_stats(jnp.asarray(pr.X), jnp.asarray(pr.Y))
    lam = jnp.asarray(0.05)
    out = solve_sequential_surrogate(stats, lam, max_iter=300, max_active=20, tol=1e-10)
    trace = np.asarray(out.objective)[: int(out.n_iter) + 1]
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))
    assert trace[-1] <= _true_objective(out.gamma, out.precision, stats, lam) + 1e-8
