"""The pure functions the loop jits: state creation, the train step, the eval step, a hook step.

:func:`build_train_program` puts them together for one task and one :class:`TrainConfig`: the
optimizer (the task's own, or the loop's AdamW), the learning-rate schedule, the state shardings and
the jitted, donating steps. The loop (:func:`jaxlab.core.loop.run_training`) trains with it, the
step timer (:func:`jaxlab.core.timing.step_seconds`) times it and
:func:`jaxlab.core.aot.compile_train_step` compiles it ahead of time, so what is timed and measured
is what is trained. Each of them builds its own, or takes one the caller built: a program built
once and handed to all three compiles its train step once.

The train state is the ``nnx.State`` of ``(model, optimizer)`` — plus a third entry holding the
task's non-parameter state when the task has one (:func:`jaxlab.core.task.has_task_state`), so the
checkpoints of tasks without one keep their layout.

The train step returns, besides the task's metrics and ``grad_norm``, a flag
:data:`STATE_FINITE` saying whether every parameter (and task-state entry) after the update is
finite. The loop reads it back before writing any checkpoint: a step whose loss is finite but whose
gradient or update is not (``jnp.where`` over a branch with a NaN gradient, ``sqrt`` at 0) would
otherwise be saved as the last good state.

With ``grad_accum_steps = k > 1`` the global batch of B rows is split into k micro-batches of B/k
rows (row ``j`` goes to micro-batch ``j mod k``, so each micro-batch stays spread over all the
data-parallel devices), their gradients are summed in a ``lax.scan`` and divided by k before one
optimizer update. For a loss that is a mean over equally sized rows this is the gradient of the
full batch, at the memory of one micro-batch. A task state is threaded through the micro-batches in
order. The loss must not mutate the model (randomness comes from the key, carried state from the
task state): inside the scan the model is rebuilt from its arrays for every micro-batch.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.core.compile_options import compile_lowered, small_jit
from jaxlab.core.config import TrainConfig
from jaxlab.core.mesh import AxisRules, constrain, state_shardings
from jaxlab.core.optim import LrGroups, default_decay_mask, make_optimizer, make_schedule
from jaxlab.core.task import StateHook, Task, TrainState, has_task_state

__all__ = [
    "STATE_FINITE",
    "CompiledOnFirstCall",
    "TrainProgram",
    "all_finite",
    "build_train_program",
    "create_state",
    "make_eval_step",
    "make_hook_step",
    "make_train_step",
    "merge_state",
    "run_keys",
    "sharded_shapes",
    "split_state",
    "task_loss",
    "task_optimizer",
]

STATE_FINITE = "state_finite"  # metric key of the finiteness flag; the loop pops it


class TaskStateVar(nnx.Variable):
    """A leaf of a task's non-parameter state (never differentiated or optimised)."""


class _TaskStateBox(nnx.Module):
    def __init__(self, tree: Any):
        self.tree = nnx.data(jax.tree.map(TaskStateVar, tree))

    def get(self) -> Any:
        return jax.tree.map(
            lambda v: v[...], self.tree, is_leaf=lambda x: isinstance(x, nnx.Variable)
        )


def create_state(task: Task, tx: optax.GradientTransformation, key: jax.Array) -> Any:
    """Builds the model, its optimizer (and the task state); returns their ``(graphdef, state)``."""
    model = task.build_model(nnx.Rngs(params=key))
    objects = (model, nnx.Optimizer(model, tx, wrt=nnx.Param))
    if has_task_state(task):
        objects += (_TaskStateBox(task.init_task_state(jax.random.fold_in(key, 1))),)
    return nnx.split(objects)


def merge_state(graphdef: Any, state: Any) -> TrainState:
    """The live :class:`TrainState` of a split train state."""
    objects = nnx.merge(graphdef, state)
    task_state = objects[2].get() if len(objects) == 3 else None
    return TrainState(objects[0], objects[1], task_state)


def split_state(train_state: TrainState, stateful: bool) -> Any:
    """The ``nnx.State`` of a :class:`TrainState` (inverse of :func:`merge_state`)."""
    objects = (train_state.model, train_state.optimizer)
    if stateful:
        objects += (_TaskStateBox(train_state.task_state),)
    return nnx.split(objects)[1]


def task_loss(task: Task) -> Callable:
    """The loss as ``(model, batch, key, task_state) -> (objective, metrics, task_state)``."""
    if has_task_state(task):
        return task.loss
    return lambda model, batch, key, task_state: (*task.loss(model, batch, key), task_state)


def sharded_shapes(abstract: Any, shardings: Any) -> Any:
    """``abstract``'s shapes and dtypes as ``jax.ShapeDtypeStruct`` s with ``shardings`` (a tree of
    the same structure): what ``jit(...).trace``, ``.lower`` and orbax's restore take for a state
    that lives on those shardings, e.g. ``sharded_shapes(program.abstract_state,
    program.shardings)``."""
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )


