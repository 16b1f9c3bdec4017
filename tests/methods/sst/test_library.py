"""SST and ReLoRA* from a user's own code: their layers inside the user's Flax NNX model, trained by
a plain optax loop with the plain optimizers (``sst_adamw``, ``optax.adamw``) and hooks (``redraw``,
``relora_merge``), and no jaxlab runner type.

Checks that can fail: the loss falls; every redraw (Zhao et al., ICML 2025, Algorithm 1; the re-SVD
of Sec. 4.5) and every merge leaves the model's function unchanged (the output before and after,
computed in float32) while the active pairs do change; and the plain loop reproduces, on the same
seeds, the run of the runner's wrappers (``LowRankTask``'s optimizer and hooks, ``TrainConfig``,
``SSTConfig``, the loop's own jitted train and hook steps). GaLore's plain optimizer is checked
against numpy.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.optim import make_schedule
from jaxlab.core.step import create_state, make_hook_step, make_train_step, merge_state
from jaxlab.methods.sst import (
    LoRA,
    LowRankTask,
    SSTConfig,
    decay_mask,
    galore_adamw,
    jagged_schedule,
    redraw,
    relora_merge,
    scale_by_column_adam,
    sst_adamw,
)
from jaxlab.nn.spectral import Frozen, Spectral

D, H, R, B = 6, 8, 2, 16
STEPS, EVERY, WARMUP, SEED = 12, 4, 2, 3
TRAIN = TrainConfig(
    steps=STEPS, learning_rate=0.05, warmup_steps=2, weight_decay=0.1, b1=0.9, b2=0.95,
    eps=1e-8, grad_clip=1.0,
)  # fmt: skip
SST_CFG = dict(rank=R, resample_every=EVERY, iteration_warmup=WARMUP, round_redraws=2, seed=SEED)
RELORA_CFG = dict(rank=R, relora_every=EVERY, relora_warmup=WARMUP, lora_alpha=4.0, seed=SEED)


class Net(nnx.Module):
    """A user's model: one low-rank map (``sst``: Spectral, else LoRA), then an nnx.Linear."""

    def __init__(self, kind: str, *, rngs: nnx.Rngs):
        if kind == "sst":
            self.hidden = Spectral(D, H, rank=R, std=D**-0.5, rngs=rngs)
        else:
            base = jax.random.normal(rngs.params(), (D, H)) * D**-0.5
            self.hidden = LoRA(base, rank=R, alpha=RELORA_CFG["lora_alpha"], rngs=rngs)
        self.out = nnx.Linear(H, 1, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.hidden(x)))[:, 0]


X = np.random.default_rng(0).normal(size=(B, D)).astype(np.float32)
Y = np.sin(X @ np.random.default_rng(1).normal(size=D)).astype(np.float32)


