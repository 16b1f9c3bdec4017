"""What methods add to the loop without copying it: task state, state hooks, their own optimizer,
gradient accumulation; each preserved across a kill and resume."""

import dataclasses
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import StateHook, TrainState, create_state, make_train_step, run_training
from jaxlab.core.metrics import read_metrics
from jaxlab.core.optim import make_optimizer
from jaxlab.testing.toy import ToyTask

CFG = TrainConfig(
    steps=9,
    batch_size=8,
    learning_rate=0.05,
    warmup_steps=2,
    checkpoint_every=4,
    eval_every=3,
    log_every=1,
    eval_batches=2,
    tensorboard=False,
)


def _bump(state: TrainState, step: jax.Array) -> TrainState:
    """Every 3 steps: add 1 to the ``offset`` parameter and record the step in the task state."""
    state.model.offset[...] = state.model.offset[...] + 1.0
    return state._replace(task_state={**state.task_state, "last_hook_step": step})


@dataclasses.dataclass
class CountingTask(ToyTask):
    """ToyTask plus a step counter and a y-sum (task state), a hook, and plain SGD as optimizer.

    ``offset`` is a parameter the objective ignores (zero gradient, so SGD leaves it alone): only
    the hook changes it, and the loss reports it.
    """

    def build_model(self, rngs):
        model = super().build_model(rngs)
        model.offset = nnx.Param(jnp.zeros(()))
        return model

    def init_task_state(self, key):
        del key
        zero = jnp.zeros((), jnp.int32)
        return {"steps": zero, "y_sum": jnp.zeros(()), "last_hook_step": zero}

    def loss(self, model, batch, key, task_state):
        objective, metrics = super().loss(model, batch, key)
        new = {
            **task_state,
            "steps": task_state["steps"] + 1,
            "y_sum": task_state["y_sum"] + jnp.sum(batch["y"]),
        }
        metrics = {
            **metrics,
            "steps_counted": new["steps"].astype(jnp.float32),
            "y_sum": new["y_sum"],
            "offset": model.offset[...],
            "last_hook_step": task_state["last_hook_step"].astype(jnp.float32),
        }
        return objective, metrics, new

    def state_hooks(self):
        return (StateHook(every=3, fn=_bump, name="bump"),)

    def optimizer(self, cfg, schedule):
        return optax.sgd(schedule)


KEYS = ("loss", "grad_norm", "steps_counted", "y_sum", "offset", "last_hook_step", "eval_loss")


def _rows(workdir):
    return [{k: r[k] for k in ("step", *KEYS) if k in r} for r in read_metrics(workdir)]


