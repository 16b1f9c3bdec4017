"""Sequential decisions: the closed-form objective change against brute force; monotonicity."""

import jax.numpy as jnp
import numpy as np
import scipy.stats

from jaxlab.methods.nard.active_set import (
    ActiveSet,
    apply_best,
    coordinate_gain,
    single_feature_change,
)
from jaxlab.methods.nard.model import suff_stats
from jaxlab.methods.nard.sequential import factors, solve_sequential


def _setup(d=8, m=3, n=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((d, n))
    Y = rng.standard_normal((m, 3)) @ X[:3] * 0.8 + rng.standard_normal((m, n))
    a = rng.standard_normal((m, m))
    prec = a @ a.T / m + np.eye(m)
    slots = np.array([0, 5, 2, d, d], np.int32)
    gam = np.array([0.7, 0.05, 1.3, 0.0, 0.0])
    return X, Y, prec, ActiveSet(jnp.asarray(slots), jnp.asarray(gam))


def _brute(X, Y, prec, gamma):
    """log p(Y) of the model itself (scipy's matrix normal, float64): the columns of Y are
    N(0, Ω⁻¹) with column covariance C = I + Xᵀ diag(γ) X (γ = 1/α; γ = 0 drops a feature)."""
    colcov = np.eye(X.shape[1]) + X.T @ np.diag(gamma) @ X
    mn = scipy.stats.matrix_normal(mean=np.zeros_like(Y), rowcov=np.linalg.inv(prec), colcov=colcov)
    return float(mn.logpdf(Y))


def test_closed_form_change_equals_brute_force_for_any_alpha(x64):
    X, Y, prec, active = _setup()
    d, m = X.shape[0], Y.shape[0]
    stats = suff_stats(jnp.asarray(X), jnp.asarray(Y))
    s, q, gamma = factors(active, stats)
    big_q = jnp.sum(q * (jnp.asarray(prec) @ q), axis=0)
    gamma = np.asarray(gamma)
    base = _brute(X, Y, prec, gamma)
    for new in (0.0, 0.01, 0.4, 2.5):  # 0 deletes an active feature
        closed = single_feature_change(big_q, s, jnp.full((d,), new), m) - single_feature_change(
            big_q, s, jnp.asarray(gamma), m
        )
        for i in range(d):  # active (0, 2, 5) and inactive features
            g = gamma.copy()
            g[i] = new
            np.testing.assert_allclose(
                float(closed[i]), _brute(X, Y, prec, g) - base, rtol=1e-8, atol=1e-9
            )
    # s_i and q_i by their definitions (module docstring of sequential.py): with C₋ᵢ the column
    # covariance without feature i, s_i = x_iᵀ C₋ᵢ⁻¹ x_i and q_i = Y C₋ᵢ⁻¹ x_i.
    for i in range(d):
        g = gamma.copy()
        g[i] = 0.0
        c_inv = np.linalg.inv(np.eye(X.shape[1]) + X.T @ np.diag(g) @ X)
        np.testing.assert_allclose(float(s[i]), X[i] @ c_inv @ X[i], rtol=1e-10)
        np.testing.assert_allclose(np.asarray(q[:, i]), Y @ c_inv @ X[i], rtol=1e-10)
    # γ* is the best single-feature value: no grid value beats it.
    g_star, gain = coordinate_gain(big_q, s, jnp.asarray(gamma), m)
    for i in range(d):
        for new in np.geomspace(1e-3, 1e2, 30):
            g = gamma.copy()
            g[i] = new
            assert _brute(X, Y, prec, g) - base <= float(gain[i]) + 1e-9


def test_apply_best_adds_the_feature_with_the_largest_gain():
    active = ActiveSet(jnp.asarray([3, 4], jnp.int32), jnp.asarray([0.5, 0.0]))
    g_star = jnp.asarray([0.0, 2.0, 1.0, 0.6])
    gain = jnp.asarray([0.0, 5.0, 7.0, 1.0])
    new, taken, i = apply_best(active, g_star, gain)
    assert int(i) == 2 and float(taken) == 7.0
    np.testing.assert_array_equal(np.asarray(new.slots), [3, 2])
    full = ActiveSet(jnp.asarray([3, 0], jnp.int32), jnp.asarray([0.5, 0.1]))
    new, _, i = apply_best(full, g_star, jnp.asarray([0.5, 5.0, 7.0, 1.0]))
    assert int(i) == 3  # no free slot: additions are skipped, the re-estimate of 3 is taken
    np.testing.assert_allclose(np.asarray(new.gamma), [0.6, 0.1])


def test_sequential_objective_never_decreases(x64):
    X, Y, _, _ = _setup(d=30, m=4, n=40, seed=3)
    out = solve_sequential(
        suff_stats(jnp.asarray(X), jnp.asarray(Y)),
        jnp.asarray(0.05),
        max_iter=200,
        max_active=15,
        tol=1e-9,
    )
    trace = np.asarray(out.objective)[: int(out.n_iter) + 1]
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))
    assert trace[-1] > trace[0]
