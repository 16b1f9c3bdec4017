"""``solve``: SPLR and baselines agree with each other, regot, ott-jax and POT; inputs checked."""

import jax
import jax.numpy as jnp
import numpy as np
import ot
import pytest
import regot
from ott.geometry.geometry import Geometry

from jaxlab.core.errors import ConfigError
from jaxlab.methods.qn_ot import Method, solve

N, M_, EPS = 24, 20, 0.05


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    x, y = rng.random((N, 2)), rng.random((M_, 2))
    cost = ((x[:, None] - y[None]) ** 2).sum(-1)
    a = rng.random(N) + 0.2
    b = rng.random(M_) + 0.2
    return cost, a / a.sum(), b / b.sum()


@pytest.fixture(scope="module")
def sinkhorn_reference(problem):
    cost, a, b = problem
    with jax.enable_x64(True):
        out = solve(a, b, cost, epsilon=EPS, method="sinkhorn", tol=1e-13, max_iter=20_000)
        assert bool(out.converged)
        return np.asarray(out.matrix)


@pytest.mark.parametrize("method", [m.value for m in Method])
def test_every_method_reaches_tol_and_the_long_sinkhorn_plan(
    x64, problem, sinkhorn_reference, method
):
    cost, a, b = problem
    # Without the low-rank term a 1% Hessian stalls (the paper's ablation); give it 30%.
    options = {"density_max": 0.3} if method == "sparse_newton" else {}
    out = solve(a, b, cost, epsilon=EPS, method=method, tol=1e-10, **options)
    assert bool(out.converged) and not bool(out.hit_max_iter)
    assert float(out.error) < 1e-10 and out.errors[0] > out.error
    assert out.matrix.dtype == jnp.float64 and out.seconds > 0
    np.testing.assert_allclose(out.matrix, sinkhorn_reference, atol=1e-7)
    assert out.potentials[1][-1] == 0  # gauge β_m = 0


def test_splr_matches_pot_regot_and_ott(x64, problem):
    cost, a, b = problem
    out = solve(a, b, cost, epsilon=EPS, tol=1e-10)
    pot_plan = ot.sinkhorn(a, b, cost, EPS, method="sinkhorn_log", stopThr=1e-13, numItermax=50_000)
    np.testing.assert_allclose(out.matrix, pot_plan, atol=1e-7)
    ref = regot.sinkhorn_splr(np.asfortranarray(cost), a, b, EPS, tol=1e-10, max_iter=1000)
    np.testing.assert_allclose(out.matrix, ref.plan, atol=1e-7)
    # an ott-jax Geometry is accepted, with its epsilon
    geom = Geometry(cost_matrix=jnp.asarray(cost), epsilon=EPS)
    out_geom = solve(a, b, geom, tol=1e-10)
    np.testing.assert_allclose(out_geom.matrix, out.matrix, atol=1e-12)


def test_splr_densities_in_bounds_and_gauge_invariance(x64, problem):
    cost, a, b = problem
    out = solve(a, b, cost, epsilon=EPS, tol=1e-10, density_max=0.2)
    rho = np.asarray(out.densities[: int(out.n_iters)])
    assert np.all((rho >= 0.2 / 100 - 1e-15) & (rho <= 0.2 + 1e-15))
    # reversing the columns moves the gauge column; the plan must follow the permutation
    rev = solve(a, b[::-1], cost[:, ::-1], epsilon=EPS, tol=1e-10, density_max=0.2)
    np.testing.assert_allclose(rev.matrix[:, ::-1], out.matrix, atol=1e-9)


def test_max_iter_is_reported(x64, problem):
    cost, a, b = problem
    out = solve(a, b, cost, epsilon=EPS, method="sinkhorn", max_iter=3)
    assert not bool(out.converged) and bool(out.hit_max_iter) and int(out.n_iters) == 3
    assert np.isfinite(out.errors[3]) and np.all(np.isnan(out.errors[4:]))


def test_jit_end_to_end(x64, problem):
    cost, a, b = problem
    jitted = jax.jit(lambda a, b, c: solve(a, b, c, epsilon=EPS, tol=1e-10).matrix)
    np.testing.assert_allclose(
        jitted(a, b, cost), solve(a, b, cost, epsilon=EPS, tol=1e-10).matrix, atol=1e-12
    )


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda a, b, c: (-a, b, c), "negative"),
        (lambda a, b, c: (a * 2, b, c), "different mass"),
        (lambda a, b, c: (np.where(np.arange(N) == 3, np.nan, a), b, c), "NaN"),
        (lambda a, b, c: (a, np.where(np.arange(M_) == 0, 0.0, b), c), "zero entries"),
        (lambda a, b, c: (a[:-1], b, c), "do not fit"),
        (lambda a, b, c: (a, b, np.where(c > 0.5, np.inf, c)), "NaN or inf"),
    ],
)
def test_invalid_inputs_raise_config_error(problem, change, match):
    a, b, cost = change(problem[1], problem[2], problem[0])
    with pytest.raises(ConfigError, match=match):
        solve(a, b, cost, epsilon=EPS)


def test_invalid_settings_raise_config_error(problem):
    cost, a, b = problem
    with pytest.raises(ConfigError, match="unknown OT method"):
        solve(a, b, cost, epsilon=EPS, method="newton_raphson")
    with pytest.raises(ConfigError, match="epsilon"):
        solve(a, b, cost, epsilon=-1.0)
    with pytest.raises(ConfigError, match="epsilon is required"):
        solve(a, b, cost)
    with pytest.raises(ConfigError, match="max_iter"):
        solve(a, b, cost, epsilon=EPS, max_iter=0)
