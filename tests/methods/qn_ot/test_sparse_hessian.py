"""H_Ω (Section 3.1): positive definite with a shift, exact with a full mask, density as defined."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.methods.qn_ot.sparse_hessian import (
    next_density,
    sparsify,
    sparsify_above,
    threshold_search,
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


@pytest.mark.parametrize("kind", ["lognormal", "underflow"])
def test_top_threshold_from_a_guess_is_the_same_kth_largest_in_fewer_passes(x64, kind):
    # SPLR starts each search at its previous threshold. Guesses at, above and below the answer,
    # far off, infinite or NaN must all give the sort's k-th largest; a guess near it saves passes.
    rng = np.random.default_rng(4)
    v = {
        "lognormal": np.exp(3.0 * rng.normal(size=5000) - 20.0),
        "underflow": np.exp(np.minimum(rng.normal(size=5000) * 400.0, 0.0)),
    }[kind]
    ordered = -np.sort(-v)
    search = jax.jit(threshold_search)
    for density in (0.001, 0.01, 0.1):
        k = int(np.floor(density * v.size))
        want = ordered[k - 1]
        cold, cold_passes = search(jnp.asarray(v), density)
        near = np.log(want) + np.array([0.0, 0.05, -0.05])
        # the neighbours of the answer and the midpoints between them (counts k - 1, k, k + 1)
        nbrs = np.log(ordered[k - 2 : k + 1])
        mids = 0.5 * (nbrs[1:] + nbrs[:-1])
        far = (np.log(want) + 30, np.log(want) - 30, np.inf, -np.inf, np.nan)
        for guess in (*near, *nbrs, *mids, *far):
            got, passes = search(jnp.asarray(v), density, guess=guess)
            assert float(got) == want == float(cold), (density, guess)
        _, warm_passes = search(jnp.asarray(v), density, guess=near[1])
        if int(cold_passes) < 80:  # with ties at the k-th largest both run out of trips
            assert int(warm_passes) < int(cold_passes), (density, warm_passes, cold_passes)


@pytest.mark.parametrize("kind", ["lognormal", "underflow"])
def test_inexact_search_separates_the_top_k_of_any_shape(x64, kind):
    # SPLR's search (exact=False, on T̃ in place): the same mask as the sort's k-th largest, on a
    # 2-D array as on its flattening; exactly k entries at or above it unless the k-th largest is
    # tied ("underflow": half the entries are 1.0, so the mask holds every tie, as the sort's).
    rng = np.random.default_rng(5)
    v = {
        "lognormal": np.exp(3.0 * rng.normal(size=(50, 99)) - 20.0),
        "underflow": np.exp(np.minimum(rng.normal(size=(50, 99)) * 400.0, 0.0)),
    }[kind]
    ordered = -np.sort(-v.ravel())
    search = jax.jit(threshold_search, static_argnames=("exact", "columns"))
    for density in (0.001, 0.01, 0.1):
        k = int(np.floor(density * v.size))
        for guess in (None, np.log(ordered[k - 1]) + 0.05):
            t, _ = search(jnp.asarray(v), density, guess=guess, exact=False)
            exact, _ = search(jnp.asarray(v), density, guess=guess)
            assert float(exact) == ordered[k - 1]
            np.testing.assert_array_equal(v >= float(t), v >= ordered[k - 1])
            if ordered[k] < ordered[k - 1]:
                assert ordered[k] < float(t) <= ordered[k - 1], (density, guess)
            flat, _ = search(jnp.asarray(v.ravel()), density, guess=guess, exact=False)
            assert float(flat) == float(t)
            # the leading columns of a wider array, in place: the extra column is ignored
            wide = np.concatenate([v, np.full((v.shape[0], 1), 2.0)], axis=1)
            cols, _ = search(jnp.asarray(wide), density, guess=guess, exact=False, columns=99)
            assert float(cols) == float(t)
    assert float(search(jnp.asarray(v), 0.0, exact=False)[0]) == np.inf


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


def _authors_sparsify_mat3(T, delta):
    """SSNS's sparsification as the authors' ``sparsify_mat3`` (yixuan/regot-python,
    ``src/sinkhorn_sparsify3.cpp``; Tang & Qiu, NeurIPS 2024, Section 3), float64 numpy loops:
    per column drop the smallest entries while their sum stays ≤ δ (``find_small``), then per row
    whose dropped entries sum to more than 2δ keep the largest again until the rest is ≤ 2δ
    (``find_large`` from the right, target ``rowsum − 2δ``). Returns the kept mask of ``T̃`` and
    whether the row pass changed anything."""
    n, m1 = T.shape[0], T.shape[1] - 1
    dropped = T[:, :m1].copy()
    for j in range(m1):
        x, total, cut = np.sort(T[:, j]), 0.0, n
        for k in range(n):
            total += x[k]
            if total > delta:
                cut = k
                break
        thresh = np.inf if cut >= n else x[cut]
        dropped[:, j] = np.where(T[:, j] >= thresh, 0.0, T[:, j])
    row_pass = False
    for i in range(n):
        row = dropped[i].copy()
        if row.sum() > 2 * delta:
            x, target, total = np.sort(row), row.sum() - 2 * delta, 0.0
            for k in range(m1 - 1, -1, -1):
                total += x[k]
                if total >= target:
                    break
            dropped[i] = np.where(row >= x[k], 0.0, row)
            row_pass = True
    return dropped == 0, row_pass


@pytest.mark.parametrize("delta", [1e-4, 2e-3, 1e-2])
def test_ssns_sparsification_is_the_authors_sparsify_mat3(x64, delta):
    from jaxlab.methods.qn_ot.sparse_hessian import sparsify_budget

    T, eps = _plan(13, n=12, m=9, eps=0.1)
    # Entries of at least δ/2, and a row of smaller ones, dropped in every column (their sum
    # exceeds 2δ, so the row pass acts) beside the one-or-two smallest of other rows.
    T = (T + 0.5 * delta).at[3, :].set(delta * jnp.linspace(0.1, 0.45, 9))
    keep, row_pass = _authors_sparsify_mat3(np.asarray(T), delta)
    assert row_pass and 0 < keep.sum() < keep.size  # both passes act, something is dropped
    H = jax.jit(sparsify_budget)(T, eps, delta)
    np.testing.assert_array_equal(np.asarray(H.S) != 0, keep)
    np.testing.assert_allclose(H.S, np.where(keep, np.asarray(T)[:, :-1], 0) / eps, rtol=1e-14)
    np.testing.assert_allclose(H.h1, np.asarray(T).sum(1) / eps, rtol=1e-14)
    np.testing.assert_allclose(H.h2, np.asarray(T)[:, :-1].sum(0) / eps, rtol=1e-14)
    assert int(H.kept) == keep.sum()
    dropped = np.where(keep, 0, np.asarray(T)[:, :-1])  # the error control of the scheme
    assert (dropped.sum(0) <= delta).all() and (dropped.sum(1) <= 2 * delta + 1e-18).all()


@pytest.mark.parametrize("rule", ["paper", "regot"])
def test_splr_density_trace_follows_its_rule(x64, rule):
    """The densities SPLR used, recomputed in float64 from its own ‖g‖ trace by the rule as
    written: Algorithm 1 (×0.9 after a decrease, else ×2), or regot 0.0.3's ``sinkhorn_splr.cpp``
    (×1.1 when ‖g‖ rose while the previous ‖g‖ was below the initial one, else ×0.99); ρ₀ = ρ_max
    / 10, clipped to [ρ_max / 100, ρ_max]."""
    from jaxlab.methods.qn_ot import api

    rng = np.random.default_rng(5)
    x, y = rng.random((30, 2)), rng.random((30, 2))
    cost = ((x[:, None] - y[None]) ** 2).sum(-1)
    out = api.solve(np.ones(30) / 30, np.ones(30) / 30, cost, epsilon=0.01, density_max=0.1,
                    density_rule=rule, tol=1e-9)  # fmt: skip
    k = int(out.n_iter)
    g, used = np.asarray(out.errors, np.float64)[: k + 1], np.asarray(out.densities)[:k]
    rho, want = 0.01, []
    for i in range(k):
        want.append(rho)
        if rule == "paper":
            factor = 0.9 if g[i + 1] < g[i] else 2.0
        else:
            factor = 1.1 if (g[i] < g[0] and g[i + 1] > g[i]) else 0.99
        rho = min(max(rho * factor, 0.001), 0.1)
    assert k > 5
    np.testing.assert_allclose(used, want, rtol=1e-12)


def test_an_unknown_density_rule_is_a_one_line_error():
    from jaxlab.core.errors import ConfigError
    from jaxlab.methods.qn_ot import api

    with pytest.raises(ConfigError, match="density_rule='fast'"):
        api.solve(np.ones(3) / 3, np.ones(3) / 3, np.eye(3), epsilon=1.0, density_rule="fast")
