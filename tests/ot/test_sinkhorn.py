"""Log-domain Sinkhorn against POT, and its warm start (initial potentials)."""

import jax
import numpy as np
import ot
import pytest

from jaxlab.ot.dual import split
from jaxlab.ot.sinkhorn import sinkhorn

N, M_, EPS, TOL = 12, 9, 0.05, 1e-11


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(1)
    x, y = rng.random((N, 2)), rng.random((M_, 2))
    cost = ((x[:, None] - y[None]) ** 2).sum(-1)
    a, b = rng.random(N) + 0.2, rng.random(M_) + 0.2
    return cost, a / a.sum(), b / b.sum()


@pytest.fixture(scope="module")
def run():
    """One compiled program for cold starts and one for warm starts, shared by the tests."""
    with jax.enable_x64(True):
        cold = jax.jit(lambda c, a, b: sinkhorn(c, a, b, EPS, tol=TOL, max_iter=5000))
        warm = jax.jit(lambda c, a, b, i: sinkhorn(c, a, b, EPS, tol=TOL, max_iter=5000, init=i))
    return cold, warm


def _plan(raw, cost):
    alpha, beta = split(raw.x, cost.shape[0])
    return np.exp((np.asarray(alpha)[:, None] + np.asarray(beta)[None] - cost) / EPS)


def test_cold_start_matches_pot(x64, problem, run):
    cost, a, b = problem
    raw = run[0](cost, a, b)
    assert bool(raw.converged) and float(raw.errors[raw.n_iter]) < TOL
    ref = ot.sinkhorn(a, b, cost, EPS, method="sinkhorn_log", stopThr=1e-14, numItermax=100_000)
    np.testing.assert_allclose(_plan(raw, cost), ref, atol=1e-9)


def test_warm_start_from_the_solution_stops_at_once_in_any_gauge(x64, problem, run):
    cost, a, b = problem
    raw = run[0](cost, a, b)
    alpha, beta = split(raw.x, N)
    for shift in (0.0, 0.3):
        again = run[1](cost, a, b, (alpha + shift, beta - shift))
        assert int(again.n_iter) == 0 and bool(again.converged)
        np.testing.assert_allclose(again.errors[0], raw.errors[raw.n_iter], rtol=1e-3)


def test_warm_start_from_a_neighbour_is_faster_and_reaches_the_same_plan(x64, problem, run):
    cost, a, b = problem
    start = split(run[0](cost, a, b).x, N)
    moved = cost + 0.02 * np.random.default_rng(2).random(cost.shape)
    cold, warm = run[0](moved, a, b), run[1](moved, a, b, start)
    assert bool(warm.converged) and int(warm.n_iter) < int(cold.n_iter)
    # the starting error is the full gradient norm at the given potentials
    assert float(warm.errors[0]) < float(cold.errors[0])
    np.testing.assert_allclose(_plan(warm, moved), _plan(cold, moved), atol=1e-10)
    assert int(warm.n_evals) == 2 * int(warm.n_iter) + 1
