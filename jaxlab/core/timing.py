"""One protocol for timing compiled JAX work: warm up (compile), repeat, report the median.

Every benchmark in jaxlab (step times, solver times, kernel throughput) reports ratios measured in
one process with this protocol, so that two numbers being compared were taken the same way:

* each callable is called ``warmup`` times first (compilation and first-touch allocation are not
  timed); its result is blocked on (``jax.block_until_ready``), so asynchronous dispatch cannot
  make a call look faster than it is;
* then it is timed ``repeats`` times, each time over ``calls`` consecutive calls (for work too
  short to time alone), and the **median** per-call time is reported with all the samples;
* :func:`time_interleaved` times several callables in rounds (A, B, C, A, B, C, ...) so that drift
  in machine load hits each of them alike — use it whenever the numbers will be divided.

Callables take no arguments: close over the inputs (or over a mutable holder when a step donates
and returns its state, as :class:`StepRunner` does).

:func:`step_seconds` times training steps with this protocol: for each task it builds the program
the loop trains (:func:`jaxlab.core.step.build_train_program`: the task's optimizer or the loop's
clipped AdamW, the schedule, the task state, the state shardings on the loop's mesh) and times that
jitted step, so a step-time ratio describes the program that was trained. A caller that has built
a task's program already (to train it, or to count its FLOPs) hands it over instead, and the step
that is timed is the one it compiled.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.mesh import AxisRules, MeshConfig, global_batch, make_mesh
from jaxlab.core.optim import LrGroups, default_decay_mask
from jaxlab.core.step import TrainProgram, build_train_program, run_keys
from jaxlab.core.task import Task

__all__ = [
    "StepRunner",
    "StepTiming",
    "Timing",
    "step_runners",
    "step_seconds",
    "time_call",
    "time_interleaved",
]


class Timing(NamedTuple):
    """Seconds per call: the median over repeats, and every repeat's per-call time."""

    median: float
    samples: tuple[float, ...]

    @property
    def spread(self) -> float:
        """Largest minus smallest sample (0 for one sample)."""
        return max(self.samples) - min(self.samples)


def _check(repeats: int, calls: int, warmup: int) -> None:
    if repeats < 1 or calls < 1 or warmup < 0:
        raise ValueError(
            f"need repeats >= 1, calls >= 1, warmup >= 0; got {repeats}, {calls}, {warmup}"
        )


