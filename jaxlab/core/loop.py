"""The shared training loop: ``run_training(task, cfg, workdir)``.

A readable function in banner-marked stages (big_vision style), not a framework:

1. *setup* — multi-process start-up if asked, the workdir (checked, then locked for the run), the
   mesh, the optimizer (the task's own, or AdamW from :class:`~jaxlab.core.config.TrainConfig`);
2. *init or resume* — model, optimizer and task state are created inside ``jax.jit`` with
   ``out_shardings`` from their logical axis names, or restored from the newest readable checkpoint
   together with the data-iterator position, the RNG key and the loss-window accumulators;
3. *steps* — a jitted, donating train step over ``(state, batch, key)`` (gradient accumulation over
   micro-batches inside it when ``train.grad_accum_steps > 1``), then the task's every-k-steps state
   hooks; the per-step key is ``fold_in(seed_key, step)``, so a resumed run draws exactly the keys
   an uninterrupted one would;
4. *log / eval / checkpoint* — at fixed step multiples. Before any checkpoint is written, every
   step's loss, gradient norm and "all parameters finite" flag (a reduction inside the jitted step)
   are read back to the host, so a diverged step stops the run with a one-line
   :class:`~jaxlab.core.errors.RunError` and never overwrites the last good checkpoint.

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

import math
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import TrainConfig, to_dict
from jaxlab.core.errors import ConfigError, RunError
from jaxlab.core.mesh import (
    AxisRules,
    MeshConfig,
    batch_shards,
    global_batch,
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
    # ------------------------------------------------------------------ setup
    is_main = jax.process_index() == 0
    say = print if verbose and is_main else (lambda *a, **k: None)
    check_batch_fits(cfg, batch_shards(mesh, rules))
    units, unit = units_per_example(task)
    units_per_step = cfg.batch_size * units
    for hook in getattr(task, "state_hooks", tuple)():
        if hook.every <= 0:
            raise ConfigError(f"{hook.name}: StateHook.every must be positive, got {hook.every}")

    seed_key = jax.random.key(cfg.seed)
    init_key, step_key = jax.random.split(seed_key)

    def build(schedule_steps: int):
        """The optimizer, state and jitted steps for a schedule of ``schedule_steps`` (shared with
        the step timer, :func:`jaxlab.core.timing.step_seconds`)."""
        return build_train_program(
            task,
            cfg,
            mesh,
            rules,
            init_key=init_key,
            schedule_steps=schedule_steps,
            decay_mask=decay_mask,
            lr_groups=lr_groups,
        )

    program = program or build(cfg.steps)
    schedule, graphdef, shardings = program.schedule, program.graphdef, program.shardings
    num_params = sum(
        x.size
        for x in jax.tree.leaves(
            nnx.state(nnx.merge(graphdef, program.abstract_state)[0], nnx.Param)
        )
    )

    # ------------------------------------------------------------------ init or resume
    iterator = task.train_iterator(cfg.batch_size, cfg.seed)
    ckpt = Checkpointer(workdir / "checkpoints", keep=cfg.keep_checkpoints)
    writer = None
    try:
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            program.abstract_state,
            shardings,
        )
        restored = ckpt.restore(abstract, iterator)
        last_row: dict[str, float] = {}
        last_eval: dict[str, float] = {}
        schedule_steps = cfg.steps
        if restored is None:
            state = program.init(init_key)
            start, window = 0, {"sum": {}, "count": 0}
        else:
            state, start, window = restored.state, restored.step, restored.meta["window"]
            last_row, last_eval = restored.meta["last_row"], restored.meta["last_eval"]
            if start > cfg.steps:
                raise ConfigError(
                    f"train.steps={cfg.steps} is below step {start}, which the run in {workdir} "
                    f"has reached; set train.steps >= {start}, or use another --workdir"
                )
            schedule_steps = int(
                restored.meta.get("schedule_steps", restored.meta["train"]["steps"])
            )
            say(f"resumed from step {start} in {workdir}")
            if schedule_steps != cfg.steps:
                program = build(schedule_steps)
                schedule, graphdef = program.schedule, program.graphdef
                after = (
                    f"steps {schedule_steps + 1}-{cfg.steps} run at its final learning rate "
                    f"{float(schedule(schedule_steps)):.3g}"
                    if cfg.steps > schedule_steps
                    else f"the run stops at step {cfg.steps}, before the schedule ends"
                )
                say(
                    f"train.steps={cfg.steps}, but this run started with {schedule_steps}: the "
                    f"learning-rate schedule keeps its length of {schedule_steps} steps; {after}"
                )
        if is_main:
            writer = MetricWriter(
                workdir,
                start_step=start,
                tensorboard=cfg.tensorboard,
                wandb=cfg.wandb,
                config=config_record,
                project=cfg.wandb_project,
            )

        # -------------------------------------------------------------- compiled steps
        train_step, hook_steps = program.train_step, program.hook_steps
        eval_step = jax.jit(make_eval_step(task, graphdef), in_shardings=(shardings, None))
        eval_data = task.eval_batches(cfg.batch_size, cfg.eval_batches)

        def evaluate() -> dict[str, float]:
            totals: dict[str, float] = {}
            for batch in eval_data:
                metrics = jax.device_get(eval_step(state, global_batch(batch, mesh, rules)))
                for name, value in metrics.items():
                    totals[name] = totals.get(name, 0.0) + float(value)
            return {f"eval_{name}": v / len(eval_data) for name, v in totals.items()}

        # -------------------------------------------------------------- steps
        # (step, metrics, [(hook name, finite flag)]) not yet read back to the host.
        pending: list[tuple[int, dict[str, jax.Array], list[tuple[str, jax.Array]]]] = []
        t_window, steps_in_window = time.perf_counter(), 0
        t_start = time.perf_counter()

        def drain() -> None:
            """Reads pending step metrics to the host; stops the run on any non-finite value."""
            for step, metrics, hook_flags in jax.device_get(pending):
                problem = _non_finite(metrics, bool(metrics.pop(STATE_FINITE)))
                problem = problem or next(
                    (f"train state after {name}" for name, ok in hook_flags if not ok), None
                )
                if problem:
                    last = ckpt.steps()[-1] if ckpt.steps() else None
                    raise _diverged(problem, step, last, cfg)
                for name, value in metrics.items():
                    window["sum"][name] = window["sum"].get(name, 0.0) + float(value)
                window["count"] += 1
            pending.clear()

        for step in range(start, cfg.steps):
            batch = global_batch(next(iterator), mesh, rules)
            state, metrics = train_step(state, batch, jax.random.fold_in(step_key, step))
            done = step + 1
            pending.append((done, metrics, []))
            for hook, hook_step in hook_steps:
                if done % hook.every == 0:
                    state, finite = hook_step(state, np.int32(done))
                    pending[-1][2].append((hook.name, finite))
            steps_in_window += 1
            is_last = done == cfg.steps
            log_now = done % cfg.log_every == 0 or is_last
            eval_now = done % cfg.eval_every == 0 or is_last
            ckpt_now = done % cfg.checkpoint_every == 0 or is_last
            if not (log_now or eval_now or ckpt_now):
                continue
            drain()
            row: dict[str, float] = {}
            row_perf: dict[str, float] = {}
            if log_now and window["count"]:
                row = {name: v / window["count"] for name, v in window["sum"].items()}
                row["learning_rate"] = float(schedule(done - 1))
                window = {"sum": {}, "count": 0}
                elapsed = time.perf_counter() - t_window
                rate = steps_in_window * units_per_step / max(elapsed, 1e-9)
                eta = (cfg.steps - done) * elapsed / max(steps_in_window, 1)
                say(
                    f"step {done}/{cfg.steps} | loss {row['loss']:.4f} | "
                    f"{rate:,.0f} {unit}/s | ETA {_format_eta(eta)}",
                    flush=True,
                )
                row_perf = {f"{unit}_per_second": rate}
            if eval_now:
                last_eval = evaluate()
                row.update(last_eval)
                shown = ", ".join(f"{name} {v:.4f}" for name, v in last_eval.items())
                say(f"  eval @ {done}: {shown}", flush=True)
            if row:
                row[f"{unit}_seen"] = done * units_per_step
                last_row = row
                if writer is not None:
                    writer.write(done, {**row, **row_perf})
                for hook in hooks:
                    hook(done, row)
            if ckpt_now:
                meta = {
                    "step": done,
                    "seed": cfg.seed,
                    "schedule_steps": schedule_steps,
                    "window": window,
                    "last_row": last_row,
                    "last_eval": last_eval,
                    "config": dict(config_record or {}),
                    "train": to_dict(cfg),
                }
                ckpt.save(done, state, iterator, meta)
            # Throughput counts training steps only, not the eval and checkpoint time above.
            t_window, steps_in_window = time.perf_counter(), 0
    finally:
        ckpt.close()
        if writer is not None:
            writer.close()

    wall = time.perf_counter() - t_start
    return {
        "final_step": cfg.steps,
        "resumed_from": start,
        "num_params": int(num_params),
        f"{unit}_seen": cfg.steps * units_per_step,
        "schedule_steps": schedule_steps,
        "train": {name: v for name, v in last_row.items() if not name.startswith("eval_")},
        "eval": last_eval,
        "train_seconds_this_process": round(wall, 2),
        "steps_per_second": round((cfg.steps - start) / max(wall, 1e-9), 3),
    }
