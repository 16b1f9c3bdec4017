"""The rank-2 correction in inverse form (Section 3.2): secant condition and Woodbury equality;
the top-ρ threshold of Section 3.1."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.methods.qn_ot.direction import density_threshold, inverse_bfgs_direction, rank2_gate
from jaxlab.methods.qn_ot.sparse_hessian import SAMPLE_CAP


def _setup(seed=0, k=8):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(k, k))
    B0 = A @ A.T + k * np.eye(k)
    s, y, g = rng.normal(size=(3, k))
    y = y if y @ s > 0 else -y
    return B0, s, y, g


def test_secant_condition(x64):
    B0, s, y, _ = _setup()
    solve = lambda r: jnp.linalg.solve(B0, r)  # noqa: E731
    # d = -B⁻¹g with g = y must give d = -s: B⁻¹y = s.
    np.testing.assert_allclose(-inverse_bfgs_direction(solve, y, s, y, True), s, rtol=1e-10)


def test_equals_woodbury_on_the_bfgs_matrix(x64):
    B0, s, y, g = _setup(1)
    Bs = B0 @ s
    B = B0 - np.outer(Bs, Bs) / (s @ Bs) + np.outer(y, y) / (y @ s)
    solve = lambda r: jnp.linalg.solve(B0, r)  # noqa: E731
    np.testing.assert_allclose(
        inverse_bfgs_direction(solve, g, s, y, True), -np.linalg.solve(B, g), rtol=1e-10
    )
    # without the low-rank term it is the plain shifted-Newton direction
    np.testing.assert_allclose(
        inverse_bfgs_direction(solve, g, s, y, False), -np.linalg.solve(B0, g), rtol=1e-10
    )


def test_rank2_gate_is_the_authors_curvature_test(x64):
    """regot's ``sinkhorn_splr.cpp``: ``low_rank = (i > 0) && (ys > eps * yy)``, ``eps = 1e-6``.
    On the convex dual the line search keeps yᵀs > 0, so a solve cannot show this: the gate is
    checked on pairs around its threshold, negative curvature included."""
    y = np.array([1.0, -2.0, 0.5])
    yy = y @ y
    s_unit = y / yy  # yᵀ(c s_unit) = c
    for c in (-1.0, 0.0, 0.5e-6 * yy, 0.999e-6 * yy, 1.001e-6 * yy, 1e-3, 2.0):
        s = c * s_unit + np.array([2.0, 1.0, 0.0])  # + a part orthogonal to y
        theirs = bool(y @ s > 1e-6 * yy)
        assert bool(rank2_gate(3, jnp.asarray(s), jnp.asarray(y))) == theirs, c
        assert not bool(rank2_gate(0, jnp.asarray(s), jnp.asarray(y)))


@pytest.mark.parametrize("n", [120, 260])
def test_density_threshold_keeps_the_top_entries_of_t_tilde(x64, n):
    # Section 3.1: T̃ ≥ threshold holds the ⌊ρ n(m-1)⌋ largest entries of T̃ (the last column of T
    # is not in T̃). n = 120: all of T̃ (14,280 entries), against a sort; n = 260: T̃ has 67,340
    # entries, beyond SAMPLE_CAP, so the count holds on the fixed sample (numpy draws it again).
    rng = np.random.default_rng(n)
    T = np.exp(3.0 * rng.normal(size=(n, n)) - 12.0)
    T[:, -1] = 1.0  # larger than every entry of T̃: counted, the mask would be wrong
    T_t = T[:, :-1].ravel()
    for density in (0.002, 0.01):
        t, _ = jax.jit(density_threshold)(jnp.asarray(T), density)
        if T_t.size <= SAMPLE_CAP:
            k = int(np.floor(density * T_t.size))
            top = np.zeros(T_t.size, bool)
            top[np.argsort(-T_t)[:k]] = True
            np.testing.assert_array_equal(T_t >= float(t), top)
        else:
            idx = np.sort(np.random.default_rng(0).choice(T_t.size, SAMPLE_CAP, replace=False))
            k = int(np.floor(density * SAMPLE_CAP))
            assert int(np.sum(T_t[idx] >= float(t))) == k