def _mse(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


def _plain_run(kind: str):
    """The user's loop: optax and the plain hooks only. Returns the losses, final model and the
    largest change of the output a hook made, and whether the active set ever changed."""
    rngs = nnx.Rngs(params=jax.random.key(SEED))
    graphdef, params, frozen = nnx.split(Net(kind, rngs=rngs), nnx.Param, Frozen)
    schedule = optax.warmup_cosine_decay_schedule(0.0, 0.05, 2, STEPS, 0.05 * 0.1)
    schedule = jagged_schedule(schedule, EVERY, WARMUP)  # each iteration / merge re-warms
    adam = dict(b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
    inner = (
        sst_adamw(schedule, **adam)
        if kind == "sst"
        else optax.adamw(schedule, mask=decay_mask, **adam)
    )
    tx = optax.chain(optax.clip_by_global_norm(1.0), inner)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, frozen, opt_state):
        loss, grads = jax.value_and_grad(lambda p: _mse(nnx.merge(graphdef, p, frozen), X, Y))(
            params
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def hook(params, frozen, opt_state, done):
        key = jax.random.fold_in(jax.random.key(SEED), done)
        if kind == "sst":
            return redraw(params, frozen, opt_state, key, done // EVERY, round_redraws=2)
        return relora_merge(params, frozen, opt_state, key, alpha=4.0)

    out = jax.jit(lambda p, f: nnx.merge(graphdef, p, f)(X))
    losses, moved, changed = [], 0.0, False
    for t in range(STEPS):
        params, opt_state, loss = step(params, frozen, opt_state)
        losses.append(float(loss))
        if (t + 1) % EVERY == 0:
            before, active = out(params, frozen), _active(params)
            params, frozen, opt_state = hook(params, frozen, opt_state, t + 1)
            moved = max(moved, float(jnp.max(jnp.abs(out(params, frozen) - before))))
            changed |= not np.array_equal(active, _active(params))
    return np.asarray(losses), nnx.merge(graphdef, params, frozen), moved, changed


def _active(params):
    """The trained columns: the spectral layer's u_active, or LoRA's A."""
    hidden = params["hidden"]
    return np.asarray(hidden["u_active"] if "u_active" in hidden else hidden["adapter"]["u"])


@dataclasses.dataclass
class _RunnerTask:
    """The same model and loss as a runner Task, with LowRankTask's optimizer and hooks."""

    kind: str

    @property
    def wrapper(self):
        cfg = SSTConfig(method="sst", **SST_CFG) if self.kind == "sst" else SSTConfig(
            method="relora", **RELORA_CFG
        )  # fmt: skip
        return LowRankTask(self, cfg)

    def build_model(self, rngs):
        return Net(self.kind, rngs=rngs)

    def loss(self, model, batch, key=None):
        mse = _mse(model, batch["x"], batch["y"])
        return mse, {"loss": mse}

    def optimizer(self, cfg, schedule):
        return self.wrapper.optimizer(cfg, schedule)

    def state_hooks(self):
        return self.wrapper.state_hooks()


def _runner_run(kind: str):
    task = _RunnerTask(kind)
    tx = task.optimizer(TRAIN, make_schedule(TRAIN))
    graphdef, state = create_state(task, tx, jax.random.key(SEED))
    train_step = jax.jit(make_train_step(task, graphdef))
    (hook,) = task.state_hooks()
    hook_step = jax.jit(make_hook_step(hook, graphdef, False))
    batch = {"x": jnp.asarray(X), "y": jnp.asarray(Y)}
    losses = []
    for t in range(STEPS):
        state, metrics = train_step(state, batch, jax.random.key(t))
        losses.append(float(metrics["loss"]))
        if (t + 1) % hook.every == 0:
            state, _ = hook_step(state, np.int32(t + 1))
    return np.asarray(losses), merge_state(graphdef, state).model


@pytest.fixture(scope="module", params=["sst", "relora"])
def runs(request):
    return request.param, _plain_run(request.param), _runner_run(request.param)


def test_the_plain_loop_learns_and_its_hooks_keep_the_function(runs):
    kind, (losses, _, moved, changed), _ = runs
    assert losses[-1] < 0.5 * losses[0]
    assert changed  # the hooks did redraw (merge) something
    # Algorithm 1: a redraw permutes the columns of U, s, V (a re-SVD refactors M): M unchanged.
    assert moved < 1e-5


def test_the_plain_loop_is_the_runners_run(runs):
    kind, (losses, model, _, _), (runner_losses, runner_model) = runs
    # The same arithmetic on the same seeds: the runner's types add nothing. Bit-equal at XLA's
    # defaults; the test flags (conftest) let the two compiled programs round differently.
    np.testing.assert_allclose(losses, runner_losses, rtol=1e-6)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)  # noqa: E731
    jax.tree.map(close, nnx.state(model), nnx.state(runner_model))


def test_a_redraw_needs_the_frozen_columns():
    _, params, frozen = nnx.split(Net("sst", rngs=nnx.Rngs(0)), nnx.Param, Frozen)
    opt_state = sst_adamw(0.1).init(params)
    with pytest.raises(ConfigError, match="hidden/u_frozen") as err:
        redraw(params, {}, opt_state, jax.random.key(0), 1)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="sampling='top'"):
        redraw(params, frozen, opt_state, jax.random.key(0), 1, sampling="top")


def test_scale_by_column_adam_is_exported():
    import jaxlab.methods.sst as sst

    assert sst.scale_by_column_adam is scale_by_column_adam


def test_galore_adamw_is_galores_step_then_decay_and_rate(x64):
    # One step on a (4, 7) matrix: -lr (α P adam(Pᵀ G) + wd W), P the top-2 left singular
    # vectors of G (numpy SVD); Adam's first step is g / (|g| + ε).
    rng = np.random.default_rng(5)
    w, g = rng.normal(size=(4, 7)), rng.normal(size=(4, 7))
    lr, wd, scale, eps = 0.1, 0.01, 0.25, 1e-8
    tx = galore_adamw(lr, rank=2, update_every=10, scale=scale, eps=eps, weight_decay=wd)
    params = {"w": jnp.asarray(w)}
    updates, _ = tx.update({"w": jnp.asarray(g)}, tx.init(params), params)
    p = np.linalg.svd(g)[0][:, :2]
    reduced = p.T @ g
    want = -lr * (scale * p @ (reduced / (np.abs(reduced) + eps)) + wd * w)
    np.testing.assert_allclose(updates["w"], want, rtol=1e-5)  # P's SVD is taken in float32
    assert decay_mask(params)["w"]
