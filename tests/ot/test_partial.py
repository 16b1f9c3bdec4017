"""Partial OT (entropic Dykstra, exact dummy-point LP) vs ott-jax, POT, scipy's HiGHS on the
original partial LP, its KKT; the network simplex's result code and budget; dtypes, inputs."""

import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import ot
import pytest
from ott.geometry.geometry import Geometry
from ott.problems.linear.linear_problem import LinearProblem
from ott.solvers.linear.sinkhorn import Sinkhorn
from scipy.optimize import linprog

from jaxlab.core.errors import ConfigError
from jaxlab.ot import partial
from jaxlab.ot.output import NotConvergedError, NotConvergedWarning
from jaxlab.ot.partial import partial_ot


def _problem(n, m, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.random((n, 2)), rng.random((m, 2))
    return ((x[:, None] - y[None]) ** 2).sum(-1)


# (n, m, β (source masses 1/(β n)), mass): sub-probability sources, partial mass, unequal sizes.
CASES = [(12, 9, 0.7, 0.6), (10, 10, 1.0, 0.5), (8, 11, 0.5, 1.0)]


@pytest.mark.parametrize("n, m, beta, mass", CASES)
def test_entropic_matches_pot_and_is_feasible(x64, n, m, beta, mass):
    cost = _problem(n, m, n + m)
    a, b = np.full(n, 1 / (beta * n)), np.full(m, 1 / m)
    for eps in (0.5, 0.05):
        out = partial_ot(a, b, cost, mass=mass, epsilon=eps, tol=1e-12, max_iter=20_000)
        ref = ot.partial.entropic_partial_wasserstein(
            a, b, cost, reg=eps, m=mass, numItermax=100_000, stopThr=1e-15
        )
        assert bool(out.converged)
        np.testing.assert_allclose(out.matrix, ref, atol=1e-10)
        np.testing.assert_allclose(out.cost, np.sum(ref * cost), rtol=1e-9)
        pi = np.asarray(out.matrix)
        assert pi.min() >= 0 and np.all(pi.sum(1) <= a + 1e-12) and np.all(pi.sum(0) <= b + 1e-12)
        np.testing.assert_allclose(pi.sum(), mass, rtol=1e-12)
        assert float(out.error) < 1e-11


@pytest.mark.parametrize("n, m, beta, mass", CASES)
def test_exact_matches_pot_partial_wasserstein(x64, n, m, beta, mass):
    cost = _problem(n, m, n + m)
    a, b = np.full(n, 1 / (beta * n)), np.full(m, 1 / m)
    out = partial_ot(a, b, cost, mass=mass)
    ref = ot.partial.partial_wasserstein(a, b, cost, m=mass)
    assert bool(out.converged)
    np.testing.assert_allclose(out.cost, np.sum(ref * cost), rtol=1e-9)
    np.testing.assert_allclose(out.matrix, ref, atol=1e-9)  # generic costs: a unique optimum
    pi = np.asarray(out.matrix)
    assert pi.min() >= 0 and np.all(pi.sum(1) <= a + 1e-12) and np.all(pi.sum(0) <= b + 1e-12)
    np.testing.assert_allclose(pi.sum(), mass, rtol=1e-10)


def _partial_lp_scipy(a, b, cost, mass):
    """Chapel et al. (2020), Eq. 1, as written: min ⟨π, M⟩ over π ≥ 0 with π1 ≤ a, πᵀ1 ≤ b and
    1ᵀπ1 = m, one LP in the n·m entries of π (row-major), solved by scipy's HiGHS."""
    n, m = cost.shape
    row_sums = np.kron(np.eye(n), np.ones((1, m)))  # (n, n·m)
    col_sums = np.kron(np.ones((1, n)), np.eye(m))  # (m, n·m)
    res = linprog(
        cost.ravel(),
        A_ub=np.vstack([row_sums, col_sums]),
        b_ub=np.concatenate([a, b]),
        A_eq=np.ones((1, n * m)),
        b_eq=[mass],
        bounds=(0, None),
        method="highs",
    )
    assert res.status == 0, res.message
    return res.x.reshape(n, m), res.fun


# CASES plus a larger one with unequal totals on both sides and the full smaller total.
LP_CASES = [*CASES, (40, 30, 0.6, 0.8), (25, 35, 0.9, 1.0)]


@pytest.mark.parametrize("n, m, beta, mass", LP_CASES)
def test_exact_matches_scipy_highs_on_the_original_partial_lp(x64, n, m, beta, mass):
    # The reference never sees the dummy points: it is the partial LP itself.
    cost = _problem(n, m, 3 * n + m)
    a, b = np.full(n, 1 / (beta * n)), np.full(m, 1 / m) * (1.1 if n == 40 else 1.0)
    ref, value = _partial_lp_scipy(a, b, cost, mass)
    out = partial_ot(a, b, cost, mass=mass)
    assert bool(out.converged) and int(out.n_iter) == 1
    np.testing.assert_allclose(out.cost, value, rtol=1e-9)
    np.testing.assert_allclose(out.matrix, ref, atol=1e-9)  # generic costs: a unique optimum
    np.testing.assert_allclose(out.errors, [mass, float(out.error)])
    assert float(out.error) < 1e-12


def test_exact_float32_inputs_give_the_float64_plan_in_float32():
    # The network simplex runs in float64 on the host; the plan comes back in the inputs' dtype.
    cost = _problem(30, 20, 13)
    a, b = np.full(30, 1 / (0.7 * 30)), np.full(20, 1 / 20)
    ref, value = _partial_lp_scipy(a, b, cost, 0.6)
    f32 = [np.asarray(x, np.float32) for x in (a, b, cost)]
    assert not jax.config.jax_enable_x64
    out = partial_ot(*f32, mass=np.float32(0.6))
    assert out.matrix.dtype == out.cost.dtype == jnp.float32 and bool(out.converged)
    np.testing.assert_allclose(out.matrix, ref, atol=1e-6)
    np.testing.assert_allclose(out.cost, value, rtol=1e-5)


def _min_pivots(solve, hi: int = 100_000) -> int:
    """The smallest pivot budget with which ``solve(budget)`` converges (bisection)."""
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if solve(mid) else (mid + 1, hi)
    return lo


def test_the_network_simplex_result_code_is_the_convergence_flag(x64, monkeypatch):
    # The budget is read from pivot_budget: the solve converges from the smallest budget that
    # reaches an optimal basis on, warns (or raises) one pivot below it, and the default lies far
    # above it.
    cost = _problem(40, 30, 14)
    a, b = np.full(40, 1 / (0.8 * 40)), np.full(30, 1 / 30)

    def converged(budget):
        monkeypatch.setattr(partial, "pivot_budget", lambda n, m: budget)
        return bool(partial_ot(a, b, cost, mass=0.7, unconverged="ignore").converged)

    needed = _min_pivots(converged)
    assert 1 < needed < 100_000
    monkeypatch.setattr(partial, "pivot_budget", lambda n, m: needed - 1)
    with pytest.warns(NotConvergedWarning, match=r"partial_ot\(epsilon=None\) did not converge"):
        assert not bool(partial_ot(a, b, cost, mass=0.7).converged)
    with pytest.raises(NotConvergedError, match="pivot_budget"):
        partial_ot(a, b, cost, mass=0.7, unconverged="raise")
    monkeypatch.undo()
    assert partial.pivot_budget(40, 30) >= 100 * needed


def test_large_problems_get_a_pivot_budget_above_pots_default(x64, monkeypatch):
    # POT's default of 100,000 pivots is a constant; at n = 2,000 the budget passed to ot.emd is
    # the augmented problem's number of arcs. (A fake emd records it; the real solve is below.)
    seen = {}

    def fake_emd(a, b, M, numItermax, **kw):
        seen["numItermax"], seen["shape"] = numItermax, M.shape
        return np.zeros(M.shape), {"result_code": 1}

    monkeypatch.setattr(ot, "emd", fake_emd)
    n, m = 2000, 1500
    out = partial_ot(
        np.full(n, 1 / n), np.full(m, 1 / m), np.ones((n, m)), mass=0.5, unconverged="ignore"
    )
    jax.block_until_ready(out)  # the callback may still be running
    assert seen == {"numItermax": 2001 * 1501, "shape": (2001, 1501)}


def test_a_float64_exact_solve_runs_where_x64_is_off():
    # JAX converts a callback's inputs and outputs with the x64 setting of the thread that runs
    # it; XLA may run it on a worker thread, which a scoped jax.enable_x64 does not reach. A
    # program compiled under the scope and called from a thread without it makes that certain:
    # the float64 plan failed the call ("Incorrect output dtype") before the plan crossed as words.
    n = 20
    cost = _problem(n, n, 16)
    a, b = np.full(n, 1 / (0.7 * n)), np.full(n, 1 / n)
    with jax.enable_x64(True):
        args = [jnp.asarray(x) for x in (cost, a, b)]
        compiled = jax.jit(lambda c, a, b: partial_ot(a, b, c, mass=1 / 3)).lower(*args).compile()
    result = {}

    def call():
        try:
            result["plan"] = np.asarray(jax.block_until_ready(compiled(*args)).matrix)
        except Exception as err:  # reported by the assertion below
            result["error"] = err

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert "error" not in result, result.get("error")
    ref, _ = _partial_lp_scipy(a, b, cost, 1 / 3)
    assert result["plan"].dtype == np.float64
    np.testing.assert_allclose(result["plan"], ref, atol=1e-14)


@pytest.mark.slow
def test_exact_at_n_2000_matches_pots_partial_wasserstein(x64):
    n = 2000
    cost = _problem(n, n, 15)
    a = b = np.full(n, 1 / n)
    out = partial_ot(a, b, cost, mass=0.7)
    ref = ot.partial.partial_wasserstein(a, b, cost, m=0.7)
    assert bool(out.converged)
    np.testing.assert_allclose(out.cost, np.sum(ref * cost), rtol=1e-10)
    np.testing.assert_allclose(out.matrix, ref, atol=1e-12)


def test_full_mass_entropic_is_the_sinkhorn_plan_of_ott_jax(x64):
    cost = _problem(10, 10, 3)
    a = b = np.full(10, 0.1)
    out = partial_ot(a, b, cost, mass=1.0, epsilon=0.05, tol=1e-12, max_iter=20_000)
    solver = Sinkhorn(lse_mode=True, threshold=1e-13, max_iterations=100_000)
    ref = solver(LinearProblem(Geometry(cost_matrix=jnp.asarray(cost), epsilon=0.05), a, b))
    np.testing.assert_allclose(out.matrix, ref.matrix, atol=1e-10)


def test_full_mass_exact_is_the_emd_plan(x64):
    cost = _problem(10, 10, 4)
    a = b = np.full(10, 0.1)
    out = partial_ot(a, b, cost, mass=1.0)
    ref = ot.emd(a, b, cost)
    np.testing.assert_allclose(out.matrix, ref, atol=1e-10)
    np.testing.assert_allclose(out.cost, np.sum(ref * cost), rtol=1e-10)


def test_epsilon_to_zero_approaches_the_exact_partial_cost(x64):
    cost = _problem(12, 9, 5)
    a, b = np.full(12, 1 / (0.7 * 12)), np.full(9, 1 / 9)
    exact = float(partial_ot(a, b, cost, mass=0.6).cost)
    gaps = []
    for eps in (0.1, 0.01, 0.001):
        out = partial_ot(a, b, cost, mass=0.6, epsilon=eps, tol=1e-10, max_iter=50_000)
        assert bool(out.converged)
        gaps.append(float(out.cost) - exact)
    assert gaps[0] > gaps[1] > gaps[2] >= -1e-9  # the exact plan is feasible: never below it
    assert gaps[2] < 1e-2 * exact


def test_a_constant_shift_of_the_cost_changes_nothing_even_at_small_epsilon(x64):
    # The mass is fixed, so M - c moves the objective by -c·mass and leaves the plan; exp(-M/ε)
    # alone would overflow here (M - 5 with ε = 0.01 gives e^500).
    cost = _problem(9, 8, 7)
    a, b = np.full(9, 1 / (0.6 * 9)), np.full(8, 1 / 8)
    kw = dict(mass=0.5, epsilon=0.01, tol=1e-10, max_iter=20_000)
    out, shifted = partial_ot(a, b, cost, **kw), partial_ot(a, b, cost - 5.0, **kw)
    assert bool(out.converged) and bool(shifted.converged)
    np.testing.assert_allclose(shifted.matrix, out.matrix, atol=1e-12)
    np.testing.assert_allclose(shifted.cost, out.cost - 5.0 * 0.5, rtol=1e-10)


def test_jit_vmap_and_the_plan_is_a_constant_for_gradients(x64):
    cost = jnp.asarray(_problem(8, 7, 6))
    a, b = jnp.full(8, 1 / (0.8 * 8)), jnp.full(7, 1 / 7)
    for eps in (0.1, None):
        f = jax.jit(lambda c, e=eps: partial_ot(a, b, c, mass=0.7, epsilon=e))
        out = f(cost)
        np.testing.assert_allclose(out.cost, partial_ot(a, b, cost, mass=0.7, epsilon=eps).cost)
        grad = jax.grad(lambda c, f=f: f(c).cost)(cost)  # π fixed: d⟨π, M⟩/dM = π
        np.testing.assert_allclose(grad, out.matrix, atol=1e-12)
        batched = jax.vmap(f)(jnp.stack([cost, 2 * cost]))
        np.testing.assert_allclose(batched.cost[0], out.cost, rtol=1e-9)
        np.testing.assert_allclose(batched.matrix[1], f(2 * cost).matrix, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mass": 1.5},  # more than min(sum a, sum b)
        {"mass": -0.1},
        {"mass": 0.5, "epsilon": 0.0},
        {"mass": 0.5, "epsilon": "0.1"},
        {"mass": 0.5, "cost": np.ones((4, 3))},  # does not fit the marginals
        {"mass": 0.5, "cost": np.full((4, 4), np.nan)},
    ],
)
def test_bad_input_is_one_line(kwargs):
    kwargs = {"cost": np.ones((4, 4)), "epsilon": 0.1, **kwargs}
    with pytest.raises(ConfigError) as err:
        partial_ot(np.full(4, 0.25), np.full(4, 0.25), **kwargs)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("epsilon", [None, 0.1])
