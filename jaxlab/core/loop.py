"""The shared training loop: ``run_training(task, cfg, workdir)``.

A readable function in banner-marked stages (big_vision style), not a framework:

1. *setup* — multi-process start-up if asked, the mesh, the optax optimizer;
2. *init or resume* — the model and optimizer are created inside ``jax.jit`` with
   ``out_shardings`` from their logical axis names, or restored from the newest readable checkpoint
   together with the data-iterator position, the RNG key and the loss-window accumulators;
3. *steps* — a jitted, donating train step over ``(state, batch, key)``; the per-step key is
   ``fold_in(seed_key, step)``, so a resumed run draws exactly the keys an uninterrupted one would;
4. *log / eval / checkpoint* — at fixed step multiples. Losses are read back to the host before any
   checkpoint is written, so a non-finite loss stops the run before it can overwrite the last good
   checkpoint.

A run killed at any moment and restarted with the same command therefore ends with the same
``metrics.jsonl`` as an uninterrupted run (the kill/resume test checks this with SIGKILL).

The loop knows nothing about methods: it drives any object satisfying :class:`Task`.
"""

from __future__ import annotations

import functools
import math
import pathlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np
import optax
from flax import nnx

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import TrainConfig, to_dict
from jaxlab.core.errors import ConfigError, RunError
from jaxlab.core.mesh import (
    AxisRules,
    MeshConfig,
    batch_sharding,
    global_batch,
    make_mesh,
    maybe_initialize_distributed,
    state_shardings,
)
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.optim import default_decay_mask, make_optimizer, make_schedule

__all__ = ["Task", "create_state", "make_train_step", "run_training"]

Batch = Mapping[str, np.ndarray]


class Task(Protocol):
    """What the loop needs from a method.

    ``loss`` returns ``(objective, metrics)``. The objective is differentiated; the metrics
    (scalars, including ``"loss"``) are averaged over the log window and over the eval batches.
    """

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module: ...

    def loss(
        self, model: nnx.Module, batch: Mapping[str, jax.Array], key: jax.Array | None
    ) -> tuple[jax.Array, dict[str, jax.Array]]: ...

    def train_iterator(self, batch_size: int, seed: int) -> Iterator[Batch]: ...

    def eval_batches(self, batch_size: int, num_batches: int) -> Sequence[Batch]: ...

    def tokens_per_example(self) -> int: ...


def create_state(task: Task, tx: optax.GradientTransformation, key: jax.Array) -> Any:
    """Builds the model and its optimizer; returns ``(graphdef, state)`` of the pair."""
    model = task.build_model(nnx.Rngs(params=key))
    return nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))


def make_train_step(task: Task, graphdef: Any) -> Callable:
    """The pure train step ``(state, batch, key) -> (state, metrics)`` for ``jax.jit``.

    Also used to lower and compile a step ahead of time for a target mesh (see the RMT's AOT
    check), so that what is compiled there is exactly what the loop runs.
    """

    def train_step(state, batch, key):
        model, opt = nnx.merge(graphdef, state)
        grad_fn = nnx.value_and_grad(lambda m: task.loss(m, batch, key), has_aux=True)
        (_, metrics), grads = grad_fn(model)
        opt.update(model, grads)
        metrics = {**metrics, "grad_norm": optax.tree.norm(grads)}
        return nnx.split((model, opt))[1], metrics

    return train_step