@pytest.fixture(scope="module")
def counting(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("counting")
    run_training(CountingTask(), CFG, workdir, verbose=False)
    return workdir


def test_task_state_counts_steps_and_hooks_change_parameters(counting):
    rows = _rows(counting)
    assert [r["step"] for r in rows] == list(range(1, 10))
    assert [r["steps_counted"] for r in rows] == list(range(1, 10))
    task = CountingTask()
    y_sums = np.cumsum([task.y[8 * i : 8 * i + 8].sum() for i in range(9)])
    np.testing.assert_allclose([r["y_sum"] for r in rows], y_sums, rtol=1e-5)
    # The loss of step s sees the hooks run after steps 3 and 6 (not the optimizer: zero gradient).
    assert [r["offset"] for r in rows] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [r["last_hook_step"] for r in rows] == [0, 0, 0, 3, 3, 3, 6, 6, 6]


def test_task_optimizer_and_task_state_are_checkpointed(counting):
    import json

    meta = json.loads((counting / "checkpoints" / "9" / "state" / "_METADATA").read_text())
    paths = list(meta["tree_metadata"])
    # SGD keeps no moments (the loop's AdamW would store "mu" and "nu"); the task state is there.
    assert not any("'mu'" in p or "'nu'" in p for p in paths)
    assert {p for p in paths if p.startswith("('2', 'tree'")} == {
        f"('2', 'tree', '{name}', 'value')" for name in ("last_hook_step", "steps", "y_sum")
    }


def test_kill_and_resume_keeps_task_state_and_hooks(counting, tmp_path):
    shutil.copytree(counting, tmp_path, dirs_exist_ok=True)
    for step in ("8", "9"):  # as if killed after the step-4 checkpoint
        shutil.rmtree(tmp_path / "checkpoints" / step)
    summary = run_training(CountingTask(), CFG, tmp_path, verbose=False)
    assert summary["resumed_from"] == 4
    assert _rows(tmp_path) == _rows(counting)


def test_grad_accumulation_gives_the_same_update():
    task = ToyTask()
    graphdef, state = create_state(task, make_optimizer(CFG), jax.random.key(0))
    batch = {k: jnp.asarray(v) for k, v in next(task.train_iterator(8, 0)).items()}
    key = jax.random.key(1)
    one, m1 = jax.jit(make_train_step(task, graphdef, 1))(state, batch, key)
    two, m2 = jax.jit(make_train_step(task, graphdef, 2))(state, batch, key)
    four, m4 = jax.jit(make_train_step(task, graphdef, 4))(state, batch, key)
    for other, metrics in ((two, m2), (four, m4)):
        assert metrics["loss"] == pytest.approx(float(m1["loss"]), rel=1e-6)
        assert metrics["grad_norm"] == pytest.approx(float(m1["grad_norm"]), rel=1e-5)
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(other), strict=True):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)
    moved = [np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in
             zip(jax.tree.leaves(one), jax.tree.leaves(state), strict=True)]  # fmt: skip
    assert max(moved) > 1e-3  # the update is not trivially zero


def test_grad_accumulation_in_the_loop_threads_task_state(tmp_path):
    cfg = dataclasses.replace(CFG, steps=3, batch_size=16, grad_accum_steps=2, eval_every=3)
    run_training(CountingTask(), cfg, tmp_path, verbose=False)
    # Two micro-batches per step, each counted by the loss, in order.
    assert [r["steps_counted"] for r in _rows(tmp_path)] == [1.5, 3.5, 5.5]


def test_batch_must_split_into_micro_batches_over_devices(tmp_path):
    from jaxlab.core.errors import ConfigError

    cfg = dataclasses.replace(CFG, grad_accum_steps=2)  # 8 rows, 2 micro-batches, 8 devices
    with pytest.raises(ConfigError, match="grad_accum_steps=2 micro-batches.*multiple of 16"):
        run_training(ToyTask(), cfg, tmp_path, verbose=False)


def _poison(state: TrainState, step: jax.Array) -> TrainState:
    state.model.mlp.up.kernel[...] = state.model.mlp.up.kernel[...] * jnp.nan
    return state


@dataclasses.dataclass
class PoisonedHookTask(ToyTask):
    def state_hooks(self):
        return (StateHook(every=6, fn=_poison, name="poison hook"),)


def test_hook_that_breaks_the_state_stops_the_run_and_keeps_the_checkpoint(tmp_path):
    from jaxlab.core.errors import RunError

    with pytest.raises(RunError, match=r"non-finite train state after poison hook at step 6; "
                       r"the last good checkpoint \(step 4\) is kept"):  # fmt: skip
        run_training(PoisonedHookTask(), dataclasses.replace(CFG, log_every=3), tmp_path)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["4"]


def test_units_per_example():
    from jaxlab.core.task import units_per_example

    class Tokens:
        def units_per_example(self):
            return 128, "tokens"

    class Old:  # the removed name is not read any more
        def tokens_per_example(self):
            return 128

    assert units_per_example(Tokens()) == (128, "tokens")
    assert units_per_example(Old()) == (1, "examples")
    assert units_per_example(ToyTask()) == (1, "examples")
    assert units_per_example(object()) == (1, "examples")
