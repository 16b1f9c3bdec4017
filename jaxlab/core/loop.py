"""The shared training loop: ``run_training(task, cfg, workdir)``.

A readable function, not a framework: one named function per stage (big_vision's stages), each
readable and testable alone. What crosses stages is two small values: ``_Run``, fixed once the run
starts (config, compiled program, checkpointer, metrics writer), and ``_Progress``, what the stages
change (the train state, the step, metrics not yet read back, the loss window, the last rows).

1. *setup* (``run_training``, ``_setup``) — multi-process start-up if asked, the workdir (checked,
   then locked for the run), the mesh, the optimizer (the task's own, or AdamW from
   :class:`~jaxlab.core.config.TrainConfig`);
2. *init or resume* (``_resume``, ``_compile_ahead``) — model, optimizer and task state are
   created inside ``jax.jit`` with ``out_shardings`` from their logical axis names, or restored
   from the newest readable checkpoint together with the data-iterator position and the
   loss-window accumulators (the RNG key is rebuilt from the recorded seed); the init, train and
   eval programs compile in background threads while the next one is traced;
3. *steps* (``_step``) — a jitted, donating train step over ``(state, batch, key)`` (gradient
   accumulation over micro-batches inside it when ``train.grad_accum_steps > 1``), then the task's
   every-k-steps state hooks; the per-step key is ``fold_in(seed_key, step)``, so a resumed run
   draws exactly the keys an uninterrupted one would;
4. *log / eval / checkpoint* (``_log_eval_checkpoint``) — at fixed step multiples (``_due``).
   Before any checkpoint is written, every step's loss, gradient norm and "all parameters finite"
   flag (a reduction inside the jitted step) are read back to the host (``_drain``), so a diverged
   step stops the run with a one-line :class:`~jaxlab.core.errors.RunError` and never overwrites
   the last good checkpoint.

A run killed at any moment and restarted with the same command therefore ends with the same
``metrics.jsonl`` as an uninterrupted run (the kill/resume test checks this with SIGKILL).

Resume rules. The learning-rate schedule keeps the length of the run that started it (recorded in
each checkpoint as ``schedule_steps``): raising ``train.steps`` on resume extends the run and the
extra steps run at the final learning rate (a printed line says so), instead of stretching the
cosine mid-run. ``train.steps`` below the checkpoint's step is refused. The schedule's values
(``train.learning_rate``, ``warmup_steps``, ``min_lr_ratio``) and ``grad_clip`` are read from the
current config, so a diverged run is resumed with a lower learning rate by changing only that.

The loop knows nothing about methods: it drives any object satisfying the
:class:`~jaxlab.core.task.Task` protocol (:mod:`jaxlab.core.task` has the details)::

    build_model(rngs) -> nnx.Module
    loss(model, batch, key) -> (objective, metrics)      # metrics include "loss"
    train_iterator(batch_size, seed) -> checkpointable iterator of host batches
    eval_batches(batch_size, num_batches) -> list of host batches
    units_per_example() -> (count, unit name)          # e.g. (seq_len, "tokens")
    # optional:
    optimizer(cfg, schedule) -> optax.GradientTransformation   # instead of the loop's AdamW
    init_task_state(key) -> pytree   # then loss(model, batch, key, task_state)
                                     #        -> (objective, metrics, new_task_state)
    state_hooks() -> [StateHook(every=k, fn=lambda train_state, step: train_state)]

Task state and hook changes are part of every checkpoint, so kill and resume give the same run.
Plain callables on the logged rows (``hooks=``) read metrics and cannot change the state.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.compile_options import short_run_options, small_jit
from jaxlab.core.config import TrainConfig, to_dict
from jaxlab.core.errors import ConfigError, RunError
from jaxlab.core.mesh import (
    AxisRules,
    MeshConfig,
    batch_shards,
    global_batch,
    global_batch_shapes,
    make_mesh,
    maybe_initialize_distributed,
)
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.optim import default_decay_mask
from jaxlab.core.step import (
    STATE_FINITE,
    TrainProgram,
    build_train_program,
    create_state,
    make_eval_step,
    make_train_step,
    run_keys,
    sharded_shapes,
)
from jaxlab.core.task import StateHook, Task, TrainState, units_per_example
from jaxlab.core.workdir import prepare_workdir, workdir_lock

__all__ = [
    "StateHook",
    "check_batch_fits",
    "Task",
    "TrainState",
    "create_state",
    "make_train_step",
    "run_training",
]


def _format_eta(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
    )


def _non_finite(metrics: Mapping[str, Any], finite: bool) -> str | None:
    """What went non-finite in one step, or None."""
    loss, grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
    if not math.isfinite(loss):
        return f"loss ({loss})"
    if not math.isfinite(grad_norm):
        return f"gradient norm ({grad_norm}) with a finite loss"
    if not finite:
        return "parameters after the update (finite loss and gradient norm)"
    return None


def _diverged(what: str, step: int, last: int | None, cfg: TrainConfig) -> RunError:
    """The one-line error of a diverged run, naming a re-run that works."""
    if last is None:
        kept, resume = "no checkpoint was written", "it starts again from step 0"
    else:
        kept, resume = (
            f"the last good checkpoint (step {last}) is kept",
            f"it resumes from step {last}",
        )
    return RunError(
        f"non-finite {what} at step {step}; {kept}. Re-run the same command with "
        f"--set train.learning_rate={cfg.learning_rate / 10:.3g} (train.warmup_steps and "
        f"train.grad_clip may change too): {resume}. If it recurs, check the data"
    )


def check_batch_fits(
    cfg: TrainConfig, shards: int, key: str = "train", mesh_keys: bool = True
) -> None:
    """Checks that ``cfg``'s batch splits into its micro-batches over ``shards`` devices.

    Args:
      cfg: the loop's fields (``batch_size``, ``grad_accum_steps``).
      shards: the data-parallel devices (:func:`jaxlab.core.mesh.batch_shards`).
      key: where ``cfg`` sits in the experiment's config, for the message.
      mesh_keys: whether the message may suggest ``mesh.data`` / ``mesh.fsdp`` (the experiment has
        a ``mesh`` group).

    Raises:
      ConfigError: one line naming ``{key}.batch_size`` and the multiple to use.
    """
    k = cfg.grad_accum_steps
    if not cfg.batch_size % (shards * k):
        return
    mesh = " or set mesh.data / mesh.fsdp" if mesh_keys else ""
    raise ConfigError(
        f"{key}.batch_size={cfg.batch_size} does not divide over the {shards} data-parallel "
        f"devices; use a multiple of it{mesh}"
        if k == 1
        else f"{key}.batch_size={cfg.batch_size} does not split into {key}.grad_accum_steps={k} "
        f"micro-batches that divide over the {shards} data-parallel devices; use a multiple of "
        f"{k * shards}"
    )


def run_training(
    task: Task,
    cfg: TrainConfig,
    workdir: str | pathlib.Path,
    *,
    mesh_cfg: MeshConfig | None = None,
    rules: AxisRules | None = None,
    config_record: Mapping[str, Any] | None = None,
    decay_mask: Callable[[Any], Any] | None = default_decay_mask,
    lr_groups: tuple[Callable[[Any], Any], Mapping[str, float]] | None = None,
    hooks: Sequence[Callable[[int, dict[str, float]], None]] = (),
    verbose: bool = True,
    program: TrainProgram | None = None,
) -> dict[str, Any]:
    """Trains ``task`` for ``cfg.steps`` steps in ``workdir``, resuming from its checkpoints.

    Args:
      task: the method (see :class:`~jaxlab.core.task.Task`).
      cfg: the loop's fields.
      workdir: run directory: ``checkpoints/``, ``metrics.jsonl``, ``tb/`` are written there.
      mesh_cfg, rules: device mesh and logical-axis rules (default: data parallel on all devices).
      config_record: the experiment's resolved config, stored in each checkpoint and in wandb.
      decay_mask: which parameters get weight decay (default: rank >= 2; unused when the task
        supplies its optimizer).
      lr_groups: per-parameter learning-rate groups (see :func:`jaxlab.core.optim.make_optimizer`;
        unused when the task supplies its optimizer).
      hooks: plain callables ``hook(step, row)`` called with every logged metrics row.
      verbose: print progress lines (process 0 only).
      program: ``task``'s program, built by the caller with
        :func:`~jaxlab.core.step.build_train_program` from these arguments (``cfg`` with any seed,
        the mesh of ``mesh_cfg``, ``rules``, ``decay_mask``, ``lr_groups``), so that several runs
        (the seeds of a sweep) and the FLOP count or step timer of the same program share one
        compiled step; None builds it here. A resumed run whose schedule keeps another length
        builds its own either way.

    Returns:
      The summary: final step, last train and eval metrics, parameter count, throughput, and the
      schedule length in use.

    Raises:
      RunError: a non-finite loss, gradient or parameter (the last good checkpoint is kept),
        unreadable checkpoints, or another run holding the workdir.
      ConfigError: a workdir that cannot be used, a batch that does not divide over the devices,
        or ``cfg.steps`` below the step the run has reached.
    """
    maybe_initialize_distributed()
    workdir = prepare_workdir(workdir)
    mesh = make_mesh(mesh_cfg)
    rules = rules or AxisRules()
    # The mesh and the rules are in context while steps are traced, so models can pin activation
    # shardings by logical name (jaxlab.core.mesh.constrain).
    with workdir_lock(workdir), jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):
        return _run_training(
            task,
            cfg,
            workdir,
            mesh,
            rules,
            config_record=config_record,
            decay_mask=decay_mask,
            lr_groups=lr_groups,
            hooks=hooks,
            verbose=verbose,
            program=program,
        )


# ---------------------------------------------------------------------------- what crosses stages


class _Setup(NamedTuple):
    """What the setup stage fixes before the workdir is read."""

    build: Callable[..., TrainProgram]  # build(schedule_steps=n): the program for that schedule
    program: TrainProgram  # built for ``cfg.steps``
    init_key: jax.Array
    step_key: jax.Array  # step n trains with fold_in(step_key, n)
    num_params: int
    unit: str  # what throughput counts: "tokens", "examples", ...
    units_per_step: int
    say: Callable[..., None]  # print on process 0 when verbose, else nothing


class _Run(NamedTuple):
    """What the step and log / eval / checkpoint stages read and never rebind."""

    cfg: TrainConfig
    mesh: jax.sharding.Mesh
    rules: AxisRules
    setup: _Setup
    program: TrainProgram  # for the schedule in use (a resumed run keeps its own length)
    schedule_steps: int
    iterator: Any  # the task's checkpointable iterator of host batches
    ckpt: Checkpointer
    writer: MetricWriter | None  # process 0 only
    eval_step: Callable
    eval_data: list[Any]
    hooks: Sequence[Callable[[int, dict[str, float]], None]]
    config_record: Mapping[str, Any] | None


@dataclasses.dataclass
class _Progress:
    """What the stages change as the run goes (the host side of the loop, mutated in place)."""

    state: Any  # the train state, on the devices
    step: int  # steps done
    window: dict[str, Any]  # {"sum": {metric: total}, "count": steps} since the last logged row
    last_row: dict[str, float]
    last_eval: dict[str, float]
    # (step, metrics, [(hook name, finite flag)]) not yet read back to the host.
    pending: list[tuple[int, dict[str, Any], list[tuple[str, Any]]]] = dataclasses.field(
        default_factory=list
    )
    t_window: float = 0.0  # when the throughput window began
    steps_in_window: int = 0
    next_batch: dict[str, jax.Array] | None = None  # taken from the iterator for the next step
    # Programs compiling in the background (_compile_ahead): a stage waits before its first call.
    compiling: dict[str, concurrent.futures.Future] = dataclasses.field(default_factory=dict)


class _Due(NamedTuple):
    """What happens after a step: a metrics row, an eval, a checkpoint."""

    log: bool
    eval: bool
    checkpoint: bool


# ---------------------------------------------------------------------------- the stages


def _run_training(
    task: Task,
    cfg: TrainConfig,
    workdir: pathlib.Path,
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
    *,
    config_record: Mapping[str, Any] | None,
    decay_mask: Callable[[Any], Any] | None,
    lr_groups: tuple[Callable[[Any], Any], Mapping[str, float]] | None,
    hooks: Sequence[Callable[[int, dict[str, float]], None]],
    verbose: bool,
    program: TrainProgram | None,
) -> dict[str, Any]:
    """The stages in order: setup, init or resume, then step and log / eval / checkpoint."""
    setup = _setup(task, cfg, mesh, rules, decay_mask, lr_groups, verbose, program)
    iterator = task.train_iterator(cfg.batch_size, cfg.seed)
    ckpt = Checkpointer(workdir / "checkpoints", keep=cfg.keep_checkpoints)
    # The first programs compile (or load from the compilation cache) in background threads while
    # this one traces the next: tracing is Python, compiling is not (a short run's start-up).
    compiler = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="jaxlab-compile")
    writer = None
    try:
        resumed = _resume(setup, cfg, workdir, ckpt, iterator)
        if resumed is None:
            program, schedule_steps = setup.program, cfg.steps
            program.init.compile_in(compiler)
        else:
            program, schedule_steps, progress = resumed
        step = 0 if resumed is None else progress.step
        ahead = _compile_ahead(compiler, task, cfg, setup, program, iterator, step, mesh, rules)
        if resumed is None:
            progress = _Progress(program.init(setup.init_key), 0, {"sum": {}, "count": 0}, {}, {})
        progress.next_batch, progress.compiling = ahead.first_batch, ahead.compiling
        start = progress.step
        writer = _open_writer(workdir, cfg, start, config_record)
        run = _Run(
            cfg,
            mesh,
            rules,
            setup,
            program,
            schedule_steps,
            iterator,
            ckpt,
            writer,
            ahead.eval_step,
            ahead.eval_data,
            hooks,
            config_record,
        )
        progress.t_window = t_start = time.perf_counter()
        while progress.step < cfg.steps:
            _step(run, progress)
            _log_eval_checkpoint(run, progress)
    finally:
        compiler.shutdown(wait=False, cancel_futures=True)
        try:
            ckpt.close()  # may finish the last save (whose error, a full disk, is raised here)
        finally:
            if writer is not None:
                writer.close()
    return _summary(run, progress, start, time.perf_counter() - t_start)


def _setup(
    task: Task,
    cfg: TrainConfig,
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
    decay_mask: Callable[[Any], Any] | None,
    lr_groups: tuple[Callable[[Any], Any], Mapping[str, float]] | None,
    verbose: bool,
    program: TrainProgram | None,
) -> _Setup:
    """Stage 1: checks the batch and the state hooks, splits the seed, builds the program (or
    takes the one the caller built)."""
    is_main = jax.process_index() == 0
    say = print if verbose and is_main else (lambda *a, **k: None)
    check_batch_fits(cfg, batch_shards(mesh, rules))
    units, unit = units_per_example(task)
    for hook in getattr(task, "state_hooks", tuple)():
        if hook.every <= 0:
            raise ConfigError(f"{hook.name}: StateHook.every must be positive, got {hook.every}")
    init_key, step_key = run_keys(cfg.seed)
    # The same builder as the step timer's (jaxlab.core.timing.step_seconds).
    build = functools.partial(
        build_train_program,
        task,
        cfg,
        mesh,
        rules,
        init_key=init_key,
        decay_mask=decay_mask,
        lr_groups=lr_groups,
        # A short CPU run (a smoke test) compiles fast; a real run keeps XLA's defaults.
        compiler_options=functools.partial(
            short_run_options,
            mesh.devices.flat[0].platform,
            cfg.steps,
            units_per_step=cfg.batch_size * units,
        ),
    )
    program = program or build(schedule_steps=cfg.steps)
    model = nnx.merge(program.graphdef, program.abstract_state)[0]
    num_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    return _Setup(build, program, init_key, step_key, num_params, unit, cfg.batch_size * units, say)


def _resume(
    setup: _Setup, cfg: TrainConfig, workdir: pathlib.Path, ckpt: Checkpointer, iterator: Any
) -> tuple[TrainProgram, int, _Progress] | None:
    """Stage 2: the newest readable checkpoint (with the iterator's position, the loss window and
    the last rows), with the program and schedule length the run keeps; None for a fresh run."""
    program = setup.program
    abstract = sharded_shapes(program.abstract_state, program.shardings)
    restored = ckpt.restore(abstract, iterator)
    if restored is None:
        return None
    start, meta = restored.step, restored.meta
    if start > cfg.steps:
        raise ConfigError(
            f"train.steps={cfg.steps} is below step {start}, which the run in {workdir} "
            f"has reached; set train.steps >= {start}, or use another --workdir"
        )
    schedule_steps = int(meta.get("schedule_steps", meta["train"]["steps"]))
    setup.say(f"resumed from step {start} in {workdir}")
    if schedule_steps != cfg.steps:
        program = setup.build(schedule_steps=schedule_steps)
        after = (
            f"steps {schedule_steps + 1}-{cfg.steps} run at its final learning rate "
            f"{float(program.schedule(schedule_steps)):.3g}"
            if cfg.steps > schedule_steps
            else f"the run stops at step {cfg.steps}, before the schedule ends"
        )
        setup.say(
            f"train.steps={cfg.steps}, but this run started with {schedule_steps}: the "
            f"learning-rate schedule keeps its length of {schedule_steps} steps; {after}"
        )
    progress = _Progress(restored.state, start, meta["window"], meta["last_row"], meta["last_eval"])
    return program, schedule_steps, progress


class _Ahead(NamedTuple):
    """The eval step and data, and what :func:`_compile_ahead` started."""

    eval_step: Callable
    eval_data: list[Any]
    first_batch: dict[str, jax.Array] | None  # the next step's batch, taken from the iterator
    compiling: dict[str, concurrent.futures.Future]


def _compile_ahead(
    pool: concurrent.futures.Executor,
    task: Task,
    cfg: TrainConfig,
    setup: _Setup,
    program: TrainProgram,
    iterator: Any,
    step: int,
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
) -> _Ahead:
    """Traces and lowers the train step (on the next batch) and the eval step here, and compiles
    them in ``pool``; the stage that first calls one waits for its compile
    (``_Progress.compiling``).

    The programs are the ones the calls compile (same function, arguments, shardings and options),
    so a call after the compile finds it in ``jax.jit``'s cache.
    """
    # The state's layout does not depend on the schedule: the first program's shardings.
    eval_step = jax.jit(
        make_eval_step(task, program.graphdef),
        in_shardings=(setup.program.shardings, None),
        compiler_options=program.compiler_options,
    )
    eval_data = task.eval_batches(cfg.batch_size, cfg.eval_batches)
    if step >= cfg.steps:
        return _Ahead(eval_step, eval_data, None, {})
    state = sharded_shapes(program.abstract_state, program.shardings)
    batch = global_batch(next(iterator), mesh, rules)
    key = _step_key(setup.step_key, step)
    compiling = {
        "train_step": pool.submit(program.train_step.trace(state, batch, key).lower().compile)
    }
    if eval_data:  # traced on the batch's shapes: _evaluate copies it to the devices
        first = global_batch_shapes(eval_data[0], mesh, rules)
        compiling["eval_step"] = pool.submit(eval_step.trace(state, first).lower().compile)
    return _Ahead(eval_step, eval_data, batch, compiling)


def _open_writer(
    workdir: pathlib.Path, cfg: TrainConfig, start: int, config_record: Mapping[str, Any] | None
) -> MetricWriter | None:
    """The metrics writer on process 0 (rows past ``start`` are dropped), ``None`` elsewhere."""
    if jax.process_index() != 0:
        return None
    return MetricWriter(
        workdir,
        start_step=start,
        tensorboard=cfg.tensorboard,
        wandb=cfg.wandb,
        config=config_record,
        project=cfg.wandb_project,
    )


@functools.cache  # built on first use: small_jit asks for the backend, which an import must not
def _fold_in() -> Callable[[jax.Array, np.uint32], jax.Array]:
    return small_jit(jax.random.fold_in)


def _step_key(step_key: jax.Array, step: int) -> jax.Array:
    """Step ``step``'s key, ``fold_in(step_key, step)``, as one small program: eagerly it is two
    dispatches (the step made an array, then the fold) over every device of the mesh, which on 8
    CPU devices cost more than a small model's whole step."""
    return _fold_in()(step_key, np.uint32(step))