def all_finite(tree: Any) -> jax.Array:
    """True when every floating-point entry of ``tree`` is finite (one fused reduction)."""
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    if not leaves:
        return jnp.array(True)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def _micro_batches(x: jax.Array, k: int) -> jax.Array:
    """``(B, ...) -> (k, B/k, ...)`` with row ``j`` in micro-batch ``j mod k``."""
    return jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1)


def make_train_step(task: Task, graphdef: Any, grad_accum_steps: int = 1) -> Callable:
    """The pure train step ``(state, batch, key) -> (state, metrics)`` for ``jax.jit``.

    Also used to lower and compile a step ahead of time for a target mesh (see
    :mod:`jaxlab.core.aot`), so that what is compiled there is exactly what the loop runs.
    """
    loss_fn, stateful, k = task_loss(task), has_task_state(task), grad_accum_steps

    def grads_of(model, batch, key, task_state):
        def objective(m):
            value, metrics, new_task_state = loss_fn(m, batch, key, task_state)
            return value, (metrics, new_task_state)

        grad_fn = nnx.value_and_grad(objective, has_aux=True)
        (_, (metrics, task_state)), grads = grad_fn(model)
        return grads, metrics, task_state

    def train_step(state, batch, key):
        ts = merge_state(graphdef, state)
        if k == 1:
            grads, metrics, task_state = grads_of(ts.model, batch, key, ts.task_state)
        else:
            # NNX objects may not cross into the scan's trace: rebuild the model there from arrays.
            model_def, model_state = nnx.split(ts.model)
            model_leaves, model_tree = jax.tree.flatten(model_state)

            def micro_step(carry, i_and_batch):
                grad_sum, task_state = carry
                i, micro = i_and_batch
                micro = {
                    name: constrain(x, "batch", *([None] * (x.ndim - 1)))
                    for name, x in micro.items()
                }
                model = nnx.merge(model_def, jax.tree.unflatten(model_tree, model_leaves))
                grads, metrics, task_state = grads_of(
                    model, micro, jax.random.fold_in(key, i), task_state
                )
                return (jax.tree.map(jnp.add, grad_sum, grads), task_state), metrics

            zeros = jax.tree.map(jnp.zeros_like, nnx.state(ts.model, nnx.Param))
            micro = {name: _micro_batches(x, k) for name, x in batch.items()}
            (grad_sum, task_state), metrics = jax.lax.scan(
                micro_step, (zeros, ts.task_state), (jnp.arange(k), micro)
            )
            grads = jax.tree.map(lambda g: g / k, grad_sum)
            metrics = jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)
        ts.optimizer.update(ts.model, grads)
        new_state = split_state(TrainState(ts.model, ts.optimizer, task_state), stateful)
        finite = all_finite((nnx.state(ts.model, nnx.Param), task_state))
        metrics = {**metrics, "grad_norm": optax.tree.norm(grads), STATE_FINITE: finite}
        return new_state, metrics

    return train_step


def make_eval_step(task: Task, graphdef: Any) -> Callable:
    """``(state, batch) -> metrics``: the task's loss metrics without a key or state update."""
    loss_fn = task_loss(task)

    def eval_step(state, batch):
        ts = merge_state(graphdef, state)
        return loss_fn(ts.model, batch, None, ts.task_state)[1]

    return eval_step


def make_hook_step(hook: StateHook, graphdef: Any, stateful: bool) -> Callable:
    """``(state, step) -> (state, finite)`` running ``hook.fn`` on the live train state."""

    def hook_step(state, step):
        ts = hook.fn(merge_state(graphdef, state), step)
        new_state = split_state(ts, stateful)
        return new_state, all_finite((nnx.state(ts.model, nnx.Param), ts.task_state))

    return hook_step


def task_optimizer(
    task: Task,
    cfg: TrainConfig,
    schedule: optax.Schedule,
    *,
    decay_mask: Callable[[Any], Any] | None = default_decay_mask,
    lr_groups: LrGroups | None = None,
) -> optax.GradientTransformation:
    """The task's own optimizer if it has one, else the loop's clipped AdamW on ``schedule``
    (``decay_mask`` and ``lr_groups`` apply to the latter only)."""
    if hasattr(task, "optimizer"):
        return task.optimizer(cfg, schedule)
    return make_optimizer(cfg, decay_mask, lr_groups=lr_groups, schedule=schedule)


class TrainProgram(NamedTuple):
    """Everything the loop compiles for one task (built by :func:`build_train_program`).

    Attributes:
      schedule: the learning-rate schedule.
      graphdef, abstract_state: the split train state's graph and shapes.
      shardings: ``NamedSharding`` s of the train state on the mesh.
      init: ``key -> state``, the state created with its shardings (a
        :class:`CompiledOnFirstCall`).
      train_step: jitted, donating ``(state, batch, key) -> (state, metrics)``.
      hook_steps: ``(hook, jitted donating (state, step) -> (state, finite))`` per state hook.
      compiler_options: the XLA options every program above is compiled with (None: XLA's
        defaults; see :mod:`jaxlab.core.compile_options`); the loop's eval step takes them too.
    """

    schedule: optax.Schedule
    graphdef: Any
    abstract_state: Any
    shardings: Any
    init: CompiledOnFirstCall
    train_step: Callable
    hook_steps: tuple[tuple[StateHook, Callable], ...]
    compiler_options: Mapping[str, Any] | None = None


