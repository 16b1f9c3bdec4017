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


class _MatrixNormalPrior:
    """log MN(W; 0, Ω⁻¹, diag γ) = −(md/2) log 2π + (d/2) log|Ω| − (m/2) Σ log γ
    − ½ tr(Ω W Γ⁻¹ Wᵀ)."""

    def __init__(self, prec, gamma):
        self.prec, self.gamma = prec, gamma
        m, d = prec.shape[0], gamma.shape[0]
        self.const = -0.5 * m * d * np.log(2 * np.pi) + 0.5 * d * np.linalg.slogdet(prec)[1]
        self.const -= 0.5 * m * np.sum(np.log(gamma))

    def logpdf(self, W):
        return self.const - 0.5 * np.trace(self.prec @ (W / self.gamma) @ W.T)


def _integrand_quadratic(X, Y, w0, gamma, prec, rho):
    """log of [the minorised likelihood × the prior] as ``ℓ(w) = ℓ₀ + bᵀw − ½ wᵀAw`` over
    w = vec(W), read off by polarisation from pointwise evaluations (exact for a quadratic).

    The minorant is Sec. 4.3's isotropic quadratic around W₀ (the inequality of
    :mod:`jaxlab.methods.nard.surrogate`), the prior the matrix normal MN(0, Ω⁻¹, diag γ) (its
    density written out; checked against scipy's in the bound test).
    """
    m, d = w0.shape
    n = X.shape[1]
    r0 = Y - w0 @ X
    _, logdet = np.linalg.slogdet(prec)
    prior = _MatrixNormalPrior(prec, gamma)

    def ell(w):
        W = w.reshape((m, d), order="F")
        dw = W - w0
        q = np.trace(prec @ (r0 @ r0.T - 2 * r0 @ X.T @ dw.T + rho * dw @ dw.T))
        return -0.5 * m * n * np.log(2 * np.pi) + 0.5 * n * logdet - 0.5 * q + prior.logpdf(W)

    k = m * d
    e = np.eye(k)
    l0, l1 = ell(np.zeros(k)), np.array([ell(v) for v in e])
    lm1 = np.array([ell(-v) for v in e])
    hess = np.array([[ell(e[i] + e[j]) - l1[i] - l1[j] + l0 for j in range(k)] for i in range(k)])
    return l0, (l1 - lm1) / 2, -hess


def _numpy_bound(X, Y, w0, gamma, prec, rho, lam):
    """g = log ∫ minorant × prior dW − (N/2) λ ‖Ω‖₁,off, the Gaussian integral done densely."""
    l0, b, A = _integrand_quadratic(X, Y, w0, gamma, prec, rho)
    _, logdet_a = np.linalg.slogdet(A)
    log_int = l0 + 0.5 * b @ np.linalg.solve(A, b) + 0.5 * len(b) * np.log(2 * np.pi)
    off = np.abs(prec).sum() - np.abs(np.diag(prec)).sum()
    return log_int - 0.5 * logdet_a - 0.5 * X.shape[1] * lam * off


def _small_surrogate_problem():
    rng = np.random.default_rng(8)
    d, m, n = 3, 2, 6
    X, Y = rng.standard_normal((d, n)), rng.standard_normal((m, n))
    w0 = rng.standard_normal((m, d))
    a = rng.standard_normal((m, m))
    prec = a @ a.T + m * np.eye(m)
    rho = 1.3 * np.linalg.eigvalsh(X @ X.T)[-1]
    return X, Y, w0, prec, rho


def test_bound_is_the_gaussian_integral_of_the_minorised_likelihood(x64):
    """Sec. 4.3: g(α, Ω; W₀) (``surrogate_cov`` + ``surrogate_value``) against the dense float64
    integral of the isotropic minorant of the likelihood against the prior, at an arbitrary W₀."""
    from jaxlab.methods.nard.bound import surrogate_cov, surrogate_value

    X, Y, w0, prec, rho = _small_surrogate_problem()
    gamma, lam, n = np.array([0.7, 2.0, 0.05]), 0.15, X.shape[1]
    import scipy.stats

    mn = scipy.stats.matrix_normal(rowcov=np.linalg.inv(prec), colcov=np.diag(gamma))
    np.testing.assert_allclose(_MatrixNormalPrior(prec, gamma).logpdf(w0), mn.logpdf(w0))
    r0 = Y - w0 @ X
    b = r0 @ X.T + rho * w0
    c = gamma / (1 + gamma * rho)
    value = jax.jit(
        lambda cov_args, g, p: surrogate_value(g, surrogate_cov(*cov_args), p, lam, n, rho)
    )
    got = value(tuple(map(jnp.asarray, (r0 @ r0.T, b, w0, b, c, rho, float(n)))), gamma, prec)
    np.testing.assert_allclose(
        float(got), _numpy_bound(X, Y, w0, gamma, prec, rho, lam), rtol=1e-10
    )


def test_surrogate_alpha_and_anchor_steps_maximise_the_numpy_bound(x64):
    """The α-step's closed form (Tipping–Faul with s = ρ) is each γ_i's argmax of the numpy g (a
    bounded 1-D search per feature, pruned ones at 0), and the W₀-step is the mode A⁻¹b of the
    integrand at the new γ (minorant's minimiser plus prior)."""
    import scipy.optimize

    from jaxlab.methods.nard.surrogate import SurrogateState, surrogate_step

    X, Y, w0, prec, rho = _small_surrogate_problem()
    Y = Y + 2.0 * w0[:, :1] @ X[:1]  # feature 0 strongly relevant: one interior optimum
    w0, prec = 0.1 * w0, 0.05 * prec  # small Q̃_i = b_iᵀΩb_i for the others: pruned
    m, d = w0.shape
    r0 = Y - w0 @ X
    b = r0 @ X.T + rho * w0
    stats = surrogate_stats(jnp.asarray(X), jnp.asarray(Y))
    state = SurrogateState(*map(jnp.asarray, (np.ones(d), prec, w0, r0, b)))
    step = jax.jit(surrogate_step)  # one compilation, not one per eager op
    new, _ = step(state, jnp.asarray(X), jnp.asarray(Y), stats._replace(rho=rho), 0.1)
    got = np.asarray(new.gamma)
    want = np.ones(d)
    for i in range(d):

        def neg_g(log_g, i=i):
            gam = want.copy()
            gam[i] = np.exp(log_g)
            return -_numpy_bound(X, Y, w0, gam, prec, rho, 0.0)

        opts = {"xatol": 1e-10}
        res = scipy.optimize.minimize_scalar(neg_g, bounds=(-25, 8), method="bounded", options=opts)
        want[i] = np.exp(res.x) if np.exp(res.x) > 1e-8 else 0.0
    assert (want == 0).any() and (want > 0).any()  # both branches of the rule
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)
    # W₀-step, at the γ the step chose (Ω does not enter the mode: it factors out of A and b).
    _, bvec, A = _integrand_quadratic(X, Y, w0, np.maximum(got, 1e-300), prec, rho)
    mode = np.linalg.solve(A, bvec).reshape((m, d), order="F")
    np.testing.assert_allclose(np.asarray(new.w), mode, rtol=1e-8, atol=1e-10)