def _step(run: _Run, progress: _Progress) -> None:
    """Stage 3: one jitted train step and the state hooks due after it; nothing is read back."""
    batch, progress.next_batch = progress.next_batch, None
    if batch is None:
        batch = global_batch(next(run.iterator), run.mesh, run.rules)
    key = _step_key(run.setup.step_key, progress.step)
    _compiled(progress, "train_step")
    progress.state, metrics = run.program.train_step(progress.state, batch, key)
    progress.step += 1
    progress.pending.append((progress.step, metrics, []))
    for hook, hook_step in run.program.hook_steps:
        if progress.step % hook.every == 0:
            progress.state, finite = hook_step(progress.state, np.int32(progress.step))
            progress.pending[-1][2].append((hook.name, finite))
    progress.steps_in_window += 1


def _drain(progress: _Progress, ckpt: Checkpointer, cfg: TrainConfig) -> None:
    """Reads the pending steps' metrics to the host and adds them to the loss window.

    Raises:
      RunError: a step's loss, gradient norm or parameters, or the state after a hook, are not
        finite (nothing is saved: the caller checkpoints only after this returns).
    """
    for step, metrics, hook_flags in jax.device_get(progress.pending):
        problem = _non_finite(metrics, bool(metrics.pop(STATE_FINITE)))
        problem = problem or next(
            (f"train state after {name}" for name, ok in hook_flags if not ok), None
        )
        if problem:
            last = ckpt.steps()[-1] if ckpt.steps() else None
            raise _diverged(problem, step, last, cfg)
        for name, value in metrics.items():
            progress.window["sum"][name] = progress.window["sum"].get(name, 0.0) + float(value)
        progress.window["count"] += 1
    progress.pending.clear()