def _timed(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    out = None
    for _ in range(calls):
        out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def time_call(
    fn: Callable[[], Any], *, repeats: int = 5, calls: int = 1, warmup: int = 1
) -> Timing:
    """Median seconds per call of ``fn()`` (see the module docstring for the protocol)."""
    return time_interleaved({"fn": fn}, repeats=repeats, calls=calls, warmup=warmup)["fn"]


def time_interleaved(
    fns: Mapping[str, Callable[[], Any]], *, repeats: int = 5, calls: int = 1, warmup: int = 1
) -> dict[str, Timing]:
    """Times every callable of ``fns`` in interleaved rounds; returns a :class:`Timing` per name."""
    _check(repeats, calls, warmup)
    for fn in fns.values():
        for _ in range(warmup):
            jax.block_until_ready(fn())
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(_timed(fn, calls))
    return {name: Timing(statistics.median(s), tuple(s)) for name, s in samples.items()}


class StepTiming(NamedTuple):
    """One task's train step: its :class:`Timing`, and its state hooks' median seconds amortised
    over the steps between them (``sum(hook seconds / every)``; 0 without hooks)."""

    step: Timing
    hooks_per_step: float


class StepRunner:
    """Calls a donating ``(state, *args) -> (state, out)`` step, keeping the state it returns.

    Calling it runs one step on the current :attr:`state` and returns the step's second output.
    """

    def __init__(self, fn: Callable, state: Any, *args: Any):
        self.fn, self.state, self.args = fn, state, args

    def __call__(self) -> Any:
        self.state, out = self.fn(self.state, *self.args)
        return out


def step_runners(
    tasks: Mapping[str, Task],
    batch: Mapping[str, np.ndarray],
    train_cfg: TrainConfig,
    *,
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
    decay_mask: Callable[[Any], Any] | None = default_decay_mask,
    lr_groups: Mapping[str, LrGroups] | None = None,
    programs: Mapping[str, TrainProgram] | None = None,
) -> dict[str, tuple[StepRunner, list[tuple[int, StepRunner]]]]:
    """Per task: a runner of its train step and ``(every, runner)`` per state hook.

    Each task's state is created as the loop creates it for ``train_cfg.seed`` (same key, same
    shardings); the train step gets ``batch`` (put on ``mesh`` as the loop puts its batches) and
    the loop's key of step 0, so the first call is the loop's first step on that batch. Call the
    runners inside ``jax.set_mesh(mesh)`` and ``nnx.logical_axis_rules(rules.as_tuple())``.
    A task named in ``programs`` runs that program (built on ``mesh`` and ``rules`` with
    :func:`jaxlab.core.step.build_train_program` for ``train_cfg``) instead of a new one.
    """
    init_key, step_key = run_keys(train_cfg.seed)
    device_batch = global_batch(batch, mesh, rules)
    out = {}
    for name, task in tasks.items():
        program = (programs or {}).get(name)
        if program is None:
            program = build_train_program(
                task,
                train_cfg,
                mesh,
                rules,
                init_key=init_key,
                decay_mask=decay_mask,
                lr_groups=(lr_groups or {}).get(name),
            )
        step = StepRunner(
            program.train_step,
            program.init(init_key),
            device_batch,
            jax.random.fold_in(step_key, 0),
        )
        hooks = [
            (hook.every, StepRunner(hook_step, program.init(init_key), np.int32(hook.every)))
            for hook, hook_step in program.hook_steps
        ]
        out[name] = (step, hooks)
    return out


def step_seconds(
    tasks: Mapping[str, Task],
    batch: Mapping[str, np.ndarray],
    train_cfg: TrainConfig,
    *,
    mesh_cfg: MeshConfig | None = None,
    rules: AxisRules | None = None,
    decay_mask: Callable[[Any], Any] | None = default_decay_mask,
    lr_groups: Mapping[str, LrGroups] | None = None,
    programs: Mapping[str, TrainProgram] | None = None,
    repeats: int = 5,
    calls: int = 3,
) -> dict[str, StepTiming]:
    """Seconds per train step of each task, in the order of ``tasks``, timed side by side.

    Every task's step is the one :func:`jaxlab.core.loop.run_training` trains with the same
    arguments (``mesh_cfg``, ``rules``, ``decay_mask``, and ``lr_groups`` by task name), on the
    same ``batch``; a task named in ``programs`` is timed on that program, already built by the
    caller (see :func:`step_runners`; a program compiled already is not compiled again). Train
    steps are timed in interleaved rounds (``repeats`` rounds of ``calls`` consecutive steps after
    one warm-up call); state hooks are timed after them the same way, one call per sample.
    """
    mesh, rules = make_mesh(mesh_cfg), rules or AxisRules()
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):
        runners = step_runners(
            tasks,
            batch,
            train_cfg,
            mesh=mesh,
            rules=rules,
            decay_mask=decay_mask,
            lr_groups=lr_groups,
            programs=programs,
        )
        steps = time_interleaved(
            {name: step for name, (step, _) in runners.items()}, repeats=repeats, calls=calls
        )
        hook_runners = {
            (name, i): runner
            for name, (_, hooks) in runners.items()
            for i, (_, runner) in enumerate(hooks)
        }
        hooks = time_interleaved(hook_runners, repeats=repeats, calls=1) if hook_runners else {}
    out = {}
    for name in tasks:
        every_hook = enumerate(runners[name][1])
        amortised = sum((hooks[name, i].median / every for i, (every, _) in every_hook), 0.0)
        out[name] = StepTiming(steps[name], amortised)
    return out