@pytest.mark.parametrize(
    "mass, cost",
    [(1.5, np.ones((4, 4))), (0.5, np.full((4, 4), np.nan)), (-0.2, np.ones((4, 4)))],
    ids=["mass_above_the_marginals", "nan_cost", "negative_mass"],
)
def test_under_jit_bad_input_is_not_converged(x64, epsilon, mass, cost):
    # Traced inputs skip the eager checks; the solve must then say it failed, never return a
    # plan of another mass (or an XLA callback error) marked converged.
    a = b = jnp.full(4, 0.25)
    out = jax.jit(lambda c, m: partial_ot(a, b, c, mass=m, epsilon=epsilon, max_iter=200))(
        jnp.asarray(cost), mass
    )
    assert not bool(out.converged)


def test_an_ott_geometry_or_linear_problem_is_accepted(x64):
    # The case: a Geometry said "cost must be an (n, m) matrix, got shape ()".
    cost = _problem(8, 6, 9)
    a, b = np.full(8, 1 / 8), np.full(6, 1 / 6)
    ref = partial_ot(a, b, cost, mass=0.7, epsilon=0.05, tol=1e-12, max_iter=20_000)
    geom = Geometry(cost_matrix=jnp.asarray(cost), epsilon=0.05)
    for out in (
        partial_ot(a, b, geom, mass=0.7, tol=1e-12, max_iter=20_000),  # ε from the geometry
        partial_ot(None, None, LinearProblem(geom), mass=0.7, tol=1e-12, max_iter=20_000),
    ):
        assert bool(out.converged)
        np.testing.assert_allclose(out.matrix, ref.matrix, atol=1e-12)


