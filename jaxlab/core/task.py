"""What a method gives the shared loop: the :class:`Task` protocol and its optional parts.

A task must provide a model, a loss, training and evaluation data, and the size of an example. It
may also provide, each by defining one more method (the loop checks with ``hasattr``):

* ``optimizer(cfg, schedule)`` — its own ``optax.GradientTransformation`` instead of the loop's
  AdamW (:func:`jaxlab.core.optim.make_optimizer`). ``schedule`` is the loop's learning-rate
  schedule, so a task optimizer that uses it keeps the loop's resume rules (an extended run keeps
  its schedule length; ``train.learning_rate`` may be lowered on resume).
* ``init_task_state(key)`` — a pytree of arrays that is not a parameter (moving-average tables
  indexed by sample id, a frozen reference model's weights, a counter), replicated on every device
  and checkpointed with the model and optimizer. A task that defines it takes the state in its loss
  and returns the update: ``loss(model, batch, key, task_state) -> (objective, metrics,
  new_task_state)``; evaluation calls the same loss and discards the update.
* ``state_hooks()`` — :class:`StateHook` s, pure functions run every ``every`` steps (after that
  step's update, before its checkpoint) that may change the whole :class:`TrainState`: re-factorise
  layers, reset optimizer moments, refresh a table. They run inside ``jax.jit`` and must return a
  state of the same structure. Because a hook's change is in the checkpoint of its step and a
  resumed run reaches every later hook step again, kill and resume give the same run.

levanter's ``every=`` hooks are the model for the last item. Plain callables on the logged rows
(``run_training(..., hooks=)``) remain for reading metrics; they cannot change the state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import numpy as np
from flax import nnx

__all__ = ["StateHook", "Task", "TrainState", "has_task_state", "units_per_example"]

Batch = Mapping[str, np.ndarray]


class Task(Protocol):
    """What the loop needs from a method (see the module docstring for the optional parts).

    ``loss`` returns ``(objective, metrics)``. The objective is differentiated; the metrics
    (scalars, including ``"loss"``) are averaged over the log window and over the eval batches.
    ``units_per_example`` gives how many units one example holds and their name (``(T,
    "tokens")`` for a language model, ``(1, "examples")``, ``(1, "pairs")``): the progress line
    shows ``units/s`` and the metrics rows ``<unit>_per_second`` and ``<unit>_seen``.
    """

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module: ...

    def loss(
        self, model: nnx.Module, batch: Mapping[str, jax.Array], key: jax.Array | None
    ) -> tuple[jax.Array, dict[str, jax.Array]]: ...

    def train_iterator(self, batch_size: int, seed: int) -> Iterator[Batch]: ...

    def eval_batches(self, batch_size: int, num_batches: int) -> Sequence[Batch]: ...

    def units_per_example(self) -> tuple[int, str]: ...


class TrainState(NamedTuple):
    """What a :class:`StateHook` sees and returns: the live NNX objects and the task's state."""

    model: nnx.Module
    optimizer: nnx.Optimizer
    task_state: Any = None


class StateHook(NamedTuple):
    """``fn(state, step) -> state`` run after every ``every``-th step (``step`` is a traced int).

    ``fn`` may modify ``state.model`` / ``state.optimizer`` in place (NNX objects) and return them,
    or return new objects of the same structure; ``name`` appears in error messages.
    """

    every: int
    fn: Callable[[TrainState, jax.Array], TrainState]
    name: str = "state hook"


def has_task_state(task: Any) -> bool:
    """Whether ``task`` carries a non-parameter state (defines ``init_task_state``)."""
    return hasattr(task, "init_task_state")


def units_per_example(task: Any) -> tuple[int, str]:
    """``task.units_per_example()``, or one example."""
    if hasattr(task, "units_per_example"):
        count, unit = task.units_per_example()
        return int(count), str(unit)
    return 1, "examples"
