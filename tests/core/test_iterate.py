"""The shared iteration driver against plain Python loops, and its stopping conventions."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.iterate import below, iterate, relative_change


def _newton_sqrt2(max_iter, tol):
    def step(k, x):
        x = x - (x * x - 2.0) / (2.0 * x)
        return x, jnp.abs(x * x - 2.0)

    x0 = jnp.asarray(3.0)
    return iterate(step, x0, jnp.abs(x0 * x0 - 2.0), max_iter=max_iter, stop=below(tol))


def _python_newton(max_iter, tol):
    x, trace = 3.0, [abs(9.0 - 2.0)]
    while len(trace) - 1 < max_iter and not trace[-1] < tol:
        x = x - (x * x - 2.0) / (2.0 * x)
        trace.append(abs(x * x - 2.0))
    return x, trace


@pytest.mark.parametrize("max_iter, tol", [(50, 1e-5), (2, 1e-5)])
def test_below_matches_a_python_loop(max_iter, tol):
    out = jax.jit(lambda: _newton_sqrt2(max_iter, tol))()
    x, trace = _python_newton(max_iter, tol)
    n = len(trace) - 1
    assert int(out.n_iter) == n
    np.testing.assert_allclose(np.asarray(out.trace[: n + 1]), trace, rtol=1e-5, atol=1e-6)
    assert np.all(np.isnan(np.asarray(out.trace[n + 1 :])))
    assert out.trace.shape == (max_iter + 1,)
    assert bool(out.converged) == (trace[-1] < tol)
    assert bool(out.hit_max_iter) == (not trace[-1] < tol)
    assert float(out.state) == pytest.approx(x, rel=1e-6)
    assert float(out.last) == pytest.approx(trace[-1], rel=1e-5, abs=1e-7)


def test_converged_start_takes_zero_iterations():
    out = iterate(
        lambda k, s: (s + 1, jnp.asarray(0.0)), 0, jnp.asarray(1e-9), max_iter=5, stop=below(1e-6)
    )
    assert int(out.n_iter) == 0 and bool(out.converged) and int(out.state) == 0


def test_relative_change_needs_two_values():
    # v_k = 1 + 2^-k: |v_k - v_{k-1}| = 2^-k <= tol |v_{k-1}| first at k = 11 for tol = 1e-3.
    out = iterate(
        lambda k, s: (s + 1, 1.0 + 2.0 ** -(s + 1.0)),
        jnp.asarray(0.0),
        jnp.asarray(2.0),
        max_iter=100,
        stop=relative_change(1e-3),
    )
    expected = next(k for k in range(1, 100) if 2.0**-k <= 1e-3 * (1 + 2.0 ** -(k - 1)))
    assert int(out.n_iter) == expected and bool(out.converged)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_value_stops_and_is_never_converged(bad):
    # A rule that a NaN/inf would pass (or that any value passes) must still not report convergence.
    out = iterate(
        lambda k, s: (s + 1, jnp.where(s >= 2, bad, 1.0)),
        jnp.asarray(0),
        jnp.asarray(1.0),
        max_iter=10,
        stop=lambda prev, cur: (cur < 0.5) | (cur > 1e300) | jnp.isnan(cur),
    )
    assert int(out.n_iter) == 3
    assert not bool(out.converged)
    assert not bool(out.hit_max_iter)


def test_non_finite_start_runs_no_iteration():
    out = iterate(lambda k, s: (s + 1, 0.0), 0, jnp.asarray(jnp.nan), max_iter=4, stop=below(1.0))
    assert int(out.n_iter) == 0 and not bool(out.converged)


def test_step_sees_the_iteration_index():
    out = iterate(
        lambda k, s: (s + k, 1.0), jnp.asarray(0), jnp.asarray(1.0), max_iter=5, stop=below(0.0)
    )
    assert int(out.state) == 0 + 1 + 2 + 3 + 4