def test_the_dtype_follows_the_inputs_and_unreachable_tolerances_are_refused():
    cost = _problem(6, 5, 10)
    a, b = np.full(6, 1 / 6), np.full(5, 1 / 5)
    assert not jax.config.jax_enable_x64
    for eps in (0.1, None):
        out = partial_ot(a, b, cost, mass=0.5, epsilon=eps)  # float64 numpy: float32, as JAX
        assert out.matrix.dtype == out.cost.dtype == jnp.float32 and bool(out.converged)
    with pytest.raises(ConfigError, match=r"tol=1e-09 is below what float32 resolves") as err:
        partial_ot(a, b, cost, mass=0.5, epsilon=0.1, tol=1e-9)  # accepted silently before
    assert "JAX_ENABLE_X64=1" in str(err.value) and len(str(err.value).splitlines()) == 1
    with jax.enable_x64(True):
        f32 = [np.asarray(x, np.float32) for x in (a, b, cost)]
        assert partial_ot(*f32, mass=0.5, epsilon=0.1).matrix.dtype == jnp.float32
        out = partial_ot(a, b, cost, mass=0.5, epsilon=0.1, tol=1e-9)
        assert out.matrix.dtype == jnp.float64 and bool(out.converged)


def test_an_unconverged_solve_warns_and_can_raise(x64):
    # The case: ε = 1e-6 returned converged=False with a plan that looked valid.
    cost = _problem(6, 5, 11)
    a, b = np.full(6, 1 / 6), np.full(5, 1 / 5)
    kw = dict(mass=0.5, epsilon=1e-6, max_iter=50)
    with pytest.warns(NotConvergedWarning, match=r"partial_ot\(epsilon=1e-06\) did not converge"):
        assert not bool(partial_ot(a, b, cost, **kw).converged)
    with pytest.raises(NotConvergedError, match="stopped after 50 iterations"):
        partial_ot(a, b, cost, unconverged="raise", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        partial_ot(a, b, cost, unconverged="ignore", **kw)


@pytest.mark.parametrize("name", ["a", "b", "mass", "epsilon"])
def test_differentiating_what_the_plan_holds_fixed_is_a_one_line_error(x64, name):
    # These gradients were silently zero: the plan is a constant for gradients (WARMPOT).
    args = {"a": np.full(6, 0.2), "b": np.full(5, 0.2), "mass": 0.5, "epsilon": 0.1}
    cost = _problem(6, 5, 12)

    def cost_of(value):
        kw = {**args, name: value}
        return partial_ot(kw.pop("a"), kw.pop("b"), cost, **kw).cost

    with pytest.raises(ConfigError, match=f"not differentiable with respect to {name}:") as err:
        jax.grad(cost_of)(jnp.asarray(args[name]))
    assert len(str(err.value).splitlines()) == 1
