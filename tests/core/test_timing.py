"""The timing protocol (warm-up calls are not timed, rounds interleave, medians are reported) and
the step timer, which times the train step the loop trains."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import AxisRules, make_mesh
from jaxlab.core.metrics import read_metrics
from jaxlab.core.step import build_train_program
from jaxlab.core.task import StateHook
from jaxlab.core.timing import step_runners, step_seconds, time_call, time_interleaved
from jaxlab.testing.toy import ToyTask


def test_warmup_and_repeats_call_counts():
    calls = []
    timing = time_call(lambda: calls.append(1) or jnp.zeros(()), repeats=3, calls=2, warmup=2)
    assert len(calls) == 2 + 3 * 2
    assert len(timing.samples) == 3 and timing.median in timing.samples
    assert timing.spread >= 0


def test_interleaved_order():
    order = []
    fns = {n: (lambda n=n: order.append(n)) for n in "ab"}
    out = time_interleaved(fns, repeats=2, calls=1, warmup=1)
    assert order == ["a", "b", "a", "b", "a", "b"]  # warm-up a, b; then rounds a b, a b
    assert set(out) == {"a", "b"}


@pytest.mark.parametrize("kw", [dict(repeats=0), dict(calls=0), dict(warmup=-1)])
def test_bad_settings(kw):
    with pytest.raises(ValueError):
        time_call(lambda: None, **kw)


# ---------------------------------------------------------------------------- the step timer


class _StatefulTask(ToyTask):
    """ToyTask with a task state (a step counter), a state hook and its own optimizer (SGD)."""

    def init_task_state(self, key):
        del key
        return {"steps": jnp.zeros((), jnp.int32)}

    def loss(self, model, batch, key, task_state):
        objective, metrics = super().loss(model, batch, key)
        return objective, metrics, {"steps": task_state["steps"] + 1}

    def state_hooks(self):
        return (StateHook(every=2, fn=lambda ts, step: ts, name="noop"),)

    def optimizer(self, cfg, schedule):
        return optax.sgd(schedule)


# Clipping that binds and no warm-up: a timer that skipped either would step elsewhere.
STEP_CFG = TrainConfig(
    steps=1,
    batch_size=8,
    learning_rate=0.1,
    warmup_steps=0,
    grad_clip=0.05,
    checkpoint_every=1,
    eval_every=1,
    eval_batches=1,
    log_every=1,
    tensorboard=False,
)
TASKS = {"adamw": ToyTask, "own_optimizer_and_state": _StatefulTask}


@pytest.mark.parametrize("name", TASKS)
def test_the_timed_step_is_the_trained_step(name, tmp_path):
    """One call of what the timer runs gives the state the loop saves after its first step."""
    task = TASKS[name]()
    run_training(task, STEP_CFG, tmp_path, verbose=False)
    mesh, rules = make_mesh(), AxisRules()
    batch = next(task.train_iterator(STEP_CFG.batch_size, STEP_CFG.seed))
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):
        ((runner, _),) = step_runners(
            {name: task}, batch, STEP_CFG, mesh=mesh, rules=rules
        ).values()
        before = jax.tree.map(np.asarray, runner.state)
        metrics = runner()
        program = build_train_program(
            task, STEP_CFG, mesh, rules, init_key=jax.random.key(STEP_CFG.seed)
        )
    abstract = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        program.abstract_state,
        program.shardings,
    )
    ckpt = Checkpointer(tmp_path / "checkpoints")
    saved = ckpt.restore(abstract, task.train_iterator(STEP_CFG.batch_size, STEP_CFG.seed))
    ckpt.close()
    assert saved.step == 1
    assert read_metrics(tmp_path)[0]["loss"] == pytest.approx(float(metrics["loss"]), rel=1e-6)
    leaves = jax.tree.leaves(runner.state)
    assert len(leaves) == len(jax.tree.leaves(saved.state))
    for got, want in zip(leaves, jax.tree.leaves(saved.state), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-7)
    # ... and the step did move the state (the comparison above is not between two initial states).
    assert any(
        not np.allclose(a, np.asarray(b))
        for a, b in zip(jax.tree.leaves(before), leaves, strict=True)
    )


def test_step_seconds_gives_one_timing_per_task_in_order():
    tasks = {"stateful": _StatefulTask(), "plain": ToyTask()}
    batch = next(ToyTask().train_iterator(STEP_CFG.batch_size, 0))
    out = step_seconds(tasks, batch, STEP_CFG, repeats=2, calls=1)
    assert list(out) == ["stateful", "plain"]
    for t in out.values():
        assert len(t.step.samples) == 2 and t.step.median > 0
    assert out["stateful"].hooks_per_step > 0 and out["plain"].hooks_per_step == 0
