"""SST's optimizer against numpy: one step of the whole chain on fixed weights (clip the raw
gradients, divide the active columns' gradients by s, Adam, weight decay, learning rate, s >= 0 and
unit columns), and the per-column Adam against optax's Adam and against a fresh start."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core.config import TrainConfig
from jaxlab.methods.sst import SSTConfig
from jaxlab.methods.sst.optim import make_method_optimizer, scale_by_column_adam

M, N, K, R = 5, 4, 4, 2


def _params(rng):
    u = rng.standard_normal((M, R))
    v = rng.standard_normal((N, R))
    return {
        "layer": {
            "s": jnp.asarray([2.0, 0.05, 1.0, 0.5]),  # a small active s: the order of clip matters
            "u_active": jnp.asarray(u / np.linalg.norm(u, axis=0)),
            "v_active": jnp.asarray(v / np.linalg.norm(v, axis=0)),
        },
        "w": jnp.asarray(rng.standard_normal((3, 4))),
    }


def _grads(rng):
    g = _params(rng)
    g = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape)), g)
    g["layer"]["s"] = jnp.asarray([0.3, 4.0, 0.2, 0.1])  # drives s[1] below 0: projected to 0
    return g


def test_one_step_of_the_sst_chain_against_numpy(x64):
    rng = np.random.default_rng(0)
    params, grads = _params(rng), _grads(rng)
    lr, clip, wd, eps = 0.1, 1.0, 0.01, 1e-8
    cfg = TrainConfig(learning_rate=lr, grad_clip=clip, weight_decay=wd, eps=eps)
    tx = make_method_optimizer(cfg, optax.constant_schedule(lr), SSTConfig(method="sst"))
    updates, _ = tx.update(grads, tx.init(params), params)
    new = optax.apply_updates(params, updates)

    p = jax.tree.map(np.asarray, params)
    g = jax.tree.map(np.asarray, grads)
    norm = np.sqrt(sum(np.sum(x**2) for x in jax.tree.leaves(g)))
    g = jax.tree.map(lambda x: x * min(1.0, clip / norm), g)  # raw gradients clipped first
    s_act = p["layer"]["s"][:R]
    g["layer"]["u_active"] = g["layer"]["u_active"] / s_act  # SST's enhanced gradient (Eq. 3)
    g["layer"]["v_active"] = g["layer"]["v_active"] / s_act

    def first_adam_step(x):  # m̂ = g, v̂ = g² after one bias-corrected step
        return x / (np.abs(x) + eps)

    step = jax.tree.map(first_adam_step, g)
    step["w"] = step["w"] + wd * p["w"]  # decay on matrices, not on s nor the unit vectors
    want = jax.tree.map(lambda x, d: x - lr * d, p, step)
    want["layer"]["s"] = np.maximum(want["layer"]["s"], 0.0)
    for name in ("u_active", "v_active"):
        q = want["layer"][name]
        want["layer"][name] = q / np.linalg.norm(q, axis=0)
    assert want["layer"]["s"][1] == 0.0  # the projection was active
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14), new, want)


def test_column_adam_is_optax_adam_without_redraws(x64):
    rng = np.random.default_rng(1)
    params = _params(rng)
    ours, ref = scale_by_column_adam(0.9, 0.95, 1e-8), optax.scale_by_adam(0.9, 0.95, 1e-8)
    s_ours, s_ref = ours.init(params), ref.init(params)
    assert s_ours.count["layer"]["u_active"].shape == (1, R)
    assert s_ours.count["layer"]["s"].shape == (K,) and s_ours.count["w"].shape == ()
    for _ in range(4):
        g = _grads(rng)
        u_ours, s_ours = ours.update(g, s_ours, params)
        u_ref, s_ref = ref.update(g, s_ref, params)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12), u_ours, u_ref)


def test_a_column_whose_count_restarts_takes_a_fresh_adam_step(x64):
    # What a redraw does to an entering column (tests/methods/sst/test_spectral.py checks that
    # the hook zeroes its moments and its count): its next update is Adam's first step g/(|g|+ε),
    # while its neighbours keep their history.
    rng = np.random.default_rng(2)
    params = _params(rng)
    tx = scale_by_column_adam(0.9, 0.95, 1e-8)
    state = tx.init(params)
    for _ in range(5):
        _, state = tx.update(_grads(rng), state, params)

    def restart_column_1(tree):  # count, mu and nu of u_active's column 1 back to zero
        layer = {**tree["layer"], "u_active": tree["layer"]["u_active"].at[:, 1].set(0)}
        return {**tree, "layer": layer}

    state = jax.tree.map(
        restart_column_1, state, is_leaf=lambda x: isinstance(x, dict) and "layer" in x
    )
    g = _grads(rng)
    update, state = tx.update(g, state, params)
    fresh = np.asarray(g["layer"]["u_active"][:, 1])
    np.testing.assert_allclose(update["layer"]["u_active"][:, 1], fresh / (np.abs(fresh) + 1e-8))
    np.testing.assert_array_equal(state.count["layer"]["u_active"], [[6, 1]])
    assert not np.allclose(update["layer"]["u_active"][:, 0], np.sign(g["layer"]["u_active"][:, 0]))


@pytest.mark.parametrize("method", ["full", "lora"])
def test_other_methods_clip_then_adamw(method):
    cfg = TrainConfig(grad_clip=1.0)
    tx = make_method_optimizer(cfg, optax.constant_schedule(0.1), SSTConfig(method=method))
    state = tx.init({"w": jnp.ones((2, 2))})
    assert isinstance(state[1][0], optax.ScaleByAdamState)  # chain: clip, adamw
