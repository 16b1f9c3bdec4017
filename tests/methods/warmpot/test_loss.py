"""WARMPOT's weights, loss gradient and mass schedule (the plan from jaxlab.ot.partial)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.methods.warmpot.config import WarmpotConfig
from jaxlab.methods.warmpot.loss import (
    batch_loss,
    capacity_share,
    ground_cost,
    mass_schedule,
    pada_class_weights,
    plan_weights,
    warmpot_loss,
)
from jaxlab.methods.warmpot.model import Network
from jaxlab.methods.warmpot.train import knobs_of


def _blobs(n_per, classes, seed, shift=0.0):
    rng = np.random.default_rng(seed)
    centres = 4.0 * np.eye(3)[:, :2] + shift
    x = np.concatenate([centres[c] + 0.3 * rng.standard_normal((n_per, 2)) for c in classes])
    return x, np.repeat(np.asarray(classes), n_per)


def test_weights_are_uniform_at_full_mass(x64):
    rng = np.random.default_rng(0)
    cost = jnp.asarray(rng.random((16, 16)))
    _, w = plan_weights(cost, 1.0, 1.0, 0.05, tol=1e-12, max_iter=10_000)
    np.testing.assert_allclose(w, np.full(16, 1 / 16), atol=1e-12)


@pytest.mark.parametrize("epsilon", [0.1, None])
def test_outlier_class_weight_falls_from_a_third_to_zero(x64, epsilon):
    # 3 source classes, 2 in the target; cost = feature distance (f = identity).
    xs, ys = _blobs(20, (0, 1, 2), 1)
    xt, _ = _blobs(30, (0, 1), 2, shift=0.2)
    cost = jnp.asarray(np.linalg.norm(xs[:, None] - xt[None], axis=-1))
    shares = {}
    for beta in (1.0, 2 / 3):
        if epsilon is None:
            from jaxlab.ot.partial import partial_ot

            a = np.full(60, 1 / (beta * 60))
            w = partial_ot(a, np.full(60, 1 / 60), cost, mass=1.0).matrix.sum(1)
        else:
            w = plan_weights(cost, 1.0, beta, epsilon, tol=1e-10, max_iter=20_000)[1]
        shares[beta] = float(np.sum(np.asarray(w)[ys == 2]) / np.sum(w))
    np.testing.assert_allclose(shares[1.0], 1 / 3, atol=1e-8)
    assert shares[2 / 3] < 1e-3


def test_loss_gradient_is_autodiff_with_the_plan_fixed():
    cfg = WarmpotConfig(method="warmpot", alpha=0.6, beta=0.5, epsilon=0.5, entropy=0.1)
    knobs, _ = knobs_of(cfg)
    model = Network(5, 8, 4, 3, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(3)
    x_s, x_t = jnp.asarray(rng.random((6, 5)), jnp.float32), jnp.asarray(rng.random((7, 5)))
    x_t = x_t.astype(jnp.float32)
    y_s = jnp.asarray([0, 1, 2, 0, 1, 2])
    graphdef, params = nnx.split(model, nnx.Param)
    kw = dict(tol=1e-6, max_iter=5000)  # float32: 1e-7 is below its resolution (refused)

    @jax.jit  # eager, every op of the solver's loops would dispatch on its own (seconds)
    def loss(p):
        return batch_loss(nnx.merge(graphdef, p), x_s, y_s, x_t, knobs, 0.6, jnp.ones(3), **kw)

    _, aux = loss(params)

    @jax.jit
    def plan(p):
        m0 = nnx.merge(graphdef, p)
        z_s, z_t = m0.features(x_s), m0.features(x_t)
        cost = ground_cost(z_s, z_t, jax.nn.log_softmax(m0.classify(z_t)), y_s, cfg.eta1, cfg.eta2)
        return plan_weights(cost, 0.6, 0.5, 0.5, **kw)[0].matrix

    pi = plan(params)
    w = pi.sum(1) / pi.sum()

    def fixed(p):  # the same loss written out with π and w as constants
        m = nnx.merge(graphdef, p)
        zs, zt = m.features(x_s), m.features(x_t)
        logits_s, logp_t = m.classify(zs), jax.nn.log_softmax(m.classify(zt))
        ce = -jnp.take_along_axis(jax.nn.log_softmax(logits_s), y_s[:, None], 1)[:, 0]
        cost = ground_cost(zs, zt, logp_t, y_s, cfg.eta1, cfg.eta2)
        ent = -jnp.mean(jnp.sum(jnp.exp(logp_t) * logp_t, 1))
        return jnp.sum(w * ce) + cfg.eta3 * jnp.sum(pi * cost) + cfg.entropy * ent

    np.testing.assert_allclose(aux["w"], w, atol=1e-6)
    g_ours = jax.jit(jax.grad(lambda p: loss(p)[0]))(params)
    g_ref = jax.jit(jax.grad(fixed))(params)
    for a, b in zip(jax.tree.leaves(g_ours), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_mass_schedule():
    alpha = 0.8
    values = [float(mass_schedule(t, alpha, 100)) for t in (0, 50, 100, 500)]
    np.testing.assert_allclose(values, [0.01, 0.01 + 0.79 * 0.5, 0.8, 0.8], rtol=1e-6)
    assert float(mass_schedule(0, alpha, 0)) == pytest.approx(alpha)
    assert np.all(np.diff([float(mass_schedule(t, alpha, 100)) for t in range(0, 120, 7)]) >= 0)


def _authors_masses(mass: float, mass_increase_i: int, iterations: int) -> np.ndarray:
    """The authors' ``warmpot.py`` training loop's ``adap_mass``, transcribed in float64."""
    adap_limit = -1 if mass_increase_i <= 1 else mass_increase_i
    out = []
    for i in range(iterations + 1):
        out.append(i * mass / adap_limit + 0.01 if i <= adap_limit else mass)
    return np.asarray(out)


@pytest.mark.parametrize("ramp", [0, 1, 7, 100])
def test_authors_mass_ramp_is_their_loop(ramp):
    ours = jax.vmap(lambda t: mass_schedule(t, 0.5, ramp, "authors"))(jnp.arange(131))
    np.testing.assert_allclose(ours, _authors_masses(0.5, ramp, 130), rtol=1e-6)


def test_unknown_mass_ramp_is_a_config_error():
    with pytest.raises(ConfigError, match="mass ramp 'cosine'"):
        mass_schedule(0, 0.5, 10, "cosine")


def test_methods_differ_only_in_their_knobs():
    base = WarmpotConfig(alpha=0.7, beta=0.4)
    k = {m: knobs_of(WarmpotConfig(method=m, alpha=0.7, beta=0.4))[0] for m in
         ("warmpot", "source_only", "full_ot", "partial_uniform", "pada", "mpot")}  # fmt: skip
    assert float(k["source_only"].eta3) == 0
    assert float(k["warmpot"].eta3) == pytest.approx(base.eta3)
    assert (float(k["full_ot"].alpha), float(k["full_ot"].beta)) == (1.0, 1.0)
    assert float(k["partial_uniform"].alpha) == pytest.approx(0.7)
    assert (float(k["mpot"].alpha), float(k["mpot"].beta)) == (pytest.approx(0.7), 1.0)
    assert [int(np.argmax(k[m].mode)) for m in ("warmpot", "partial_uniform", "pada")] == [0, 1, 2]


@pytest.mark.parametrize(
    "kw",
    [
        {"alpha": 1.5},
        {"beta": 0.0},
        {"method": "dann"},
        {"steps": 10, "eval_every": 3},
        {"optimizer": "rmsprop"},
        {"sampler": "stratified"},
        {"backbone": "resnet"},
        {"pretrain_steps": 0},
        {"head_lr_mult": 0.0},
        {"momentum": 1.0},
    ],
)
def test_bad_config_is_one_line(kw):
    with pytest.raises(ConfigError) as err:
        WarmpotConfig(**kw)
    assert len(str(err.value).splitlines()) == 1


# (α, β, ε): the authors' α = 0.8, β = 0.35 and a tighter one; caps 1/(β n_s) below 1/n_s·(1/α).
PARTIAL = [(0.8, 0.35, 0.05), (0.5, 0.6, 0.2), (0.8, 0.35, None)]


@pytest.mark.parametrize("alpha, beta, epsilon", PARTIAL)
def test_weights_below_full_mass_are_the_row_sums_of_pots_plan(x64, alpha, beta, epsilon):
    # WARMPOT's weights at α < 1 against POT's partial plan with the same a, b and mass (paper
    # Sec. 5: a = 1/(β n_s), b = 1/n_t, mass α); α = 1 alone cannot tell the mass from min(1, 1/β).
    import ot

    rng = np.random.default_rng(7)
    n_s, n_t = 14, 11
    cost = rng.random((n_s, n_t))
    a, b = np.full(n_s, 1 / (beta * n_s)), np.full(n_t, 1 / n_t)
    if epsilon is None:
        ref = ot.partial.partial_wasserstein(a, b, cost, m=alpha)
        out, w = plan_weights(jnp.asarray(cost), alpha, beta, None, tol=0.0, max_iter=0)
    else:
        ref = ot.partial.entropic_partial_wasserstein(
            a, b, cost, reg=epsilon, m=alpha, numItermax=100_000, stopThr=1e-15
        )
        out, w = plan_weights(jnp.asarray(cost), alpha, beta, epsilon, tol=1e-12, max_iter=20_000)
    assert bool(out.converged)
    np.testing.assert_allclose(w, ref.sum(1), atol=1e-9)
    np.testing.assert_allclose(np.sum(w), alpha, rtol=1e-9)


def test_capacity_share_counts_the_rows_at_their_cap():
    beta, n_s = 0.5, 8
    cap = 1 / (beta * n_s)
    w = np.asarray([cap, cap * (1 - 1e-4), cap * 0.98, 0.0, cap, 0.1 * cap, cap * 0.9990, cap])
    expected = np.mean(w >= (1 - 1e-3) * cap)  # 5 of 8: the exact caps and those within 0.1%
    assert expected == 5 / 8
    np.testing.assert_allclose(capacity_share(jnp.asarray(w), beta), expected)
    np.testing.assert_allclose(capacity_share(jnp.asarray(w), beta, rtol=0.05), 6 / 8)


def test_capacity_share_of_a_binding_plan(x64):
    # Three source points near the only target point, five far: at mass 3/(β n_s) exactly the near
    # three are filled to their cap (exact plan), so the share is 3/8.
    beta, n_s = 0.5, 8
    cost = np.concatenate([np.full((3, 1), 0.1), np.full((5, 1), 2.0)])
    cap = 1 / (beta * n_s)
    out, w = plan_weights(jnp.asarray(cost), 3 * cap, beta, None, tol=0.0, max_iter=0)
    np.testing.assert_allclose(w, [cap] * 3 + [0.0] * 5, atol=1e-12)
    np.testing.assert_allclose(capacity_share(w, beta), 3 / 8)


def test_ground_cost_is_the_authors_euclidean_plus_label_cost(x64):
    """The authors' cost (JayD2106/WARMPOT ``warmpot.py``) in float64 numpy:
    ``M = η1 torch.cdist(g_xs, g_xt) + η2 (-one_hot(ys) @ log_softmax(f_g_xt).T)``; ``cdist`` is the
    Euclidean distance (p = 2), not its square. Also its use in the loss: ``η3 Σ π M``.

    Features of spread ~3, so the distances are far from 1 and a squared distance shows.
    """
    eta1, eta2, eta3 = 0.3, 0.7, 2.0
    rng = np.random.default_rng(5)
    n_s, n_t, f, c = 6, 5, 4, 3
    z_s, z_t = 3 * rng.standard_normal((n_s, f)), 3 * rng.standard_normal((n_t, f))
    logits_t, logits_s = rng.standard_normal((n_t, c)), rng.standard_normal((n_s, c))
    y_s = np.array([0, 1, 2, 0, 2, 1])
    dist = np.array([[math.sqrt(sum((p - q) ** 2)) for q in z_t] for p in z_s])
    log_pred = logits_t - logits_t.max(1, keepdims=True)
    log_pred = log_pred - np.log(np.exp(log_pred).sum(1, keepdims=True))
    want = eta1 * dist + eta2 * (-np.eye(c)[y_s] @ log_pred.T)

    got = ground_cost(
        jnp.asarray(z_s), jnp.asarray(z_t), jnp.asarray(log_pred), jnp.asarray(y_s), eta1, eta2
    )
    np.testing.assert_allclose(got, want, rtol=1e-12)
    _, terms = warmpot_loss(
        jnp.asarray(z_s), jnp.asarray(logits_s), jnp.asarray(y_s), jnp.asarray(z_t),
        jnp.asarray(logits_t), mass=0.6, beta=0.5, epsilon=0.5, eta1=eta1, eta2=eta2, eta3=eta3,
        tol=1e-12, max_iter=20_000,
    )  # fmt: skip
    np.testing.assert_allclose(terms.transport, eta3 * np.sum(np.asarray(terms.plan.matrix) * want))


def test_pada_class_weights_are_eq_5_of_pada_averaged_over_batches():
    """PADA (Cao et al. 2018, Eq. 5): γ = mean target softmax, γ / max γ; with momentum m the
    weights are the running average m w + (1 − m) γ."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 16, 5))  # three target batches of 16 points, 5 classes
    w_ref, w = np.ones(5), jnp.ones(5)
    for batch in logits:
        probs = np.exp(batch - batch.max(1, keepdims=True))
        gamma = (probs / probs.sum(1, keepdims=True)).mean(0)
        w_ref = 0.7 * w_ref + 0.3 * gamma / gamma.max()
        w = pada_class_weights(w, jnp.asarray(gamma, jnp.float32), 0.7)
    np.testing.assert_allclose(w, w_ref, rtol=1e-6)
    np.testing.assert_allclose(pada_class_weights(w, jnp.asarray(gamma), 0.0), gamma / gamma.max())
