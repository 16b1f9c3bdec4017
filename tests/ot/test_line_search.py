"""Moré–Thuente search: strong-Wolfe steps, and never an increase of the objective."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.ot.dual import dual_value_grad
from jaxlab.ot.line_search import more_thuente


def _quartic(x):
    f = jnp.sum(x**4) + jnp.sum((x - 1.0) ** 2)
    return f, jax.grad(lambda z: jnp.sum(z**4) + jnp.sum((z - 1.0) ** 2))(x), None


def test_strong_wolfe_on_a_quartic(x64):
    fun = _quartic
    x = jnp.array([3.0, -2.0, 0.5])
    f0, g0, _ = fun(x)
    d = -g0
    search = jax.jit(lambda step0: more_thuente(fun, x, d, f0, g0, None, step0))
    for step0 in [1e-4, 1e-2, 1.0, 10.0]:
        ls = search(step0)
        f, g, _ = fun(x + ls.step * d)
        assert bool(ls.wolfe)
        assert f <= f0 + 1e-4 * ls.step * (g0 @ d)
        assert abs(g @ d) <= 0.9 * abs(g0 @ d)
        np.testing.assert_allclose(ls.value, f, rtol=1e-12)


def test_a_callers_evaluation_along_the_line_is_used_at_every_trial(x64):
    # ``along(t)`` replaces ``fun(x + t d)``: with the same values the search is the same, and
    # it evaluates every trial through ``along``, the last one at the step it returns.
    fun = _quartic
    x = jnp.array([3.0, -2.0, 0.5])
    f0, g0, _ = fun(x)
    d = -g0
    trials = []

    def along(t):
        jax.debug.callback(trials.append, t)
        return fun(x + t * d)

    plain = more_thuente(fun, x, d, f0, g0, None, 1.0)
    hooked = more_thuente(fun, x, d, f0, g0, None, 1.0, along=along)
    jax.effects_barrier()
    assert float(hooked.step) == float(plain.step) and int(hooked.n_evals) == int(plain.n_evals)
    assert len(trials) == int(plain.n_evals) and float(trials[-1]) == float(plain.step)


@pytest.mark.parametrize("seed", range(2))
def test_dual_objective_never_increases(x64, seed):
    rng = np.random.default_rng(seed)
    n, m, eps = 10, 8, 0.01
    cost = jnp.asarray(rng.random((n, m)))
    a = jnp.full(n, 1.0 / n)
    b = jnp.full(m, 1.0 / m)

    def fun(x):
        return dual_value_grad(x, cost, a, b, eps)

    x = jnp.asarray(rng.normal(size=n + m - 1) * 0.01)
    f0, g0, T0 = fun(x)
    search = jax.jit(lambda *args: more_thuente(fun, *args, 1.0))
    for _ in range(5):
        d = -g0 * jnp.asarray(rng.uniform(0.1, 10.0, size=g0.shape))  # a descent direction
        ls = search(x, d, f0, g0, T0)
        assert ls.value <= f0
        x = x + ls.step * d
        f0, g0, T0 = fun(x)
        np.testing.assert_allclose(f0, ls.value, rtol=1e-12)


@pytest.mark.parametrize("max_evals", [1, 2, 30])
def test_returned_aux_belongs_to_the_returned_step(x64, max_evals):
    """The aux (here the trial point itself) is that of the returned step, also when the budget
    runs out and the search falls back to the best step seen (the aux is then evaluated again)."""

    def fun(z):
        return 0.5 * z @ z, z, z

    x, d = jnp.array([-1.0, 2.0]), jnp.array([1.0, -2.0])
    f0, g0, aux0 = fun(x)
    search = jax.jit(lambda s0: more_thuente(fun, x, d, f0, g0, aux0, s0, max_evals=max_evals))
    for step0 in [1e-3, 1e-2, 3.0]:
        ls = search(step0)
        np.testing.assert_allclose(ls.aux, x + ls.step * d, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(ls.value, fun(x + ls.step * d)[0], rtol=1e-12)


# The six test functions of Moré & Thuente (1994), Section 5 (Tables 1-6), with their (μ, η) =
# (c₁, c₂); each returns (φ(α), φ'(α)). Written from the paper.
def _mt_1(a, b=2.0):
    return -a / (a * a + b), (a * a - b) / (a * a + b) ** 2


def _mt_2(a, b=0.004):
    return (a + b) ** 5 - 2 * (a + b) ** 4, 5 * (a + b) ** 4 - 8 * (a + b) ** 3


def _mt_3(a, b=0.01, k=39):
    if a <= 1 - b:
        p, dp = 1 - a, -1.0
    elif a >= 1 + b:
        p, dp = a - 1, 1.0
    else:
        p, dp = (a - 1) ** 2 / (2 * b) + b / 2, (a - 1) / b
    c = 2 * (1 - b) / (k * math.pi)
    return p + c * math.sin(k * math.pi * a / 2), dp + (1 - b) * math.cos(k * math.pi * a / 2)


def _mt_yanai(b1, b2):
    gam = lambda b: math.sqrt(1 + b * b) - b  # noqa: E731

    def phi(a):
        u, v = math.sqrt((1 - a) ** 2 + b2 * b2), math.sqrt(a * a + b1 * b1)
        return gam(b1) * u + gam(b2) * v, -gam(b1) * (1 - a) / u + gam(b2) * a / v

    return phi


MT_CASES = {
    "1": (_mt_1, 1e-3, 0.1),
    "2": (_mt_2, 0.1, 0.1),
    "3": (_mt_3, 0.1, 0.1),
    "4": (_mt_yanai(1e-3, 1e-3), 1e-3, 1e-3),
    "5": (_mt_yanai(1e-2, 1e-3), 1e-3, 1e-3),
    "6": (_mt_yanai(1e-3, 1e-2), 1e-3, 1e-3),
}


def test_trial_steps_are_minpack_dcsrch_on_the_papers_functions(x64):
    """Every trial step, and the accepted one, is that of MINPACK-2's ``dcsrch`` (Moré and
    Thuente's own code, as ported in ``scipy.optimize._dcsrch``) on the paper's six test
    functions, each from its four starts α₀ ∈ {1e-3, 1e-1, 1e1, 1e3}."""
    dcsrch = pytest.importorskip("scipy.optimize._dcsrch").DCSRCH
    names = sorted(MT_CASES)
    ours = []

    def host_phi(k, a):  # the jitted search calls back here at every trial
        ours.append(float(a))
        return np.asarray(MT_CASES[names[int(k)]][0](float(a)), np.float64)

    def fun(k, x):
        shape = jax.ShapeDtypeStruct((2,), jnp.float64)
        v = jax.pure_callback(host_phi, shape, k, x[0])
        return v[0], v[1:], None

    @jax.jit
    def search(k, f0, d0, step0, c1, c2):
        return more_thuente(
            lambda x: fun(k, x), jnp.zeros(1), jnp.ones(1), f0, d0[None], None, step0, c1=c1, c2=c2
        )

    for k, name in enumerate(names):
        fn, mu, eta = MT_CASES[name]
        f0, d0 = fn(0.0)
        for step0 in (1e-3, 1e-1, 1e1, 1e3):
            theirs = []

            def phi(a, trials=theirs, fn=fn):
                trials.append(a)
                return fn(a)[0]

            step, *_, task = dcsrch(phi, lambda a, fn=fn: fn(a)[1], mu, eta, 1e-12, 0.0, 1e10)(
                step0, phi0=f0, derphi0=d0, maxiter=30
            )
            assert task.startswith(b"CONV")
            ours.clear()
            ls = search(k, f0, d0, step0, mu, eta)
            where = f"function {name}, α₀ = {step0}"
            np.testing.assert_allclose(ours, theirs, rtol=1e-10, err_msg=where)
            assert bool(ls.wolfe) and int(ls.n_evals) == len(theirs), where
            np.testing.assert_allclose(float(ls.step), step, rtol=1e-12, err_msg=where)
