"""``fit`` under ``jax.jit`` and ``jax.vmap`` gives the eager answer, and says in one line what
cannot be traced (λ by cross-validation, a traced iteration cap)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data.nard_synthetic import make_problem
from jaxlab.methods.nard import METHODS, fit, log_marginal_likelihood

SEEDS = (0, 1, 2)
OPTS = dict(max_iter=300, tol=1e-9, max_active=12)


@pytest.fixture(scope="module")
def problems():
    """Three datasets of one shape (seeds), uncentred, float64."""
    out = [make_problem(12, m=3, n=20, p=2, seed=s) for s in SEEDS]
    X = np.stack([p.X + 2.0 for p in out])
    Y = np.stack([p.Y - 1.0 for p in out])
    return X, Y


def _assert_same(traced, eager, i=None):
    pick = (lambda a: np.asarray(a)[i]) if i is not None else np.asarray
    n = eager.n_iter
    assert int(pick(traced.n_iter)) == n and bool(pick(traced.converged)) == eager.converged
    np.testing.assert_array_equal(pick(traced.selected), eager.selected)
    for name in ("coef", "gamma", "precision", "intercept"):
        np.testing.assert_allclose(pick(getattr(traced, name)), getattr(eager, name), 1e-6, 1e-9)
    trace = pick(traced.objective)
    assert trace.shape == (OPTS["max_iter"] + 1,) and np.all(np.isnan(trace[n + 1 :]))
    np.testing.assert_allclose(trace[: n + 1], eager.objective, rtol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_jit_and_vmap_over_datasets_give_the_eager_fits(problems, method, x64):
    # Before, the input checks converted the tracers to numpy: a TracerArrayConversionError.
    X, Y = problems
    run = functools.partial(fit, method=method, **OPTS)
    eager = [run(X[i], Y[i]) for i in range(len(SEEDS))]
    assert all(e.converged for e in eager)
    jitted = jax.jit(run)(X[0], Y[0])
    assert jitted.seconds is None and jitted.coef.dtype == jnp.float64
    _assert_same(jitted, eager[0])
    batched = jax.jit(jax.vmap(run))(X, Y)
    assert batched.coef.shape == (3, 3, 12)
    for i in range(len(SEEDS)):
        _assert_same(batched, eager[i], i)
    # The members stop on their own tests: the iteration counts differ, as eagerly.
    assert len({e.n_iter for e in eager}) > 1


def test_vmap_over_lam_with_static_options(problems, x64):
    X, Y = problems[0][0], problems[1][0]
    lams = jnp.asarray([0.01, 0.3])
    run = jax.jit(jax.vmap(lambda lam: fit(X, Y, lam=lam, **OPTS)))
    out = run(lams)
    for i, lam in enumerate((0.01, 0.3)):
        _assert_same(out, fit(X, Y, lam=lam, **OPTS), i)


def test_what_cannot_be_traced_says_so_in_one_line(problems):
    X, Y = problems[0][0], problems[1][0]
    with pytest.raises(ConfigError, match=r"lam='cv'.*cannot run under jax.jit") as err:
        jax.jit(lambda x, y: fit(x, y, lam="cv"))(X, Y)
    assert len(str(err.value).splitlines()) == 1
    with pytest.raises(ConfigError, match=r"max_iter sets array shapes.*static_argnames") as err:
        jax.jit(lambda x, y, k: fit(x, y, max_iter=k))(X, Y, 10)
    assert len(str(err.value).splitlines()) == 1


def test_a_derivative_through_fit_says_what_to_differentiate_instead(problems, x64):
    """JAX cannot reverse the solvers' while-loops (nor would the chosen support have a useful
    derivative): jax.grad / jax.jvp through fit is one line naming the differentiable evidence,
    and that suggestion works at the fit's hyperparameters."""
    X, Y = problems[0][0], problems[1][0]
    for args in (0, 1, 2):
        loss = lambda *xyl: jnp.sum(fit(*xyl[:2], lam=xyl[2], **OPTS).coef)
        match = r"nard.fit is not differentiable in X, Y or lam.*log_marginal_likelihood"
        with pytest.raises(ConfigError, match=match):
            jax.grad(loss, argnums=args)(X, Y, 0.1)
    with pytest.raises(ConfigError, match="nard.fit is not differentiable") as err:
        jax.jvp(lambda x: fit(x, Y, **OPTS).coef, (X,), (jnp.ones_like(X),))
    assert len(str(err.value).splitlines()) == 1  # (JAX may add a note of its own)
    res = fit(X, Y, lam=0.1, fit_intercept=False, **OPTS)
    grad = jax.jit(jax.grad(log_marginal_likelihood))(X, Y, res.alpha, res.precision)
    assert grad.shape == X.shape and np.all(np.isfinite(grad))
