"""Metric writers: JSONL (always), TensorBoard via tensorboardX, and wandb (optional, offline ok).

A run's ``metrics.jsonl`` holds one JSON object per logged step, ``{"step": s, name: value, ...}``.
A writer either resumes a file or starts it afresh, never blindly appends: when a training run
resumes from a checkpoint at step ``k``, rows logged after ``k`` by the run that died are dropped
first, so the file of a resumed run equals the file of an uninterrupted one; an experiment-level
writer (no checkpoint step: a sweep's table, a benchmark's rows) rewrites its file, because
re-running or resuming the experiment recomputes (or re-reads) every row. A line cut short by a kill
at the end of the file is dropped on reading; damage anywhere else is a one-line
:class:`~jaxlab.core.errors.RunError` naming the file. ``write_json`` writes ``config.json`` /
``summary.json`` atomically (write then rename), so a kill never leaves half a file behind
(:func:`write_atomically`, which the metrics file and the plots use too). A file that cannot be
written or read (no permission, a directory in its place) is a one-line
:class:`~jaxlab.core.errors.RunError` naming it, and no temporary file is left behind.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxlab.core.errors import RunError, cannot_write

__all__ = [
    "MetricWriter",
    "read_metrics",
    "to_jsonable",
    "wandb_run_id",
    "write_atomically",
    "write_json",
]


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


def write_atomically(path: str | os.PathLike, write: Callable[[pathlib.Path], Any]) -> None:
    """Writes ``path`` through ``write(temporary_path)`` and a rename, so that a kill never leaves
    half a file; if either fails, the temporary file is removed.

    Raises:
      RunError: the file cannot be written (:func:`~jaxlab.core.errors.cannot_write`: one line
        naming it).
    """
    path = pathlib.Path(path)
    # A per-process temporary name: the processes of a multi-host run may write the same file.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # the error below names the file; a stray temporary file is the lesser problem
        raise cannot_write(path, err) from None


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Writes ``data`` as indented JSON to ``path`` atomically (:func:`write_atomically`)."""
    text = json.dumps(to_jsonable(data), indent=2, sort_keys=True) + "\n"
    write_atomically(path, lambda tmp: tmp.write_text(text))


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """Reads ``metrics.jsonl`` of a run (empty list when there is none).

    A last line without its newline that does not parse is a write cut short by a kill and is
    dropped (the rows it belonged to are re-logged by the resumed run).

    Raises:
      RunError: any other line is not a JSON object with a ``step`` (the message names the file
        and the line).
    """
    path = pathlib.Path(workdir) / "metrics.jsonl"
    if not path.exists():
        return []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError:
        raise RunError(f"{path} is damaged (not text); delete it and re-run") from None
    except OSError as err:
        raise RunError(
            f"cannot read {path} ({err.strerror or err}); make it a readable file (or move it "
            "away), then re-run the same command"
        ) from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # no newline after it: half-written when the run was killed
                break
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise RunError(
                f"{path} is damaged at line {number} ({line[:40]!r} is not a metrics row); "
                "delete that line, or the file, and re-run"
            )
        rows.append(row)
    return rows


def wandb_run_id(workdir: str | os.PathLike) -> str:
    """A wandb run id that is the same for every process and every resume of one workdir.

    The directory's name (sanitised) plus a digest of its resolved path: stable across processes,
    unlike Python's salted ``hash()``, so a resumed run continues its wandb run.
    """
    path = str(pathlib.Path(workdir).resolve())
    name = re.sub(r"[^A-Za-z0-9_-]", "_", pathlib.Path(path).name)[:48]
    return f"{name}-{hashlib.sha256(path.encode()).hexdigest()[:12]}"


class MetricWriter:
    """Writes scalar metrics to ``metrics.jsonl``, TensorBoard events and (optionally) wandb.

    Args:
      workdir: the run directory.
      start_step: the step a training run resumes from: rows with ``step > start_step`` already in
        ``metrics.jsonl`` are dropped and the rest kept. ``None`` (experiment-level rows) starts
        the file afresh: re-running an experiment rewrites its rows instead of appending them.
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
        kept = []
        if start_step is not None:
            kept = [row for row in read_metrics(self.workdir) if row["step"] <= start_step]
        text = "".join(json.dumps(row) + "\n" for row in kept)
        write_atomically(self.path, lambda tmp: tmp.write_text(text))
        try:
            self._file = open(self.path, "a")  # noqa: SIM115 - closed in close()
        except OSError as err:
            raise cannot_write(self.path, err) from None
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            # TensorBoard hides events at or after purge_step written by earlier runs.
            self._tb = SummaryWriter(str(self.workdir / "tb"), purge_step=start_step or 0)
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
                id=wandb_run_id(self.workdir),
            )

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Logs ``metrics`` (scalars) at ``step``; flushes so a kill loses nothing logged."""
        row = {"step": int(step), **{k: to_jsonable(v) for k, v in metrics.items()}}
        try:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as err:
            raise cannot_write(self.path, err) from None
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
