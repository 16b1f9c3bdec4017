"""Shifted arrow-matrix solves (Cholesky and Schur-complement PCG) against numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.ot.implicit import PlanHessian
from jaxlab.ot.linsolve import LinearSolver, solve_shifted


def _arrow(seed, n=7, m1=5):
    # Diagonally dominant like the dual Hessian (Eq. 4): h1 = row sums, h2 = column sums of S.
    S = jnp.asarray(np.random.default_rng(seed).random((n, m1)))
    return PlanHessian(S.sum(1) + 0.1, S.sum(0) + 0.1, S)  # any arrow matrix, not only a plan's


@pytest.mark.parametrize("solver", list(LinearSolver))
def test_solve_shifted_matches_numpy(x64, solver):
    H = _arrow(0)
    rhs = jnp.asarray(np.random.default_rng(1).normal(size=12))
    exact = np.linalg.solve(np.asarray(H.dense(1e-3)), np.asarray(rhs))
    got = jax.jit(lambda H, r: solve_shifted(H, 1e-3, r, solver, cg_tol=1e-13))(H, rhs)
    np.testing.assert_allclose(got, exact, rtol=1e-9)
    assert LinearSolver(solver.value) is solver  # names round-trip (StrEnum)


def test_cg_with_a_zero_right_hand_side_returns_zeros(x64):
    # The Schur residual starts at 0: zero CG steps, no 0/0.
    got = solve_shifted(_arrow(2), 1e-3, jnp.zeros(12), LinearSolver.CG)
    np.testing.assert_array_equal(got, np.zeros(12))


def test_the_plan_hessian_is_the_dual_hessian(x64):
    # PlanHessian.at(T, ε) is Eq. 4's Hessian: its dense form and its products agree with dual.py's.
    from jaxlab.ot.dual import dual_hessian

    T = jnp.asarray(np.random.default_rng(3).random((6, 4)))
    H = PlanHessian.at(T, 0.3)
    np.testing.assert_allclose(H.dense(), dual_hessian(T, 0.3), rtol=1e-12)
    v = jnp.asarray(np.random.default_rng(4).normal(size=9))
    np.testing.assert_allclose(H.matvec(v), dual_hessian(T, 0.3) @ v, rtol=1e-12)
