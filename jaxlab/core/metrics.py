"""Metric writers: JSONL (always), TensorBoard via tensorboardX, and wandb (optional, offline ok).

A run's ``metrics.jsonl`` holds one JSON object per logged step, ``{"step": s, name: value, ...}``.
When a run resumes from a checkpoint at step ``k``, rows logged after ``k`` by the run that died are
dropped first, so the file of a resumed run equals the file of an uninterrupted one.
``write_json`` writes ``config.json`` / ``summary.json`` atomically (write then rename), so a kill
never leaves half a file behind.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["MetricWriter", "read_metrics", "to_jsonable", "write_json"]


def to_jsonable(value: Any) -> Any:
    """Converts numpy/JAX scalars and arrays, tuples and paths into JSON-ready Python values."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, pathlib.Path):
        return str(value)
    if hasattr(value, "__array__") and not isinstance(value, str | bytes):
        arr = np.asarray(value)
        return to_jsonable(arr.item() if arr.ndim == 0 else arr.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them readable rather than invalid.
    return value


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Writes ``data`` as indented JSON to ``path`` atomically."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A per-process temporary name: the processes of a multi-host run may write the same file.
    tmp = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(to_jsonable(data), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """Reads ``metrics.jsonl`` of a run (empty list when there is none)."""
    path = pathlib.Path(workdir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricWriter:
    """Writes scalar metrics to ``metrics.jsonl``, TensorBoard events and (optionally) wandb.

    Args:
      workdir: the run directory.
      start_step: rows with ``step > start_step`` already in ``metrics.jsonl`` are dropped (resume).
        ``None`` keeps the file as it is.
      tensorboard: also write tensorboardX event files under ``workdir/tb``.
      wandb: ``"off"``, ``"offline"`` (no network; sync later with ``wandb sync``) or ``"online"``.
      config: the resolved config, recorded by wandb.
      project, name: wandb project and run name.
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        start_step: int | None = None,
        tensorboard: bool = True,
        wandb: str = "off",
        config: Mapping[str, Any] | None = None,
        project: str = "jaxlab",
        name: str | None = None,
    ):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.path = self.workdir / "metrics.jsonl"
        if start_step is not None and self.path.exists():
            kept = [row for row in read_metrics(self.workdir) if row["step"] <= start_step]
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(row) + "\n" for row in kept))
            os.replace(tmp, self.path)
        self._file = open(self.path, "a")  # noqa: SIM115 - closed in close()
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(self.workdir / "tb"), purge_step=start_step)
        self._wandb = None
        if wandb != "off":
            import wandb as wandb_lib  # optional dependency: pip install jaxlab[wandb]

            self._wandb = wandb_lib.init(
                project=project,
                name=name or self.workdir.name,
                dir=str(self.workdir),
                mode=wandb,
                config=dict(config or {}),
                resume="allow",
                id=f"{self.workdir.name}-{abs(hash(str(self.workdir.resolve()))) % 10**8}",
            )

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Logs ``metrics`` (scalars) at ``step``; flushes so a kill loses nothing logged."""
        row = {"step": int(step), **{k: to_jsonable(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        scalars = {k: v for k, v in row.items() if k != "step" and isinstance(v, int | float)}
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, global_step=step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=int(step))

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()

    def __enter__(self) -> MetricWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