def _due(done: int, cfg: TrainConfig) -> _Due:
    """What is due after ``done`` steps: each at its step multiple, and all of them at the end."""
    is_last = done == cfg.steps
    return _Due(
        log=done % cfg.log_every == 0 or is_last,
        eval=done % cfg.eval_every == 0 or is_last,
        checkpoint=done % cfg.checkpoint_every == 0 or is_last,
    )


def _log_eval_checkpoint(run: _Run, progress: _Progress) -> None:
    """Stage 4: when due, drains the pending steps, then logs, evaluates and checkpoints."""
    due = _due(progress.step, run.cfg)
    if not any(due):
        return
    _drain(progress, run.ckpt, run.cfg)
    row: dict[str, float] = {}
    row_perf: dict[str, float] = {}
    if due.log and progress.window["count"]:
        row, row_perf = _train_row(run, progress)
    if due.eval:
        progress.last_eval = _evaluate(run, progress)
        row.update(progress.last_eval)
        shown = ", ".join(f"{name} {v:.4f}" for name, v in progress.last_eval.items())
        run.setup.say(f"  eval @ {progress.step}: {shown}", flush=True)
    if row:
        row[f"{run.setup.unit}_seen"] = progress.step * run.setup.units_per_step
        progress.last_row = row
        if run.writer is not None:
            run.writer.write(progress.step, {**row, **row_perf})
        for hook in run.hooks:
            hook(progress.step, row)
    if due.checkpoint:
        # The last save (no step follows to donate the state) is finished where the checkpointer
        # closes, or after the code that follows the run (jaxlab.core.finishing).
        last = progress.step == run.cfg.steps
        meta = _checkpoint_meta(run, progress)
        run.ckpt.save(progress.step, progress.state, run.iterator, meta, wait=not last)
    # Throughput counts training steps only, not the eval and checkpoint time above.
    progress.t_window, progress.steps_in_window = time.perf_counter(), 0


