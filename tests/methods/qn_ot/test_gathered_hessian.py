"""Gathered (COO) H_Ω, the CG fast path, against the masked dense oracle (Section 3.1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.methods.qn_ot import solve
from jaxlab.methods.qn_ot.direction import default_linear_solver
from jaxlab.methods.qn_ot.gathered_hessian import (
    band_order,
    capacity_levels,
    compact,
    default_capacity,
    gathered_above,
    gathered_levels,
    on_level,
    pack_above,
    sparsify_gathered,
)
from jaxlab.methods.qn_ot.sparse_hessian import sparsify
from jaxlab.ot.linsolve import LinearSolver, solve_shifted

# One compilation per capacity, shared by the tests (density is traced).
_gathered = jax.jit(sparsify_gathered, static_argnums=3)
_dense = jax.jit(sparsify)


def _plan(seed, n=15, m=12, eps=0.05):
    rng = np.random.default_rng(seed)
    T = jnp.asarray(np.exp(-rng.random((n, m)) / eps))
    return T / T.sum(), eps


@pytest.mark.parametrize(
    "p, prob, capacity", [(1000, 0.05, 80), (1000, 0.05, 20), (613, 0.5, 700), (64, 1.0, 64)]
)
def test_compact_equals_nonzero(p, prob, capacity):
    mask = np.random.default_rng(p).random(p) < prob
    idx, used = jax.jit(compact, static_argnums=1)(jnp.asarray(mask), capacity)
    ref = np.nonzero(mask)[0][:capacity]
    assert int(np.sum(used)) == len(ref) and not np.any(np.asarray(used)[len(ref) :])
    np.testing.assert_array_equal(np.asarray(idx)[: len(ref)], ref)


@pytest.mark.parametrize("density", [0.0, 0.03, 0.1, 0.4])
def test_gathered_products_equal_the_masked_dense_ones(x64, density):
    T, eps = _plan(0)
    n, m = T.shape
    dense = _dense(T, eps, density)
    gathered = _gathered(T, eps, density, n * (m - 1))
    assert int(gathered.kept) == int(dense.kept)
    np.testing.assert_allclose(gathered.dense_block(), dense.S, rtol=1e-14)
    # Row 0 and column 0 are held densely; the rest of Ω in row-major triplets, then padding.
    stored = int(np.count_nonzero(np.asarray(dense.S)[1:, 1:]))
    assert np.all(np.asarray(gathered.rows)[:stored] > 0)
    assert np.all(np.asarray(gathered.cols)[:stored] > 0)
    assert np.all(np.diff(np.asarray(gathered.rows)[:stored]) >= 0)
    assert not np.any(np.asarray(gathered.vals)[stored:])
    rng = np.random.default_rng(1)
    v = jnp.asarray(rng.normal(size=n + m - 1))
    w = jnp.asarray(rng.random(n))
    np.testing.assert_allclose(gathered.matvec(v, 1e-3), dense.matvec(v, 1e-3), rtol=1e-12)
    np.testing.assert_allclose(gathered.col_sq_sum(w), dense.col_sq_sum(w), rtol=1e-12)


def _numpy_h_omega(T, eps, density):
    """``H_Ω`` written from Section 3.1 in float64 numpy: ``[[diag(T1), S], [Sᵀ, diag(T̃ᵀ1)]] / η``
    with ``S`` the ``⌊ρ n (m-1)⌋`` largest entries of ``T̃`` (``T`` without its last column) plus
    its row and column 0, the rest zero."""
    T = np.asarray(T, np.float64)
    n, m1 = T.shape[0], T.shape[1] - 1
    T_t = T[:, :m1]
    keep = np.zeros(n * m1, bool)
    keep[np.argsort(-T_t.ravel(), kind="stable")[: int(np.floor(density * n * m1))]] = True
    keep = keep.reshape(n, m1)
    keep[0, :] = keep[:, 0] = True
    H = np.zeros((n + m1, n + m1))
    H[:n, :n] = np.diag(T.sum(1))
    H[n:, n:] = np.diag(T_t.sum(0))
    H[:n, n:] = np.where(keep, T_t, 0.0)
    H[n:, :n] = H[:n, n:].T
    return H / eps


@pytest.mark.parametrize("density", [0.0, 0.1, 0.4])
def test_gathered_products_equal_a_numpy_h_omega(x64, density):
    T, eps = _plan(3)
    n, m = T.shape
    H = _numpy_h_omega(T, eps, density)
    gathered = _gathered(T, eps, density, n * (m - 1))
    rng = np.random.default_rng(2)
    v, w = rng.normal(size=n + m - 1), rng.random(n)
    np.testing.assert_allclose(gathered.matvec(jnp.asarray(v), 1e-3), H @ v + 1e-3 * v, rtol=1e-12)
    S = H[:n, n:]
    np.testing.assert_allclose(gathered.col_sq_sum(jnp.asarray(w)), (S**2 * w[:, None]).sum(0))


def test_sparse_cg_matches_the_dense_solve(x64):
    T, eps = _plan(5)
    n, m = T.shape
    H = _gathered(T, eps, 0.1, default_capacity(n, m, 0.1))
    rhs = jnp.asarray(np.random.default_rng(0).normal(size=n + m - 1))
    exact = np.linalg.solve(np.asarray(_dense(T, eps, 0.1).dense(1e-4)), np.asarray(rhs))
    got = jax.jit(lambda H, r: solve_shifted(H, 1e-4, r, LinearSolver.SPARSE_CG, cg_tol=1e-13))
    np.testing.assert_allclose(got(H, rhs), exact, rtol=1e-8)


def test_truncated_capacity_keeps_a_positive_definite_prefix(x64):
    T, eps = _plan(2)
    n, m = T.shape
    full = _gathered(T, eps, 0.5, n * (m - 1))
    short = _gathered(T, eps, 0.5, 30)
    # the stored entries are the first 30 of the full mask in row-major order
    np.testing.assert_array_equal(short.rows, full.rows[:30])
    np.testing.assert_array_equal(short.cols, full.cols[:30])
    dense = np.diag(np.concatenate([short.h1, short.h2]) + 1e-9)
    dense[:n, n:] = dense[n:, :n].T[:, :] = 0
    S = np.asarray(short.dense_block())
    dense[:n, n:], dense[n:, :n] = S, S.T
    assert np.linalg.eigvalsh(dense).min() > 0


def test_sampled_quantile_is_unbiased_on_a_near_diagonal_plan(x64):
    # 784 × 783 > 40,000 entries: the threshold comes from a sample. A plan concentrated on the
    # diagonal fooled a stride-16 sample (which hits the diagonal in every row) into keeping 1/4
    # of the requested entries (1,516 of 6,139).
    n, eps = 784, 0.01
    i = np.arange(n)
    cost = np.abs(i[:, None] - i[None, :]) / n + 0.01 * np.random.default_rng(0).random((n, n))
    T = jnp.asarray(np.exp(-cost / eps) / n)
    density = 0.01
    H = _gathered(T, eps, density, default_capacity(n, n, density))
    target = density * n * (n - 1)
    assert 0.8 * target <= int(H.kept) <= 1.25 * target


def test_default_solver_picks_the_gathered_form_for_sparse_hessians():
    assert default_linear_solver(100) is LinearSolver.CHOLESKY
    assert default_linear_solver(1000, 0.01) is LinearSolver.SPARSE_CG
    assert default_linear_solver(1000, 0.5) is LinearSolver.CG


def test_splr_with_gathered_cg_reaches_the_masked_dense_plan(x64):
    # SPLR end to end on the triplets (the default above 128 unknowns) and on the masked block.
    rng = np.random.default_rng(3)
    cost = rng.random((40, 30))
    a, b = np.full(40, 1 / 40), np.full(30, 1 / 30)
    outs = [
        solve(a, b, cost, epsilon=0.05, tol=1e-10, density_max=0.1, linear_solver=solver)
        for solver in (LinearSolver.SPARSE_CG, LinearSolver.CG)
    ]
    assert all(bool(o.converged) for o in outs)
    np.testing.assert_allclose(outs[0].matrix, outs[1].matrix, atol=1e-9)


def _numpy_mask(T, threshold):
    """``T̃ ≥ threshold`` outside row and column 0 (those are held densely), in numpy."""
    T_t = np.asarray(T)[:, :-1]
    keep = T_t >= threshold
    keep[0, :] = keep[:, 0] = False
    return keep


@pytest.mark.parametrize("shape", [(15, 12), (9, 33), (7, 65), (5, 34)])
def test_packed_words_are_the_numpy_mask(x64, shape):
    # Rows of T̃ of 11, 32, 64 and 33 entries: less than a word, exactly one or two words, and
    # one bit into a second word (the last column of T, not in T̃, must never be packed).
    rng = np.random.default_rng(shape[1])
    T = jnp.asarray(rng.random(shape))
    threshold = float(np.quantile(np.asarray(T)[:, :-1], 0.6))
    packed = jax.jit(pack_above)(T, threshold)
    n, m1 = shape[0], shape[1] - 1
    words = np.asarray(packed.words)
    bits = (words[:, :, None] >> np.arange(32, dtype=np.uint32)) & 1
    unpacked = bits.reshape(n, -1).astype(bool)
    keep = _numpy_mask(T, threshold)
    np.testing.assert_array_equal(unpacked[:, :m1], keep)
    assert not unpacked[:, m1:].any()
    assert int(packed.total) == keep.sum()
    assert int(packed.kept) == int((np.asarray(T)[:, :-1] >= threshold).sum())


def test_capacity_levels_shrink_by_sqrt2_down_to_the_smallest():
    assert capacity_levels(12276) == (12276, 8681, 6139, 4341, 3070, 2171, 1536, 1087)
    assert capacity_levels(796) == (796,)
    assert capacity_levels(1000, smallest=300) == (1000, 708, 501, 355)


def test_band_order_interleaves_each_band_and_keeps_every_prefix():
    levels = (600, 300, 150, 75, 38)
    order = band_order(levels, stride=8)
    assert sorted(order) == list(range(600))  # a permutation of the slots
    for hi, lo in zip(levels, (*levels[1:], 0), strict=True):
        band = order[lo:hi]
        assert band.min() == lo and band.max() == hi - 1  # each level's prefix maps onto itself
        # consecutive slots 8 entries of Ω apart, except where the band starts its next residue
        steps = np.diff(band)
        assert np.all((steps == 8) | (band[1:] - lo < 8))


@pytest.mark.parametrize("density", [0.02, 0.1, 0.3])
def test_levels_store_omega_at_the_smallest_level_that_holds_it(x64, density):
    T, eps = _plan(4, n=40, m=33)
    n, m = T.shape
    threshold = float(np.quantile(np.asarray(T)[:, :-1], 1 - density))
    need = int(_numpy_mask(T, threshold).sum())
    levels = (600, 300, 150, 75, 38)
    H = jax.jit(lambda T: gathered_levels(T, eps, threshold, levels))(T)
    assert levels[int(H.index)] == min(c for c in levels if c >= need)
    # Its products (on that prefix of the triplets) are the numpy H_Ω's.
    rng = np.random.default_rng(0)
    v, w = rng.normal(size=n + m - 1), rng.random(n)
    got = jax.jit(lambda H, v: H.matvec(v, 1e-3))(H, jnp.asarray(v))
    T_np = np.asarray(T)
    S = np.where(_numpy_mask(T, threshold), T_np[:, :-1], 0.0)
    S[0, :], S[:, 0] = T_np[0, :-1], T_np[:, 0]
    dense = np.block([[np.diag(T_np.sum(1)), S], [S.T, np.diag(T_np[:, :-1].sum(0))]]) / eps
    np.testing.assert_allclose(got, dense @ v + 1e-3 * v, rtol=1e-12)
    got_sq = jax.jit(lambda H, w: H.col_sq_sum(w))(H, jnp.asarray(w))
    np.testing.assert_allclose(got_sq, ((S / eps) ** 2 * w[:, None]).sum(0), rtol=1e-12)


def _solve_shifted_sparse(G, r):
    return solve_shifted(G, 1e-3, r, LinearSolver.SPARSE_CG, cg_tol=1e-13)


# Compiled once for both densities (the threshold is traced, the levels static).
_levelled = jax.jit(gathered_levels, static_argnums=3)
_solve_on_level = jax.jit(lambda H, r: on_level(H, _solve_shifted_sparse, r))


@pytest.mark.parametrize("density", [0.02, 0.1])
def test_a_solve_on_the_level_equals_numpy_on_the_full_h_omega(x64, density):
    """``on_level`` runs the whole CG solve on one level's prefix (SPLR's path): the solution is
    numpy's on the H_Ω of Section 3.1, so the level it picks holds all of Ω."""
    T, eps = _plan(5, n=40, m=33)
    n, m = T.shape
    threshold = float(np.quantile(np.asarray(T)[:, :-1], 1 - density))
    H = _levelled(T, eps, threshold, (600, 150, 38))
    assert int(H.index) > 0  # a prefix shorter than the storage, so a wrong level truncates Ω
    rhs = jnp.asarray(np.random.default_rng(2).normal(size=n + m - 1))
    got = _solve_on_level(H, rhs)
    T_np = np.asarray(T)
    S = np.where(_numpy_mask(T, threshold), T_np[:, :-1], 0.0)
    S[0, :], S[:, 0] = T_np[0, :-1], T_np[:, 0]
    dense = np.block([[np.diag(T_np.sum(1)), S], [S.T, np.diag(T_np[:, :-1].sum(0))]]) / eps
    want = np.linalg.solve(dense + 1e-3 * np.eye(n + m - 1), np.asarray(rhs))
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10 * np.abs(want).max())


def test_levels_truncate_at_the_largest_when_none_holds_omega(x64):
    T, eps = _plan(6, n=30, m=30)
    threshold = float(np.quantile(np.asarray(T)[:, :-1], 0.5))  # about 400 entries
    v = jnp.asarray(np.random.default_rng(1).normal(size=59))
    H = jax.jit(lambda T: gathered_levels(T, eps, threshold, (50, 25)))(T)
    assert int(H.index) == 0
    # the first 50 triplets in row-major order, as a capacity of 50 stores them
    short = gathered_above(T, eps, threshold, 50)
    assert short.vals.shape == (50,) and np.all(np.asarray(short.vals) > 0)
    np.testing.assert_allclose(H.matvec(v), short.matvec(v), rtol=1e-13)
    full = gathered_above(T, eps, threshold, 30 * 29)
    assert not np.allclose(H.matvec(v), full.matvec(v))
