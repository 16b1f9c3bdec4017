"""H_Ω (Section 3.1): positive definite with a shift, exact with a full mask, density as defined."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.methods.qn_ot.sparse_hessian import (
    next_density,
    sparsify,
    sparsify_above,
    top_threshold,
)
from jaxlab.ot.dual import dual_hessian
from jaxlab.ot.linsolve import LinearSolver, solve_shifted


def _plan(seed, n=9, m=6, eps=0.05):
    rng = np.random.default_rng(seed)
    T = jnp.asarray(np.exp(-rng.random((n, m)) / eps))
    return T / T.sum(), eps


@pytest.mark.parametrize("seed", range(4))
def test_shifted_sparse_hessian_is_positive_definite(x64, seed):
    T, eps = _plan(seed)
    rng = np.random.default_rng(100 + seed)
    for density in rng.uniform(0.0, 1.0, size=5):
        H = sparsify(T, eps, density)
        tau = 10.0 ** rng.uniform(-8, -3)
        assert np.linalg.eigvalsh(np.asarray(H.dense(tau))).min() > 0
    # an arbitrary random mask through the threshold rule
    H = sparsify_above(T * jnp.asarray(rng.random(T.shape) < 0.5), eps, 1e-12)
    assert np.linalg.eigvalsh(np.asarray(H.dense(1e-9))).min() > 0


def test_full_mask_gives_the_hessian(x64):
    T, eps = _plan(7)
    np.testing.assert_allclose(sparsify(T, eps, 1.0).dense(), dual_hessian(T, eps), rtol=1e-13)


@pytest.mark.parametrize("density", [0.0, 0.05, 0.2, 0.5, 0.9])
def test_density_follows_its_definition(x64, density):
    T, eps = _plan(11)
    n, m1 = T.shape[0], T.shape[1] - 1
    H = sparsify(T, eps, density)
    k = int(np.floor(density * n * m1))
    assert int(H.kept) == k
    # the kept entries are the k largest of T̃, plus row 0 and column 0
    T_t = np.asarray(T[:, :-1])
    top = np.zeros(n * m1, bool)
    top[np.argsort(-T_t.ravel())[:k]] = True
    top = top.reshape(n, m1)
    top[0, :] = top[:, 0] = True
    np.testing.assert_array_equal(np.asarray(H.S) != 0, top)


@pytest.mark.parametrize("kind", ["lognormal", "underflow", "uniform"])
def test_top_threshold_is_the_exact_kth_largest(x64, kind):
    # The k-th largest by a full sort, whatever the shape of the distribution: heavy tails, a
    # plan whose small entries underflow to 0 (η = 1e-3), values spread linearly.
    rng = np.random.default_rng(3)
    v = {
        "lognormal": np.exp(3.0 * rng.normal(size=5000) - 20.0),
        "underflow": np.exp(np.minimum(rng.normal(size=5000) * 400.0, 0.0)),
        "uniform": rng.random(5000),
    }[kind]
    ordered = -np.sort(-v)
    for density in (0.0003, 0.001, 0.01, 0.1, 0.5, 1.0):
        k = int(np.floor(density * v.size))
        assert float(top_threshold(jnp.asarray(v), density)) == ordered[k - 1], density
    assert float(top_threshold(jnp.asarray(v), 0.0)) == np.inf


def test_density_schedule_stays_in_bounds(x64):
    rho = 0.001
    for improved in [True] * 50 + [False] * 20 + [True] * 3:
        new = float(next_density(rho, improved, 1e-4, 1e-2))
        expected = min(max((0.9 if improved else 2.0) * rho, 1e-4), 1e-2)
        assert new == pytest.approx(expected)
        assert 1e-4 <= new <= 1e-2
        rho = new


def test_cg_on_schur_complement_matches_dense_solve(x64):
    T, eps = _plan(5, n=12, m=10)
    H = sparsify(T, eps, 0.3)
    rhs = jnp.asarray(np.random.default_rng(0).normal(size=21))
    exact = np.linalg.solve(np.asarray(H.dense(1e-4)), np.asarray(rhs))
    for solver in LinearSolver:
        got = solve_shifted(H, 1e-4, rhs, solver, cg_tol=1e-13)
        np.testing.assert_allclose(got, exact, rtol=1e-8)