class CompiledOnFirstCall:
    """A traced program as a function, compiled with ``options`` when first called (a resumed run
    restores its state and never calls it), or ahead of that in a background thread
    (:meth:`compile_in`)."""

    def __init__(self, traced: jax.stages.Traced, options: Mapping[str, Any] | None):
        self._traced, self._options = traced, options
        self._compiled: Any = None  # the compiled program, or the Future of its compile

    def compile_in(self, pool: concurrent.futures.Executor) -> None:
        """Lowers the program here and compiles it in ``pool``; the first call waits for it."""
        if self._compiled is None:
            self._compiled = pool.submit(compile_lowered, self._traced.lower(), self._options)

    def __call__(self, *args: Any) -> Any:
        if self._compiled is None:
            self._compiled = compile_lowered(self._traced.lower(), self._options)
        elif isinstance(self._compiled, concurrent.futures.Future):
            self._compiled = self._compiled.result()
        return self._compiled(*args)


def run_keys(seed: int) -> tuple[jax.Array, jax.Array]:
    """The loop's two keys for ``seed``: ``jax.random.split(jax.random.key(seed))``, the init key
    (the train state is created from it) and the step key (folded with each step's number).

    Made in one small program, where eagerly the seed's conversion and the split are two. Seeds
    outside the int32 range take JAX's eager path, whose rule for them (the seed as an int64)
    differs from a traced seed's.
    """
    if not -(2**31) <= seed < 2**31:
        return tuple(jax.random.split(jax.random.key(seed)))
    return _run_keys()(seed)


@functools.cache  # built on first use: small_jit asks for the backend, which an import must not
def _run_keys() -> Callable[[int], tuple[jax.Array, jax.Array]]:
    return small_jit(lambda seed: tuple(jax.random.split(jax.random.key(seed))))


def build_train_program(
    task: Task,
    cfg: TrainConfig,
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
    *,
    init_key: jax.Array,
    schedule_steps: int | None = None,
    decay_mask: Callable[[Any], Any] | None = default_decay_mask,
    lr_groups: LrGroups | None = None,
    compiler_options: Callable[[int], Mapping[str, Any] | None] | None = None,
) -> TrainProgram:
    """The optimizer, state and jitted steps with which ``task`` is trained under ``cfg``.

    Args:
      task: the method.
      cfg: the loop's fields (optimizer, clipping, schedule, ``grad_accum_steps``).
      mesh, rules: where the state lives; the steps must be traced inside ``jax.set_mesh(mesh)``
        and ``nnx.logical_axis_rules(rules.as_tuple())``, as the loop does.
      init_key: the key the state is created from (only its shape matters here).
      schedule_steps: length of the learning-rate schedule (default ``cfg.steps``; a resumed run
        keeps the length of the run that started it).
      decay_mask, lr_groups: options of the loop's AdamW (see :func:`task_optimizer`).
      compiler_options: ``state_size -> XLA options`` for every program (``state_size``: the
        numbers in the train state), e.g. the loop's
        :func:`jaxlab.core.compile_options.short_run_options`; None keeps XLA's defaults.
    """
    schedule = make_schedule(cfg, cfg.steps if schedule_steps is None else schedule_steps)
    tx = task_optimizer(task, cfg, schedule, decay_mask=decay_mask, lr_groups=lr_groups)
    # One trace of the state's construction gives its graph, shapes and shardings and the init
    # program (building the model is a noticeable part of a short run's start-up): the shardings
    # are found inside the trace and the result constrained to them, where out_shardings would
    # need them before it.
    found = {}

    def init_state(key):
        graphdef, state = create_state(task, tx, key)
        found["graphdef"], found["shardings"] = graphdef, state_shardings(state, mesh, rules)
        return jax.lax.with_sharding_constraint(state, found["shardings"])

    traced = jax.jit(init_state).trace(init_key)
    graphdef, shardings, abstract_state = found["graphdef"], found["shardings"], traced.out_info
    options = None
    if compiler_options is not None:
        options = compiler_options(sum(leaf.size for leaf in jax.tree.leaves(abstract_state)))
    init = CompiledOnFirstCall(traced, options)
    train_step = jax.jit(
        make_train_step(task, graphdef, cfg.grad_accum_steps),
        in_shardings=(shardings, None, None),
        out_shardings=(shardings, None),
        donate_argnums=0,
        compiler_options=options,
    )
    stateful = has_task_state(task)
    hook_steps = tuple(
        (
            hook,
            jax.jit(
                make_hook_step(hook, graphdef, stateful),
                in_shardings=(shardings, None),
                out_shardings=(shardings, None),
                donate_argnums=0,
                compiler_options=options,
            ),
        )
        for hook in getattr(task, "state_hooks", tuple)()
    )
    return TrainProgram(
        schedule, graphdef, abstract_state, shardings, init, train_step, hook_steps, options
    )
