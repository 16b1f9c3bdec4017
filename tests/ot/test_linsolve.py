"""Shifted arrow-matrix solves (Cholesky and Schur-complement PCG) against numpy."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.ot.linsolve import LinearSolver, solve_shifted


class Arrow(NamedTuple):
    """``[[diag(h1), S], [Sᵀ, diag(h2)]]`` with a dense ``S`` (the protocol, nothing more)."""

    h1: jnp.ndarray
    h2: jnp.ndarray
    S: jnp.ndarray

    def apply_S(self, v2):
        return self.S @ v2

    def apply_St(self, v1):
        return self.S.T @ v1

    def col_sq_sum(self, w):
        return w @ self.S**2

    def dense(self, shift=0.0):
        top = jnp.concatenate([jnp.diag(self.h1 + shift), self.S], axis=1)
        bottom = jnp.concatenate([self.S.T, jnp.diag(self.h2 + shift)], axis=1)
        return jnp.concatenate([top, bottom])


def _arrow(seed, n=7, m1=5):
    # Diagonally dominant like the dual Hessian (Eq. 4): h1 = row sums, h2 = column sums of S.
    S = jnp.asarray(np.random.default_rng(seed).random((n, m1)))
    return Arrow(S.sum(1) + 0.1, S.sum(0) + 0.1, S)


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
