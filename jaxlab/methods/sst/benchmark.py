"""Step times of the methods side by side, on the shared loop's own train step and one batch.

Each method's task is built as the loop builds it (:func:`jaxlab.core.step.create_state` with the
task's optimizer) and its train step (:func:`jaxlab.core.step.make_train_step`) is jitted with
donation; :func:`jaxlab.core.timing.time_interleaved` times them in interleaved rounds, so load
drift hits every method alike. The every-``T₃`` state hooks (SST's redraws) are timed apart and
reported per train step (hook time / ``every``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jaxlab.core.config import TrainConfig
from jaxlab.core.optim import make_schedule
from jaxlab.core.step import create_state, make_hook_step, make_train_step
from jaxlab.core.timing import time_interleaved

__all__ = ["step_seconds"]


def _runner(fn, state, *args):
    holder = [state]

    def run():
        holder[0], out = fn(holder[0], *args)
        return out

    return run


def step_seconds(
    tasks: Mapping[str, Any],
    batch: Mapping[str, Any],
    train: TrainConfig,
    *,
    rounds: int = 5,
    calls: int = 3,
) -> dict[str, dict[str, float]]:
    """``{name: {"train_step": s, "hooks_per_step": s}}``: median seconds per train step and the
    state hooks' seconds amortised over the steps between them."""
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    key = jax.random.key(1)
    runners, hook_runners = {}, {}
    for name, task in tasks.items():
        tx = task.optimizer(train, make_schedule(train))
        graphdef, state = create_state(task, tx, jax.random.key(0))
        step = jax.jit(make_train_step(task, graphdef), donate_argnums=0)
        runners[name] = _runner(step, state, batch, key)
        for i, hook in enumerate(getattr(task, "state_hooks", tuple)()):
            hook_step = jax.jit(make_hook_step(hook, graphdef, False), donate_argnums=0)
            _, state2 = create_state(task, tx, jax.random.key(0))
            hook_runners[(name, i, hook.every)] = _runner(hook_step, state2, jnp.int32(hook.every))
    times = time_interleaved(runners, repeats=rounds, calls=calls)
    hooks = time_interleaved(hook_runners, repeats=rounds, calls=1) if hook_runners else {}
    out = {name: {"train_step": t.median, "hooks_per_step": 0.0} for name, t in times.items()}
    for (name, _, every), t in hooks.items():
        out[name]["hooks_per_step"] += t.median / every
    return out
