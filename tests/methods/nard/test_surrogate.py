"""The surrogate methods: the bound never decreases, stays below the objective, and needs no d×d
matrix; ρ against numpy's largest eigenvalue; a non-finite start is never converged."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data.nard_synthetic import make_problem
from jaxlab.methods.nard.bound import lipschitz_constant, surrogate_stats
from jaxlab.methods.nard.model import objective, posterior, residual_cov, suff_stats
from jaxlab.methods.nard.sequential_surrogate import solve_sequential_surrogate
from jaxlab.methods.nard.solve import solver_inputs
from jaxlab.methods.nard.surrogate import solve_surrogate, surrogate_init, surrogate_step


@jax.jit
def _objective(gamma, precision, stats, lam):
    post = posterior(gamma, stats.gram, stats.cross)
    cov = residual_cov(post.sigma, stats.cross, stats.yy, stats.n)
    return objective(post.logdet_c, cov, precision, lam, stats.n)


def _true_objective(gamma, precision, stats, lam):
    return float(_objective(gamma, precision, stats, lam))


def test_surrogate_is_a_lower_bound_that_never_decreases(x64):
    pr = make_problem(40, m=5, n=30, p=4, seed=0)
    X, Y, lam = jnp.asarray(pr.X), jnp.asarray(pr.Y), jnp.asarray(0.05)
    stats, exact = surrogate_stats(X, Y), suff_stats(X, Y)
    state, value = surrogate_init(X, Y, stats, lam, jnp.ones(40))
    step = jax.jit(lambda s: surrogate_step(s, X, Y, stats, lam))
    values = [float(value)]
    for _ in range(60):
        state, value = step(state)
        values.append(float(value))
        assert values[-1] <= _true_objective(state.gamma, state.precision, exact, lam) + 1e-8
    assert np.all(np.diff(values) >= -1e-9 * np.abs(values[:-1]))
    assert values[-1] > values[0] + 10
    # At a fixed point the anchor is the exact posterior mean for the final α. The W₀-step
    # contracts linearly towards it (α no longer changes here): the largest error is ~3e-4 after
    # 60 steps, ~1e-6 after 100 and at round-off (~1e-16 of max|W| ≈ 1.5) from about 300 on, so
    # 400 steps and 1e-12 test the fixed point itself, not the speed of the approach.
    for _ in range(340):
        state, _ = step(state)
    np.testing.assert_allclose(
        np.asarray(state.w),
        np.asarray(posterior(state.gamma, exact.gram, exact.cross).mean),
        rtol=0,
        atol=1e-12,
    )


def test_sequential_surrogate_never_decreases_and_bounds(x64):
    pr = make_problem(40, m=5, n=30, p=4, seed=2)
    X, Y = jnp.asarray(pr.X), jnp.asarray(pr.Y)
    stats, exact = surrogate_stats(X, Y), suff_stats(X, Y)
    lam = jnp.asarray(0.05)
    out = solve_sequential_surrogate(X, stats, lam, max_iter=300, max_active=20, tol=1e-10)
    trace = np.asarray(out.objective)[: int(out.n_iter) + 1]
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))
    assert trace[-1] <= _true_objective(out.gamma, out.precision, exact, lam) + 1e-8


@pytest.mark.parametrize(("d", "n"), [(50, 20), (12, 30)])
def test_lipschitz_constant_is_the_largest_eigenvalue_of_xxt(x64, d, n):
    X = np.random.default_rng(d).standard_normal((d, n))
    ref = np.linalg.eigvalsh(X @ X.T)[-1]  # numpy, float64, on the d×d matrix itself
    rho = float(lipschitz_constant(jnp.asarray(X)))
    # Never below λ_max (the bound needs ρ ≥ λ_max), and above it only by the 1e-6 slack.
    assert ref <= rho <= ref * (1 + 1.001e-6)


def _shapes(jaxpr) -> set[tuple[int, ...]]:
    """Shapes of every value a jaxpr (and every jaxpr nested in it) creates."""
    out = set()
    for eqn in jaxpr.eqns:
        out |= {tuple(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, "shape")}
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    out |= _shapes(inner)
    return out


@pytest.mark.parametrize("method", ["surrogate", "sequential_surrogate"])
def test_surrogate_paths_never_form_a_d_by_d_matrix(x64, method):
    # d differs from every other size (m = 5, N = 23, P = 11), so a (d, d) shape can only be a
    # Gram matrix XXᵀ (or its eigendecomposition) over the features.
    d, m, n = 37, 5, 23
    X, Y = jnp.ones((d, n)), jnp.ones((m, n))
    lam = jnp.asarray(0.1)

    def run(X, Y):
        stats, gamma0 = solver_inputs(method)(X, Y)
        if method == "surrogate":
            return solve_surrogate(X, Y, stats, lam, gamma0, max_iter=3)
        return solve_sequential_surrogate(X, stats, lam, max_iter=3, max_active=11)

    shapes = _shapes(jax.make_jaxpr(run)(X, Y).jaxpr)
    assert (n, n) in shapes  # the jaxpr walk does see the N×N matrix ρ comes from
    assert not any(s[-2:] == (d, d) for s in shapes if len(s) >= 2)


def test_a_non_finite_start_is_never_converged(x64):
    # A starting variance so large that γ₀ρ overflows (as an all-zero feature row's γ₀ = N/(d·tiny)
    # did) makes g = −inf at the start. The old loop counted the step to a finite g as converged
    # (|g₁ − (−inf)| = inf ≤ tol·inf); the shared driver stops there, unconverged.
    pr = make_problem(12, m=3, n=20, p=2, seed=1)
    X, Y = jnp.asarray(pr.X), jnp.asarray(pr.Y)
    gamma0 = jnp.ones(12).at[4].set(1e308)
    out = solve_surrogate(X, Y, surrogate_stats(X, Y), jnp.asarray(0.1), gamma0, max_iter=50)
    assert not bool(out.converged)
    assert int(out.n_iter) == 0 and np.isneginf(float(out.objective[0]))