@functools.lru_cache(maxsize=8)
def _jitted_schedule(schedule: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``schedule`` as one small program (eagerly, each of its ops compiles on its own)."""
    return small_jit(schedule)


def _train_row(run: _Run, progress: _Progress) -> tuple[dict[str, float], dict[str, float]]:
    """The loss window's means and learning rate (the window starts again), and the throughput;
    prints the progress line."""
    row = {name: v / progress.window["count"] for name, v in progress.window["sum"].items()}
    row["learning_rate"] = float(_jitted_schedule(run.program.schedule)(progress.step - 1))
    progress.window = {"sum": {}, "count": 0}
    elapsed = time.perf_counter() - progress.t_window
    rate = progress.steps_in_window * run.setup.units_per_step / max(elapsed, 1e-9)
    eta = (run.cfg.steps - progress.step) * elapsed / max(progress.steps_in_window, 1)
    run.setup.say(
        f"step {progress.step}/{run.cfg.steps} | loss {row['loss']:.4f} | "
        f"{rate:,.0f} {run.setup.unit}/s | ETA {_format_eta(eta)}",
        flush=True,
    )
    return row, {f"{run.setup.unit}_per_second": rate}


def _compiled(progress: _Progress, name: str) -> None:
    """Waits for the background compile of program ``name`` if one was started (raising its
    error); calls of the program then find it compiled."""
    future = progress.compiling.pop(name, None)
    if future is not None:
        future.result()


def _evaluate(run: _Run, progress: _Progress) -> dict[str, float]:
    """The mean of each eval metric over the task's eval batches, named ``eval_<metric>``."""
    _compiled(progress, "eval_step")
    state = progress.state
    totals: dict[str, float] = {}

    def add(metrics: Any) -> None:
        for name, value in jax.device_get(metrics).items():
            totals[name] = totals.get(name, 0.0) + float(value)

    # Each batch is dispatched before the previous one's result is read: the next batch goes to
    # the devices while the last is evaluated, and at most two are there at a time.
    previous = None
    for batch in run.eval_data:
        current = run.eval_step(state, global_batch(batch, run.mesh, run.rules))
        if previous is not None:
            add(previous)
        previous = current
    if previous is not None:
        add(previous)
    return {f"eval_{name}": v / len(run.eval_data) for name, v in totals.items()}


def _checkpoint_meta(run: _Run, progress: _Progress) -> dict[str, Any]:
    """What a checkpoint keeps beside the state and the iterator, for resume and for readers."""
    return {
        "step": progress.step,
        "seed": run.cfg.seed,
        "schedule_steps": run.schedule_steps,
        "window": progress.window,
        "last_row": progress.last_row,
        "last_eval": progress.last_eval,
        "config": dict(run.config_record or {}),
        "train": to_dict(run.cfg),
    }


def _summary(run: _Run, progress: _Progress, start: int, wall: float) -> dict[str, Any]:
    """What :func:`run_training` returns (see there)."""
    cfg, unit = run.cfg, run.setup.unit
    return {
        "final_step": cfg.steps,
        "resumed_from": start,
        "num_params": int(run.setup.num_params),
        f"{unit}_seen": cfg.steps * run.setup.units_per_step,
        "schedule_steps": run.schedule_steps,
        "train": {name: v for name, v in progress.last_row.items() if not name.startswith("eval_")},
        "eval": progress.last_eval,
        "train_seconds_this_process": round(wall, 2),
        "steps_per_second": round((cfg.steps - start) / max(wall, 1e-9), 3),
    }
