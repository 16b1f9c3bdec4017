"""Gradients of ``solve``'s plan and potentials and of the OT value: finite differences, ott-jax.

Implicit differentiation (:mod:`jaxlab.ot.implicit`) for the plan and potentials, the envelope
theorem for the value; both checked in float64 against central differences of the solver itself
and against ott-jax's own implicit gradients (``Sinkhorn`` with its default ``ImplicitDiff``), with
respect to the cost matrix, a point cloud's points, the marginals (along directions keeping the
masses equal, the only feasible ones) and ε.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ott.geometry.geometry import Geometry
from ott.geometry.pointcloud import PointCloud
from ott.problems.linear.linear_problem import LinearProblem
from ott.solvers.linear.sinkhorn import Sinkhorn

from jaxlab.methods.qn_ot import entropic_ot_value, solve
from jaxlab.ot import implicit
from jaxlab.ot.linsolve import LinearSolver, solve_shifted

N, M_, EPS, TOL = 7, 5, 0.1, 1e-13


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    a, b = rng.random(N) + 0.2, rng.random(M_) + 0.2
    return {
        "x": rng.random((N, 2)),
        "y": rng.random((M_, 2)),
        "a": a / a.sum(),
        "b": b / b.sum(),
        "W": rng.normal(size=(N, M_)),  # weights of the scalar read from the plan
        "w": rng.normal(size=N + M_),  # weights of the scalar read from the potentials
    }


def _readouts(W, w, matrix, alpha, beta, *values):
    """Scalars to differentiate: from the plan, the potentials (gauge β_m = 0), the values."""
    return jnp.stack([jnp.sum(W * matrix), w @ jnp.concatenate([alpha, beta]), *values])


def _geometry(d, x, eps, cost):
    return PointCloud(x, d["y"], epsilon=eps) if cost is None else Geometry(cost, epsilon=eps)


def ours(d, x, a, b, eps, *, method="splr", cost=None):
    """jaxlab's readouts on ``PointCloud(x, y, ε)`` (or ``cost``); values in both ott conventions
    (the paper's differs from ``ent_reg_cost`` by the constant ε Σa Σb)."""
    geom = _geometry(d, x, eps, cost)
    out = solve(a, b, geom, tol=TOL, method=method)
    values = (
        entropic_ot_value(a, b, geom, tol=TOL, convention=c, method=method)
        for c in ("ent_reg_cost", "reg_ot_cost")
    )
    return _readouts(d["W"], d["w"], out.matrix, *out.potentials, *values)


def ott(d, x, a, b, eps, *, cost=None):
    """The same readouts from ott-jax's Sinkhorn (implicit differentiation, its default)."""
    geom = _geometry(d, x, eps, cost)
    out = Sinkhorn(threshold=TOL, max_iterations=100_000)(LinearProblem(geom, a, b))
    shift = out.g[-1]  # to jaxlab's gauge β_m = 0; the plan does not change
    values = (out.ent_reg_cost, out.reg_ot_cost)
    return _readouts(d["W"], d["w"], out.matrix, out.f + shift, out.g - shift, *values)


def _directions():
    """Directions in (points, a, b, ε), one argument at a time."""
    rng = np.random.default_rng(1)
    da, db = rng.normal(size=N), rng.normal(size=M_)
    zero = (np.zeros((N, 2)), np.zeros(N), np.zeros(M_), np.zeros(()))
    return {
        "points": (rng.normal(size=(N, 2)), *zero[1:]),
        "marginals": (zero[0], da - da.mean(), db - db.mean(), zero[3]),  # masses stay equal
        "epsilon": (*zero[:3], np.ones(())),
    }


@pytest.mark.parametrize("argument", ["points", "marginals", "epsilon"])
def test_forward_and_reverse_mode_match_central_differences(x64, data, argument):
    d = data
    theta = (jnp.asarray(d["x"]), jnp.asarray(d["a"]), jnp.asarray(d["b"]), jnp.asarray(EPS))
    direction = tuple(jnp.asarray(v) for v in _directions()[argument])
    f = lambda *t: ours(d, *t)
    h = 1e-5
    plus = f(*(t + h * v for t, v in zip(theta, direction, strict=True)))
    minus = f(*(t - h * v for t, v in zip(theta, direction, strict=True)))
    fd = (plus - minus) / (2 * h)
    _, forward = jax.jvp(f, theta, direction)
    jac = jax.jacrev(f, argnums=(0, 1, 2, 3))(*theta)
    reverse = sum(jnp.tensordot(j, v, axes=v.ndim) for j, v in zip(jac, direction, strict=True))
    np.testing.assert_allclose(forward, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(reverse, fd, rtol=1e-6, atol=1e-8)


def test_gradient_in_a_cost_matrix_matches_central_differences(x64, data):
    d = data
    cost = jnp.asarray(((d["x"][:, None] - d["y"][None]) ** 2).sum(-1))
    f = lambda c: ours(d, None, d["a"], d["b"], EPS, cost=c)
    D = jnp.asarray(np.random.default_rng(2).normal(size=(N, M_)))
    h = 1e-5
    fd = (f(cost + h * D) - f(cost - h * D)) / (2 * h)
    reverse = jnp.tensordot(jax.jacrev(f)(cost), D, axes=2)
    np.testing.assert_allclose(reverse, fd, rtol=1e-6, atol=1e-8)


def test_values_and_gradients_match_ott_jax(x64, data):
    """ott's plan, potentials (moved to our gauge) and values in its conventions, and their
    implicit gradients in the points, ε and (along equal-mass directions) the marginals."""
    d = data
    theta = (jnp.asarray(d["x"]), jnp.asarray(d["a"]), jnp.asarray(d["b"]), jnp.asarray(EPS))
    mine = lambda *t: ours(d, *t)
    theirs = lambda *t: ott(d, *t)
    np.testing.assert_allclose(mine(*theta), theirs(*theta), rtol=1e-9, atol=1e-11)
    jac_mine = jax.jacrev(mine, argnums=(0, 1, 2, 3))(*theta)
    jac_ott = jax.jit(jax.jacrev(theirs, argnums=(0, 1, 2, 3)))(*theta)
    np.testing.assert_allclose(jac_mine[0], jac_ott[0], rtol=1e-6, atol=1e-9)  # points
    np.testing.assert_allclose(jac_mine[3], jac_ott[3], rtol=1e-6, atol=1e-9)  # ε
    # marginals: the gradients may differ by c (1_n, -1_m); along equal-mass directions they agree
    _, da, db, _ = _directions()["marginals"]
    along = lambda jac: jac[1] @ da + jac[2] @ db
    np.testing.assert_allclose(along(jac_mine), along(jac_ott), rtol=1e-6, atol=1e-9)


def test_cost_matrix_gradients_match_ott_jax(x64, data):
    d = data
    cost = jnp.asarray(np.random.default_rng(3).random((N, M_)))
    jac_mine = jax.jacrev(lambda c: ours(d, None, d["a"], d["b"], EPS, cost=c))(cost)
    jac_ott = jax.jit(jax.jacrev(lambda c: ott(d, None, d["a"], d["b"], EPS, cost=c)))(cost)
    np.testing.assert_allclose(jac_mine, jac_ott, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("method", ["splr", "sinkhorn"])
def test_the_gradient_is_the_same_under_jit_and_for_any_method(x64, data, method):
    # Eagerly the solve inside jax.grad runs as solve()'s compiled program; under jit it is
    # traced into the caller's program. Implicit differentiation does not depend on the solver.
    d = data
    x = jnp.asarray(d["x"])
    f = lambda x: ours(d, x, d["a"], d["b"], EPS, method=method)[0]
    eager = jax.grad(f)(x)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(x), eager, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(eager, jax.grad(lambda x: ours(d, x, d["a"], d["b"], EPS)[0])(x),
                               rtol=1e-7, atol=1e-10)  # fmt: skip


def test_the_conjugate_gradient_path_matches_the_dense_one(x64, monkeypatch):
    # Beyond DENSE_MAX_SIZE unknowns the system is solved by CG on the Schur complement.
    rng = np.random.default_rng(4)
    cost, a, b = jnp.asarray(rng.random((9, 8))), jnp.full(9, 1 / 9), jnp.full(8, 1 / 8)
    W = jnp.asarray(rng.normal(size=(9, 8)))
    f = lambda c: jnp.sum(W * solve(a, b, c, epsilon=EPS, tol=TOL).matrix)
    used: list[set] = []

    def spy(H, tau, r, solver, **kw):
        used[-1].add(solver)
        return solve_shifted(H, tau, r, solver, **kw)

    monkeypatch.setattr(implicit, "solve_shifted", spy)
    gradients = []
    for limit in (implicit.DENSE_MAX_SIZE, 4):
        monkeypatch.setattr(implicit, "DENSE_MAX_SIZE", limit)
        implicit.solution_tangent.clear_cache()  # traced afresh with this limit
        used.append(set())
        gradients.append(jax.grad(f)(cost))
    implicit.solution_tangent.clear_cache()
    assert used == [{LinearSolver.CHOLESKY}, {LinearSolver.CG}]
    np.testing.assert_allclose(gradients[1], gradients[0], rtol=1e-7, atol=1e-10)


def test_value_gradient_in_epsilon_without_x64(data):
    # The case: jax.grad of entropic_ot_value in ε raised a ConfigError about jax.jit.
    d = data
    assert not jax.config.jax_enable_x64
    cost = ((d["x"][:, None] - d["y"][None]) ** 2).sum(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g32 = jax.grad(lambda e: entropic_ot_value(d["a"], d["b"], cost, e))(jnp.float32(EPS))
    assert g32.dtype == jnp.float32
    with jax.enable_x64(True):
        g64 = jax.grad(lambda e: entropic_ot_value(d["a"], d["b"], cost, e, tol=TOL))(EPS)
        T = np.asarray(solve(d["a"], d["b"], cost, epsilon=EPS, tol=TOL).matrix)
    np.testing.assert_allclose(g64, np.sum(T * (np.log(T) - 1)), rtol=1e-9)  # -h(T*)
    np.testing.assert_allclose(g32, g64, rtol=1e-4)