def _format_eta(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
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
) -> dict[str, Any]:
    """Trains ``task`` for ``cfg.steps`` steps in ``workdir``, resuming from its checkpoints.

    Args:
      task: the method (see :class:`Task`).
      cfg: the loop's fields.
      workdir: run directory: ``checkpoints/``, ``metrics.jsonl``, ``tb/`` are written there.
      mesh_cfg, rules: device mesh and logical-axis rules (default: data parallel on all devices).
      config_record: the experiment's resolved config, stored in each checkpoint and in wandb.
      decay_mask: which parameters get weight decay (default: rank >= 2).
      lr_groups: per-parameter learning-rate groups (see :func:`jaxlab.core.optim.make_optimizer`).
      hooks: plain callables ``hook(step, row)`` called with every logged metrics row.
      verbose: print progress lines (process 0 only).

    Returns:
      The summary: final step, last train and eval metrics, parameter count, throughput.

    Raises:
      RunError: non-finite loss (the last good checkpoint is kept) or unreadable checkpoints.
    """
    maybe_initialize_distributed()
    mesh = make_mesh(mesh_cfg)
    rules = rules or AxisRules()
    # The mesh and the rules are in context while steps are traced, so models can pin activation
    # shardings by logical name (jaxlab.core.mesh.constrain).
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):
        return _run_training(
            task,
            cfg,
            pathlib.Path(workdir),
            mesh,
            rules,
            config_record=config_record,
            decay_mask=decay_mask,
            lr_groups=lr_groups,
            hooks=hooks,
            verbose=verbose,
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
) -> dict[str, Any]:
    # ------------------------------------------------------------------ setup
    is_main = jax.process_index() == 0
    batch_shards = math.prod(
        mesh.shape[a] for a in batch_sharding(mesh, rules).spec[0] or () if a in mesh.shape
    )
    if cfg.batch_size % batch_shards:
        raise ConfigError(
            f"train.batch_size={cfg.batch_size} does not divide over the {batch_shards} "
            "data-parallel devices; use a multiple of it or set mesh.data / mesh.fsdp"
        )
    tx = make_optimizer(cfg, decay_mask, lr_groups=lr_groups)
    schedule = make_schedule(cfg)

    create = functools.partial(create_state, task, tx)
    seed_key = jax.random.key(cfg.seed)
    init_key, step_key = jax.random.split(seed_key)
    graphdef, abstract_state = jax.eval_shape(create, init_key)
    shardings = state_shardings(abstract_state, mesh, rules)
    num_params = sum(
        x.size
        for x in jax.tree.leaves(nnx.state(nnx.merge(graphdef, abstract_state)[0], nnx.Param))
    )

    # ------------------------------------------------------------------ init or resume
    iterator = task.train_iterator(cfg.batch_size, cfg.seed)
    ckpt = Checkpointer(workdir / "checkpoints", keep=cfg.keep_checkpoints)
    abstract = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_state, shardings
    )
    restored = ckpt.restore(abstract, iterator)
    last_row: dict[str, float] = {}
    last_eval: dict[str, float] = {}
    if restored is None:
        state = jax.jit(lambda k: create(k)[1], out_shardings=shardings)(init_key)
        start, window = 0, {"sum": {}, "count": 0}
    else:
        state, start, window = restored.state, restored.step, restored.meta["window"]
        last_row, last_eval = restored.meta["last_row"], restored.meta["last_eval"]
        if verbose and is_main:
            print(f"resumed from step {start} in {workdir}")
    writer = (
        MetricWriter(
            workdir,
            start_step=start,
            tensorboard=cfg.tensorboard,
            wandb=cfg.wandb,
            config=config_record,
            project=cfg.wandb_project,
        )
        if is_main
        else None
    )

    # ------------------------------------------------------------------ compiled steps
    train_step = make_train_step(task, graphdef)

    def eval_step(state, batch):
        model, _ = nnx.merge(graphdef, state)
        return task.loss(model, batch, None)[1]

    train_step = jax.jit(
        train_step,
        in_shardings=(shardings, None, None),
        out_shardings=(shardings, None),
        donate_argnums=0,
    )
    eval_step = jax.jit(eval_step, in_shardings=(shardings, None))
    eval_data = task.eval_batches(cfg.batch_size, cfg.eval_batches)
    tokens_per_step = cfg.batch_size * task.tokens_per_example()

    def evaluate() -> dict[str, float]:
        totals: dict[str, float] = {}
        for batch in eval_data:
            for k, v in jax.device_get(eval_step(state, global_batch(batch, mesh, rules))).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        return {f"eval_{k}": v / len(eval_data) for k, v in totals.items()}

    # ------------------------------------------------------------------ steps
    pending: list[tuple[int, dict[str, jax.Array]]] = []
    t_window, steps_in_window = time.perf_counter(), 0
    t_start = time.perf_counter()

    def drain() -> None:
        """Reads pending step metrics to the host; stops the run on a non-finite loss."""
        for step, metrics in jax.device_get(pending):
            loss = float(metrics["loss"])
            if not math.isfinite(loss):
                last = ckpt.steps()[-1] if ckpt.steps() else None
                kept = (
                    f"the last good checkpoint (step {last}) is kept"
                    if last is not None
                    else ("no checkpoint was written")
                )
                raise RunError(
                    f"non-finite loss ({loss}) at step {step}; {kept}. Lower train.learning_rate, "
                    "raise train.warmup_steps or check the data, then re-run"
                )
            for k, v in metrics.items():
                window["sum"][k] = window["sum"].get(k, 0.0) + float(v)
            window["count"] += 1
        pending.clear()

    try:
        for step in range(start, cfg.steps):
            batch = global_batch(next(iterator), mesh, rules)
            state, metrics = train_step(state, batch, jax.random.fold_in(step_key, step))
            pending.append((step + 1, metrics))
            steps_in_window += 1
            done = step + 1
            is_last = done == cfg.steps
            log_now = done % cfg.log_every == 0 or is_last
            eval_now = done % cfg.eval_every == 0 or is_last
            ckpt_now = done % cfg.checkpoint_every == 0 or is_last
            if not (log_now or eval_now or ckpt_now):
                continue
            drain()
            row: dict[str, float] = {}
            if log_now and window["count"]:
                row = {k: v / window["count"] for k, v in window["sum"].items()}
                row["learning_rate"] = float(schedule(done - 1))
                window = {"sum": {}, "count": 0}
                elapsed = time.perf_counter() - t_window
                tok_s = steps_in_window * tokens_per_step / max(elapsed, 1e-9)
                eta = (cfg.steps - done) * elapsed / max(steps_in_window, 1)
                if verbose and is_main:
                    print(
                        f"step {done}/{cfg.steps} | loss {row['loss']:.4f} | "
                        f"{tok_s:,.0f} tok/s | ETA {_format_eta(eta)}",
                        flush=True,
                    )
                row_perf = {"tokens_per_second": tok_s}
            else:
                row_perf = {}
            if eval_now:
                last_eval = evaluate()
                row.update(last_eval)
                if verbose and is_main:
                    shown = ", ".join(f"{k} {v:.4f}" for k, v in last_eval.items())
                    print(f"  eval @ {done}: {shown}", flush=True)
            if row:
                row["tokens_seen"] = done * tokens_per_step
                last_row = row
                if writer is not None:
                    writer.write(done, {**row, **row_perf})
                for hook in hooks:
                    hook(done, row)
            if ckpt_now:
                meta = {
                    "step": done,
                    "seed": cfg.seed,
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
        "tokens_seen": cfg.steps * tokens_per_step,
        "train": {k: v for k, v in last_row.items() if not k.startswith("eval_")},
        "eval": last_eval,
        "train_seconds_this_process": round(wall, 2),
        "steps_per_second": round((cfg.steps - start) / max(wall, 1e-9), 3),
    }
