"""WARMPOT's training recipe: the authors' schedule and optimizer, the balanced sampler, the
frozen features every method shares, and per-sample weights on a subgroup of a shared class."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxlab.data.digits_da import DATask
from jaxlab.methods.warmpot.config import WarmpotConfig
from jaxlab.methods.warmpot.loss import plan_weights
from jaxlab.methods.warmpot.model import Head, Network
from jaxlab.methods.warmpot.train import (
    _by_class,
    _optimizer,
    _source_batch,
    frozen_features,
    inv_schedule,
    make_optimizer,
    train,
)


def test_inv_schedule_is_the_authors_formula():
    # lr (1 + γ t)^(-0.75) with γ = 0.001 over 5,000 iterations (their inv_lr_scheduler).
    sched = inv_schedule(0.01, 5.0, 5000)
    for t in (0, 1, 700, 5000):
        np.testing.assert_allclose(float(sched(t)), 0.01 * (1 + 0.001 * t) ** -0.75, rtol=1e-6)


def test_sgd_nesterov_with_weight_decay_and_head_lr_is_torchs_update():
    # Three steps against torch.optim.SGD(momentum=0.9, nesterov=True, weight_decay=5e-4) written
    # out in numpy, the lr set by the inv schedule before each step; the head at 10x the lr.
    lr, mu, wd, decay, steps = 0.1, 0.9, 5e-4, 5.0, 10
    tx = make_optimizer("sgd", lr, "inv", decay, steps, mu, wd, 10.0, ("g",))
    rng = np.random.default_rng(0)
    params = {
        "f1": {"w": jnp.asarray(rng.standard_normal(3))},
        "g": {"w": jnp.asarray(rng.standard_normal(2))},
    }
    ref = {k: np.asarray(v["w"], np.float64) for k, v in params.items()}
    buf = {k: None for k in ref}
    state = tx.init(params)
    for t in range(3):
        grads = {k: {"w": jnp.asarray(rng.standard_normal(v.shape))} for k, v in ref.items()}
        updates, state = tx.update(grads, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
        for k in ref:
            d_p = np.asarray(grads[k]["w"], np.float64) + wd * ref[k]
            buf[k] = d_p if buf[k] is None else mu * buf[k] + d_p
            lr_t = lr * (10.0 if k == "g" else 1.0) * (1 + decay / steps * t) ** -0.75
            ref[k] = ref[k] - lr_t * (d_p + mu * buf[k])
        for k in ref:
            np.testing.assert_allclose(params[k]["w"], ref[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backbone", ["frozen", "end_to_end"])
def test_the_default_optimizer_decays_every_parameter_at_the_authors_1e3(backbone):
    # The authors' SGD (warmpot.py, Office-Home): lr 1e-3, momentum 0.9, Nesterov; their
    # inv_lr_scheduler sets each group's weight_decay to 5e-4 * decay_mult and lr to
    # lr * lr_mult before every step; network.py's groups: backbone (lr_mult 1, decay_mult 2),
    # bottleneck and fc (lr_mult 10, decay_mult 2). torch.optim.SGD's documented step, per
    # parameter: d = g + wd p; b = d (first step) or mu b + d; d = d + mu b (Nesterov); p -= lr d.
    cfg = WarmpotConfig(backbone=backbone)
    lr, mu, wd, gamma = 1e-3, 0.9, 5e-4 * 2, cfg.inv_decay / cfg.steps
    if backbone == "frozen":  # a fresh bottleneck + classifier on the frozen backbone's output
        model, lr_mult = Head(6, 4, 3, rngs=nnx.Rngs(0)), {"f1": 10.0, "g": 10.0}
    else:  # the MLP is the backbone (1x) and g the fresh classifier (10x)
        model, lr_mult = Network(6, 5, 4, 3, rngs=nnx.Rngs(0)), {"f1": 1.0, "f2": 1.0, "g": 10.0}
    _, params = nnx.split(model, nnx.Param)
    rng = np.random.default_rng(0)
    # Every leaf, biases included, away from 0, so that the decay of each shows in its step.
    params = jax.tree.map(lambda p: rng.standard_normal(p.shape).astype(np.float32), params)
    tx = _optimizer(cfg, tuple(k for k, m in lr_mult.items() if m == 10.0))
    state = tx.init(params)

    def leaves(tree):
        flat = jax.tree_util.tree_leaves_with_path(tree)
        return {jax.tree_util.keystr(k): np.asarray(v, np.float64) for k, v in flat}

    ref, buf = leaves(params), {}
    module = {k: k.split("'")[1] for k in ref}  # the top-level module of each leaf
    assert set(module.values()) == set(lr_mult) and sum("bias" in k for k in ref) == len(lr_mult)
    for t in range(3):
        # Gradients of the size of wd * p, so the decay is half of each step.
        grads = jax.tree.map(lambda p: 1e-3 * rng.standard_normal(p.shape).astype(p.dtype), params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        got, g = leaves(updates), leaves(grads)
        for k in ref:
            d = g[k] + wd * ref[k]
            buf[k] = d if t == 0 else mu * buf[k] + d
            step = lr * lr_mult[module[k]] * (1 + gamma * t) ** -0.75 * (d + mu * buf[k])
            np.testing.assert_allclose(got[k], -step, rtol=1e-4, atol=1e-12, err_msg=k)
            ref[k] = ref[k] - step


def test_the_balanced_sampler_draws_every_class_equally_often():
    ys = np.concatenate([np.zeros(900), np.ones(60), np.full(30, 2), np.full(10, 3)]).astype(int)
    by_class, counts = _by_class(ys, 4)
    draw = jax.jit(lambda k: _source_batch(k, len(ys), by_class, counts, 10, True))
    seen = np.zeros(len(ys))
    for i in range(200):
        idx = np.asarray(draw(jax.random.key(i)))
        per_class = np.bincount(ys[idx], minlength=4)
        assert sorted(per_class) == [2, 2, 3, 3]  # 10 slots over 4 classes: 2 or 3 each
        seen[idx] += 1
    assert np.all(seen[ys == 3] > 0)  # every point of the smallest class is drawn
    np.testing.assert_allclose(seen[ys == 3].mean() / seen[ys == 0].mean(), 90, rtol=0.25)


def _tiny_task():
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, 64))
    ys = np.repeat(np.arange(4), 30).astype(np.int32)
    yt = np.repeat(np.arange(2), 25).astype(np.int32)
    xs = (centres[ys] + 0.3 * rng.standard_normal((120, 64))).astype(np.float32)
    xt = (centres[yt] + 0.5 + 0.3 * rng.standard_normal((50, 64))).astype(np.float32)
    return DATask(xs, ys, xt, yt, 4, (0, 1))


def test_every_method_of_a_seed_sees_the_same_frozen_features():
    task = _tiny_task()
    cfg = WarmpotConfig(steps=4, eval_every=2, ramp_steps=2, pretrain_steps=5, batch_size=8)
    a = frozen_features(cfg, task)
    b = frozen_features(dataclasses.replace(cfg, method="pada", learning_rate=0.5), task)
    c = frozen_features(dataclasses.replace(cfg, seed=1), task)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.allclose(a[0], c[0])
    assert a[0].shape == (120, cfg.features) and a[1].shape == (50, cfg.features)
    # train() computes the same features itself when not given them.
    given, own = train(cfg, task, a), train(cfg, task)
    np.testing.assert_array_equal(given.accuracy, own.accuracy)
    assert np.all(np.isfinite(given.variant_share)) and np.all(given.variant_share == 0)
    # The authors' mass ramp reaches the plan: other masses, another run (the same ramp twice
    # gives bit-equal results, as above).
    authors = train(dataclasses.replace(cfg, mass_ramp="authors"), task, a)
    assert not np.array_equal(authors.outlier_share, given.outlier_share)
    # PADA's momentum reaches its class weights.
    pada = dataclasses.replace(cfg, method="pada")
    slow, fast = (train(dataclasses.replace(pada, pada_momentum=m), task, a) for m in (0.9, 0.0))
    assert not np.array_equal(slow.outlier_share, fast.outlier_share)


@pytest.mark.parametrize("epsilon", [None, 0.05])
def test_plan_weights_drop_a_subgroup_of_a_shared_class_that_class_weights_keep(x64, epsilon):
    # Source: class 0 (half of it a subgroup far from every target point), class 1, and an outlier
    # class 2; target: classes 0 and 1 only. Per-class weights give the subgroup its class's
    # weight; the partial plan at α = 0.8, β = 0.35 (capacity of the near points 2/3 · 1/0.35 > 0.8)
    # leaves it, and the outlier class, without mass.
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    ys = np.repeat([0, 1, 2], 12)
    xs = centres[ys] + 0.2 * rng.standard_normal((36, 2))
    sub = np.zeros(36, bool)
    sub[:6] = True  # half of class 0
    xs[sub] += np.array([-3.0, -3.0])
    xt = np.concatenate([centres[c] + 0.2 * rng.standard_normal((15, 2)) for c in (0, 1)])
    cost = np.linalg.norm(xs[:, None] - xt[None], axis=-1)
    kw = dict(tol=1e-11, max_iter=50_000) if epsilon else dict(tol=0.0, max_iter=0)
    out, w = plan_weights(jnp.asarray(cost), 0.8, 0.35, epsilon, **kw)
    w = np.asarray(w) / np.sum(w)
    assert w[sub].sum() < 1e-3 and w[ys == 2].sum() < 1e-3
    class_w = np.array([1.0, 1.0, 0.0])[ys]  # the best any per-class weighting can do
    class_w /= class_w.sum()
    np.testing.assert_allclose(class_w[sub].sum(), 0.25)


def test_frozen_features_lie_on_the_sphere_and_never_learn_from_the_subgroup():
    task = _tiny_task()
    cfg = WarmpotConfig(pretrain_steps=5, batch_size=8)
    variant = np.zeros(len(task.ys), bool)
    variant[::4] = True
    flagged = task._replace(variant=variant)
    xs = task.xs.copy()
    xs[variant] = 10.0 * np.random.default_rng(1).standard_normal((variant.sum(), 64))
    garbled = flagged._replace(xs=xs)  # the subgroup's images changed, nothing else
    fs, ft = frozen_features(cfg, flagged)
    gs, gt = frozen_features(cfg, garbled)
    np.testing.assert_allclose(fs[~variant], gs[~variant], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ft, gt, rtol=1e-5, atol=1e-6)
    for z in (fs, ft):
        np.testing.assert_allclose(np.linalg.norm(z, axis=1), np.sqrt(cfg.features), rtol=1e-5)
    # Without the flags the subgroup's images enter the pre-training and change the features.
    assert not np.allclose(frozen_features(cfg, garbled._replace(variant=None))[1], ft, atol=1e-4)
