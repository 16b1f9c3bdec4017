"""The WARMPOT loss from plain arrays, against numpy float64 and POT's partial plans, and its label
checks (concrete labels outside [0, C) are one-line errors; under jit a flag reports them)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

from jaxlab.core.checks import ids_in_range
from jaxlab.core.errors import ConfigError
from jaxlab.data.digits_da import DATask
from jaxlab.methods.warmpot.config import WarmpotConfig
from jaxlab.methods.warmpot.loss import ground_cost, warmpot_loss
from jaxlab.methods.warmpot.train import train

S, T, F, C = 9, 7, 3, 4
NUMBERS = dict(mass=0.6, beta=0.5, eta1=1.0, eta2=0.5, eta3=0.3, entropy=0.1)


def _batch(dtype=np.float64):
    rng = np.random.default_rng(11)
    z_s, z_t = rng.normal(size=(S, F)), rng.normal(size=(T, F))
    logits_s, logits_t = rng.normal(size=(S, C)), rng.normal(size=(T, C))
    y_s = rng.integers(0, C, size=S)
    return (
        [x.astype(dtype) for x in (z_s, logits_s)]
        + [y_s]
        + [x.astype(dtype) for x in (z_t, logits_t)]
    )


def _log_softmax(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def _numpy_cost(z_s, z_t, logits_t, y_s):
    """Naram et al. Sec. 5: ``M_ij = η1 ‖z_i - z̃_j‖ + η2 (-log p(y_i | x̃_j))``."""
    dist = np.sqrt(((z_s[:, None] - z_t[None]) ** 2).sum(-1))
    return NUMBERS["eta1"] * dist - NUMBERS["eta2"] * _log_softmax(logits_t)[:, y_s].T


def _numpy_loss(z_s, logits_s, y_s, z_t, logits_t, plan, w):
    """The loss with the plan and the weights held fixed (numpy float64)."""
    cost = _numpy_cost(z_s, z_t, logits_t, y_s)
    ce = -_log_softmax(logits_s)[np.arange(S), y_s]
    logp_t = _log_softmax(logits_t)
    ent = -np.mean(np.sum(np.exp(logp_t) * logp_t, 1))
    return (w * ce).sum() / w.sum() + NUMBERS["eta3"] * (plan * cost).sum() + 0.1 * ent


def _pot_plan(cost, epsilon):
    import ot

    a, b = np.full(S, 1 / (NUMBERS["beta"] * S)), np.full(T, 1 / T)
    if epsilon is None:
        return ot.partial.partial_wasserstein(a, b, cost, m=NUMBERS["mass"])
    return ot.partial.entropic_partial_wasserstein(
        a, b, cost, reg=epsilon, m=NUMBERS["mass"], numItermax=100_000, stopThr=1e-15
    )


# (ε, source weights): WARMPOT's entropic and exact plans, and a baseline's own weights.
CASES = [(0.2, "plan"), (None, "plan"), (0.2, "given")]


@pytest.mark.parametrize("epsilon, weights", CASES)
def test_the_loss_and_its_gradient_against_numpy_and_pot(x64, epsilon, weights):
    batch = _batch()
    z_s, logits_s, y_s, z_t, logits_t = batch
    plan = _pot_plan(_numpy_cost(z_s, z_t, logits_t, y_s), epsilon)
    given = np.random.default_rng(3).random(S)
    w = plan.sum(1) / plan.sum() if weights == "plan" else given
    kw = dict(epsilon=epsilon, tol=1e-13, max_iter=50_000, **NUMBERS)
    if weights == "given":
        kw.update(plan_share=0.0, weights=jnp.asarray(given))

    def loss(*arrays):
        return warmpot_loss(*arrays[:2], jnp.asarray(y_s), *arrays[2:], **kw)

    arrays = [jnp.asarray(x) for x in (z_s, logits_s, z_t, logits_t)]
    grad_fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))
    (value, terms), grads = grad_fn(*arrays)
    assert value.dtype == jnp.float64 and bool(terms.plan.converged)
    np.testing.assert_allclose(terms.plan.matrix, plan, atol=1e-9)
    np.testing.assert_allclose(terms.weights, w, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(value, _numpy_loss(*batch, plan, w), rtol=1e-8)

    # The gradient with π and w fixed (the paper's and the authors' code), against central
    # differences of the numpy loss in every coordinate of the features and logits.
    for i, (name, g) in enumerate(zip(("z_s", "logits_s", "z_t", "logits_t"), grads, strict=True)):
        fd = np.zeros(g.shape)
        for idx in np.ndindex(g.shape):
            moved = [np.array(x) for x in (z_s, logits_s, z_t, logits_t)]
            h = 1e-6
            moved[i][idx] += h
            up = _numpy_loss(*moved[:2], y_s, *moved[2:], plan, w)
            moved[i][idx] -= 2 * h
            down = _numpy_loss(*moved[:2], y_s, *moved[2:], plan, w)
            fd[idx] = (up - down) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8, err_msg=name)


def test_float32_in_float32_out():
    z_s, logits_s, y_s, z_t, logits_t = _batch(np.float32)
    loss = jax.jit(lambda *a: warmpot_loss(*a, epsilon=0.2, tol=1e-5, max_iter=5000, **NUMBERS))
    value, terms = loss(z_s, logits_s, y_s, z_t, logits_t)
    assert value.dtype == jnp.float32 and terms.plan.matrix.dtype == jnp.float32
    assert bool(terms.labels_in_range)


@pytest.mark.parametrize("bad", [C, C + 3, -1])
def test_concrete_labels_outside_the_classes_are_one_line_errors(bad):
    z_s, logits_s, y_s, z_t, logits_t = _batch(np.float32)
    y_s = y_s.copy()
    y_s[2] = bad
    logp_t = jax.nn.log_softmax(jnp.asarray(logits_t))
    for call in (
        lambda: ground_cost(z_s, z_t, logp_t, y_s, 1.0, 0.5),
        lambda: warmpot_loss(z_s, logits_s, y_s, z_t, logits_t, epsilon=0.2, **NUMBERS),
    ):
        with pytest.raises(
            ConfigError,
            match=rf"y_s must lie in \[0, {C}\) \(the {C} classes of the logits\); got {bad} at",
        ) as err:
            call()
        assert "\n" not in str(err.value)


def test_under_jit_the_flag_reports_labels_outside_the_classes():
    z_s, logits_s, y_s, z_t, logits_t = _batch(np.float32)
    bad = y_s.copy()
    bad[0] = C  # JAX's gather would read class C - 1 for it

    @jax.jit
    def flag(y):
        return warmpot_loss(z_s, logits_s, y, z_t, logits_t, epsilon=0.2, **NUMBERS)[1]

    assert bool(flag(y_s).labels_in_range) and not bool(flag(bad).labels_in_range)

    def checked(y):  # the checkify form the module docstring offers
        checkify.check(ids_in_range(y, C), "labels outside [0, C)")
        return warmpot_loss(z_s, logits_s, y, z_t, logits_t, epsilon=0.2, **NUMBERS)[0]

    run = jax.jit(checkify.checkify(checked))
    run(jnp.asarray(y_s))[0].throw()  # valid labels: no error
    with pytest.raises(checkify.JaxRuntimeError, match="labels outside"):
        run(jnp.asarray(bad))[0].throw()


@pytest.mark.parametrize("backbone", ["frozen", "end_to_end"])
def test_training_refuses_a_task_with_a_label_outside_its_classes(backbone):
    rng = np.random.default_rng(0)
    xs, xt = rng.random((12, 64)).astype(np.float32), rng.random((8, 64)).astype(np.float32)
    ys = np.arange(12) % 3
    ys[5] = 3
    task = DATask(xs, ys, xt, np.zeros(8, int), num_classes=3, target_classes=(0, 1))
    with pytest.raises(
        ConfigError,
        match=r"task.ys must lie in \[0, 3\) \(the 3 classes of the logits\); got 3 at \[5\]",
    ):
        train(WarmpotConfig(steps=2, eval_every=1, batch_size=4, backbone=backbone), task)
