"""``solve``: SPLR and baselines agree with regot, ott-jax and POT; dtypes, inputs, convergence."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import ot
import pytest
import regot
from jax.experimental import checkify
from ott.geometry.geometry import Geometry
from ott.geometry.pointcloud import PointCloud
from ott.problems.linear.linear_problem import LinearProblem
from ott.solvers.linear.sinkhorn import Sinkhorn

from jaxlab.core.errors import ConfigError
from jaxlab.methods.qn_ot import Method, solve
from jaxlab.ot.output import NotConvergedError, NotConvergedWarning

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
    out = solve(a, b, cost, epsilon=EPS, method="sinkhorn", max_iter=3, unconverged="ignore")
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


def test_the_dtype_follows_the_inputs_and_x64_stays_off(problem):
    # x64 off: float64 numpy inputs compute in float32 (as jnp.asarray gives them), the output is
    # float32 and later operations on it do not warn about truncated float64 (the case).
    cost, a, b = problem
    assert not jax.config.jax_enable_x64
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = solve(a, b, cost, epsilon=EPS)  # tol=None: float32's default
        doubled = out.matrix * 2 + jnp.asarray(cost)
    assert not jax.config.jax_enable_x64
    assert out.matrix.dtype == doubled.dtype == jnp.float32 and out.errors.dtype == jnp.float32
    assert bool(out.converged) and float(out.error) < 1e-5
    ref = regot.sinkhorn_splr(np.asfortranarray(cost), a, b, EPS, tol=1e-10, max_iter=1000)
    np.testing.assert_allclose(np.asarray(out.matrix), ref.plan, atol=5e-5)  # to tol 1e-5
    with jax.enable_x64(True):
        f32 = [np.asarray(x, np.float32) for x in problem]
        assert solve(f32[1], f32[2], f32[0], epsilon=EPS).matrix.dtype == jnp.float32
        out64 = solve(a, b, cost, epsilon=EPS)
        assert out64.matrix.dtype == jnp.float64 and float(out64.error) < 1e-8  # the paper's tol


def test_a_tolerance_float32_cannot_reach_is_refused_eagerly_and_under_jit(problem):
    cost, a, b = problem
    assert not jax.config.jax_enable_x64
    for call in (
        lambda: solve(a, b, cost, epsilon=EPS, tol=1e-9),
        lambda: jax.jit(lambda a, b, c: solve(a, b, c, epsilon=EPS, tol=1e-8))(a, b, cost),
    ):
        with pytest.raises(ConfigError, match=r"tol=1e-0\d is below what float32 resolves") as e:
            call()
        assert "JAX_ENABLE_X64=1" in str(e.value) and "\n" not in str(e.value)
    out = jax.jit(lambda a, b, c: solve(a, b, c, epsilon=EPS, tol=1e-4))(a, b, cost)
    assert out.matrix.dtype == jnp.float32 and bool(out.converged)


def test_a_linear_problem_and_a_point_cloud_are_accepted(x64, problem):
    # The README promised a LinearProblem; solve(a, b, problem) said "epsilon is required".
    cost, a, b = problem
    rng = np.random.default_rng(0)
    x, y = rng.random((N, 2)), rng.random((M_, 2))
    geom = PointCloud(jnp.asarray(x), jnp.asarray(y), epsilon=EPS)
    ref = Sinkhorn(threshold=1e-13, max_iterations=100_000)(LinearProblem(geom, a, b))
    from_problem = solve(None, None, LinearProblem(geom, a, b), tol=1e-11)
    from_cloud = solve(a, b, geom, tol=1e-11)
    np.testing.assert_allclose(from_problem.matrix, ref.matrix, atol=1e-9)
    np.testing.assert_allclose(from_cloud.matrix, ref.matrix, atol=1e-9)
    with pytest.raises(ConfigError, match="carries its marginals"):
        solve(a, b, LinearProblem(geom, a, b))


@pytest.fixture
def tiny_eps_problem():
    cost = np.random.default_rng(3).random((6, 5))
    return np.full(6, 1 / 6), np.full(5, 1 / 5), cost


def test_an_unconverged_solve_warns_and_can_raise_or_stay_silent(tiny_eps_problem):
    # The case: ε = 1e-8 returned converged=False with a plan that looked valid.
    a, b, cost = tiny_eps_problem
    kw = dict(epsilon=1e-8, max_iter=20)
    with pytest.warns(NotConvergedWarning, match=r"solve\(method='splr'\) did not converge") as w:
        out = solve(a, b, cost, **kw)
    assert not bool(out.converged) and len(w) == 1 and w[0].filename == __file__
    assert "after 20 iterations" in str(w[0].message)
    with pytest.raises(NotConvergedError, match="raise max_iter, loosen tol, or increase eps"):
        solve(a, b, cost, unconverged="raise", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not bool(solve(a, b, cost, unconverged="ignore", **kw).converged)
        # under jit the flag is traced: no warning, converged says it
        jitted = jax.jit(lambda c: solve(a, b, c, **kw))(cost)
        assert not bool(jitted.converged)
    with pytest.raises(ConfigError, match="unconverged must be one of"):
        solve(a, b, cost, unconverged="loud", **kw)


def test_raise_under_jit_is_a_checkify_check(tiny_eps_problem):
    a, b, cost = tiny_eps_problem

    def run(c, eps):
        return solve(a, b, c, epsilon=eps, max_iter=20, unconverged="raise").matrix

    checked = jax.jit(checkify.checkify(run))
    err, _ = checked(cost, 1e-8)
    with pytest.raises(checkify.JaxRuntimeError, match="did not converge"):
        err.throw()
    err, _ = checked(cost, 1.0)
    err.throw()  # converged: no error


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


def _authors_ssns_trace(cost, a, b, eps, iters):
    """‖g‖ after each iteration of the authors' ``sinkhorn_ssns_internal`` (yixuan/regot-python,
    ``src/sinkhorn_ssns.cpp``; Tang & Qiu, NeurIPS 2024, Alg. 1), ported to float64 numpy with
    dense solves: δ = ν₀‖g‖, shift μ‖g‖, steps {1, ½, ¼, 1/10} (first decrease, else the best),
    ratio r against the unshifted H_δ, move if r > 0, μ ×4 if r < ¼, max(μ/2, κ) if r > ¾."""
    from tests.methods.qn_ot.test_sparse_hessian import _authors_sparsify_mat3

    n, m = cost.shape
    nu0, kappa, mu = 0.01, 1e-3, 1.0

    def obj(x):
        alpha, beta = x[:n], np.append(x[n:], 0.0)
        T = np.exp((alpha[:, None] + beta[None] - cost) / eps)
        return eps * T.sum() - a @ alpha - b @ beta, T

    def grad(T):
        return np.concatenate([T.sum(1) - a, T.sum(0)[:-1] - b[:-1]])

    def hess(T, delta):
        keep, _ = _authors_sparsify_mat3(T, delta)
        S = np.where(keep, T[:, :-1], 0.0)
        return np.block([[np.diag(T.sum(1)), S], [S.T, np.diag(T[:, :-1].sum(0))]]) / eps

    z = -cost / eps  # α = 0, the optimal β, then the gauge β_m = 0
    beta = eps * (np.log(b) - (z.max(0) + np.log(np.exp(z - z.max(0)).sum(0))))
    x = np.concatenate([np.zeros(n) + beta[-1], beta[:-1] - beta[-1]])
    f, T = obj(x)
    g = grad(T)
    H = hess(T, nu0 * np.linalg.norm(g))
    trace = [np.linalg.norm(g)]
    for _ in range(iters):
        gnorm = np.linalg.norm(g)
        d = np.linalg.solve(H + mu * gnorm * np.eye(len(g)), -g)
        best, new_f = 1.0, np.inf
        for t in (1.0, 0.5, 0.25, 0.1):
            ft = obj(x + t * d)[0]
            if ft < new_f:
                best, new_f = t, ft
            if new_f < f:
                break
        step = best * d
        r = (f - new_f) / (-g @ step - 0.5 * step @ H @ step)
        if r > 0:
            x = x + step
        mu = 4 * mu if r < 0.25 else (max(0.5 * mu, kappa) if r > 0.75 else mu)
        if r > 0:
            f, T = obj(x)
            g = grad(T)
            H = hess(T, nu0 * np.linalg.norm(g))
        trace.append(np.linalg.norm(g))
    return np.array(trace)


def test_ssns_follows_the_authors_loop_step_by_step(x64, problem):
    # At η = 0.003 the ratio test meets every case: rejected steps (r < 0), r < ¼, r in (¼, ¾)
    # and r > ¾. Compared while ‖g‖ ≥ 1e-7: below, f(x) − f(x + t d) is at round-off and the two
    # accept or reject by chance (jaxlab then stalls a few iterations where the port moved on).
    # For the same reason the run's own tolerance is 1e-9: on an AMD EPYC host it stalls at
    # 1.2e-10, where the steps are all round-off (1e-10 passed on the hosts of earlier runs).
    cost, a, b = problem
    out = solve(a, b, cost, epsilon=0.003, method="ssns", tol=1e-9)
    want = _authors_ssns_trace(cost, a, b, 0.003, 30)
    k = int(np.argmax(want < 1e-7))
    assert k >= 20 and bool(out.converged)
    np.testing.assert_allclose(np.asarray(out.errors[:k]), want[:k], rtol=1e-6)


def test_ssns_shift_update_is_the_authors_rule():
    """``update_shift`` against regot's ``sinkhorn_ssns.cpp`` rule, transcribed: thresholds 1/4
    and 3/4 (strict), factors 4 and 1/2, floor κ; the ratios straddle every boundary."""
    from jaxlab.methods.qn_ot.ssns import update_shift

    def theirs(rho, mu, kappa=1e-3):
        if rho < 0.25:
            return 4.0 * mu
        if rho > 0.75:
            return max(0.5 * mu, kappa)
        return mu

    ratios = [-3.0, 0.0, 0.2, 0.249, 0.25, 0.251, 0.5, 0.7, 0.72, 0.749, 0.75, 0.751, 0.8, 5.0]
    for mu in (1.0, 1.5e-3, 1e-3):
        got = update_shift(jnp.asarray(ratios), mu, 1e-3)
        np.testing.assert_allclose(got, [theirs(r, mu) for r in ratios], rtol=1e-7, err_msg=mu)


def test_splr_line_search_rescaling_keeps_the_reported_error_honest(x64, problem, monkeypatch):
    # SPLR's line search rescales the plan at x for its trials (drift-bounded, then from the
    # cost again). The error it reports must be the marginal error of its potentials computed
    # from the cost in numpy (Eq. 3), and the solve must reach the plan of exact evaluations.
    import jaxlab.methods.qn_ot.api as api
    import jaxlab.methods.qn_ot.splr as splr_module

    cost, a, b = problem
    eps = 0.01
    monkeypatch.setattr(api, "_CACHE", {})
    out = solve(a, b, cost, epsilon=eps, tol=1e-10)
    alpha, beta = (np.asarray(p) for p in out.potentials)
    T = np.exp((alpha[:, None] + beta[None, :] - cost) / eps)
    exact_error = np.linalg.norm(np.concatenate([T.sum(1) - a, T.sum(0)[:-1] - b[:-1]]))
    assert bool(out.converged) and exact_error < 1e-10
    np.testing.assert_allclose(float(out.error), exact_error, rtol=1e-3, atol=1e-14)
    monkeypatch.setattr(splr_module, "RESCALE_MAX_DRIFT", -1.0)  # every trial from the cost
    monkeypatch.setattr(api, "_CACHE", {})
    exact = solve(a, b, cost, epsilon=eps, tol=1e-10)
    assert bool(exact.converged)
    np.testing.assert_allclose(out.matrix, exact.matrix, atol=1e-9)
