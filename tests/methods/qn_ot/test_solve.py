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
    # converged is honest: exactly when the last recorded (finite) error is below tol
    assert bool(out.converged) == bool(out.errors[out.n_iter] < 1e-10)


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
    rho = np.asarray(out.densities[: int(out.n_iter)])
    assert np.all((rho >= 0.2 / 100 - 1e-15) & (rho <= 0.2 + 1e-15))
    # reversing the columns moves the gauge column; the plan must follow the permutation
    rev = solve(a, b[::-1], cost[:, ::-1], epsilon=EPS, tol=1e-10, density_max=0.2)
    np.testing.assert_allclose(rev.matrix[:, ::-1], out.matrix, atol=1e-9)


def test_max_iter_is_reported(x64, problem):
    cost, a, b = problem
    out = solve(a, b, cost, epsilon=EPS, method="sinkhorn", max_iter=3)
    assert not bool(out.converged) and bool(out.hit_max_iter) and int(out.n_iter) == 3
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


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilon="0.05"), r"epsilon must be a positive number, got '0.05' \(str\)"),
        (dict(epsilon=True), "epsilon must be a positive number"),
        (dict(epsilon=EPS, tol="1e-8"), "tol must be a positive number"),
        (dict(epsilon=EPS, max_iter=True), "max_iter must be a positive integer"),
        (dict(epsilon=EPS, density_maxx=0.1), "unknown option 'density_maxx' for method splr; "),
        (dict(epsilon=EPS, method="sinkhorn", density_max=0.1), "for method sinkhorn; valid"),
        (dict(epsilon=EPS, method="sparse_newton", low_rank=True), "unknown option 'low_rank'"),
        (dict(epsilon=EPS, linear_solver="qr"), "unknown linear_solver 'qr'; choose one of"),
    ],
)
def test_bad_settings_raise_one_line_config_errors(problem, kwargs, match):
    cost, a, b = problem
    with pytest.raises(ConfigError, match=match) as err:
        solve(a, b, cost, **kwargs)
    assert "\n" not in str(err.value)


def test_unknown_option_names_the_valid_ones(problem):
    cost, a, b = problem
    with pytest.raises(ConfigError) as err:
        solve(a, b, cost, epsilon=EPS, method="lbfgs", memroy=5)
    assert str(err.value).endswith("valid options: memory")


def test_float64_without_x64_and_the_mode_is_restored(problem):
    # x64 is off here: the solve runs in float64 for the call and reaches a tol float32 cannot.
    cost, a, b = problem
    assert not jax.config.jax_enable_x64
    out = solve(a, b, cost, epsilon=EPS, tol=1e-10)
    assert not jax.config.jax_enable_x64
    assert out.matrix.dtype == np.float64 and out.errors.dtype == np.float64
    assert bool(out.converged) and float(out.error) < 1e-10
    ref = regot.sinkhorn_splr(np.asfortranarray(cost), a, b, EPS, tol=1e-10, max_iter=1000)
    np.testing.assert_allclose(np.asarray(out.matrix), ref.plan, atol=1e-7)
    with jax.enable_x64(True):
        same = solve(a, b, cost, epsilon=EPS, tol=1e-10)
    np.testing.assert_array_equal(np.asarray(same.errors), np.asarray(out.errors))


def test_under_jit_without_x64_a_float32_tol_runs_and_a_float64_one_is_refused(problem):
    cost, a, b = problem
    assert not jax.config.jax_enable_x64

    def run(tol):
        return jax.jit(lambda a, b, c: solve(a, b, c, epsilon=EPS, tol=tol))(a, b, cost)

    with pytest.raises(ConfigError, match=r"x64 off runs in float32, where tol=1e-08 is out"):
        run(1e-8)
    out = run(1e-4)
    assert out.matrix.dtype == jnp.float32 and bool(out.converged)


@pytest.mark.parametrize("method", [m.value for m in Method])
def test_non_finite_cost_under_jit_is_never_converged(x64, problem, method):
    # Under jit the input checks cannot see the values; the solver must not claim convergence.
    cost, a, b = problem
    run = jax.jit(lambda c: solve(a, b, c, epsilon=EPS, method=method, max_iter=20))
    for bad in (np.nan, -np.inf):
        out = run(np.where(np.arange(N)[:, None] + np.arange(M_)[None] == 5, bad, cost))
        assert not bool(out.converged) and not bool(out.hit_max_iter)
        assert not np.isfinite(float(out.error))


def test_warm_start_from_the_solution_and_from_a_neighbour(x64, problem):
    cost, a, b = problem
    cold = solve(a, b, cost, epsilon=EPS, tol=1e-10)
    again = solve(a, b, cost, epsilon=EPS, tol=1e-10, init=cold.potentials)
    assert int(again.n_iter) == 0 and bool(again.converged)
    # a neighbouring problem (the cost moved by 1%) starts close to its solution
    moved = cost * 1.01
    cold_moved = solve(a, b, moved, epsilon=EPS, method="sinkhorn", tol=1e-10)
    warm_moved = solve(a, b, moved, epsilon=EPS, method="sinkhorn", tol=1e-10, init=cold.potentials)
    assert bool(warm_moved.converged) and int(warm_moved.n_iter) < int(cold_moved.n_iter)
    np.testing.assert_allclose(warm_moved.matrix, cold_moved.matrix, atol=1e-9)
