"""The run directory: checked before use, locked while a run uses it, and whether it holds a run.

* :func:`prepare_workdir` turns a bad ``--workdir`` (empty, a file, not creatable or not
  writable) into a one-line :class:`~jaxlab.core.errors.ConfigError` before anything is written.
* :func:`workdir_lock` holds an exclusive ``fcntl.flock`` on ``WORKDIR/.lock-<process index>``
  while a run uses the directory, so a second run started on the same workdir refuses in one line
  instead of training the same steps into the same files. The operating system releases the lock
  when its process dies, so the file a killed run leaves behind never blocks the resume. Each
  process of a multi-process run locks its own file (they share the directory on purpose); within
  one process the lock is re-entrant (the experiment launcher and the loop both take it).
* :func:`holds_run` says whether a directory holds a run worth protecting: a checkpoint (in it or
  in a sub-run one level down) or a finished run's ``summary.json``. A directory without either
  holds nothing to resume, so a command that failed before its first checkpoint (a late config
  error) does not block the corrected command.
* :func:`changes_to_another_run` says which differences between a held run's config and a new one
  make the new one a different run: all but :data:`RESUMABLE_CHANGES`. The launcher
  (:mod:`jaxlab.core.experiment`) and the sweeps (:mod:`jaxlab.core.sweep`) refuse on them alike.

Which keys may change on resume, and why (:data:`RESUMABLE_CHANGES`):

* ``train.steps`` — extending a finished run is common; the schedule keeps its original length
  (see :mod:`jaxlab.core.loop`), and lowering it below the reached step is refused there.
* ``train.learning_rate``, ``train.warmup_steps``, ``train.min_lr_ratio``, ``train.grad_clip`` —
  what a user changes after a divergence (the loop's NaN error names them). They are not part of
  the checkpointed state: the schedule is a function of the step and the optimizer state has the
  same structure with or without clipping, so the resumed run continues from the checkpoint with the
  new values; every checkpoint records the values it was trained with.
* ``train.log_every``, ``train.eval_every``, ``train.checkpoint_every``, ``train.keep_checkpoints``,
  ``train.tensorboard``, ``train.wandb``, ``train.wandb_project`` — when and where results are
  written, not what is trained.

Everything else (model, data, batch size, seed, optimizer moments, mesh, accumulation) defines what
the checkpoints hold or how batches are drawn, and a change means a different run.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

from jaxlab.core import finishing
from jaxlab.core.config import config_diff
from jaxlab.core.environment import process_index_hint
from jaxlab.core.errors import ConfigError, RunError

__all__ = [
    "RESUMABLE_CHANGES",
    "changes_to_another_run",
    "holds_run",
    "prepare_workdir",
    "workdir_lock",
]

# Keys that may change between a run and its resumption without making it a different run (the
# module docstring gives the reason for each).
RESUMABLE_CHANGES = (
    "train.steps",
    "train.learning_rate",
    "train.warmup_steps",
    "train.min_lr_ratio",
    "train.grad_clip",
    "train.log_every",
    "train.eval_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.tensorboard",
    "train.wandb",
    "train.wandb_project",
)

# Locks this process holds: resolved lock path -> [file descriptor, depth].
_HELD: dict[str, list[int]] = {}


def prepare_workdir(workdir: str | os.PathLike) -> pathlib.Path:
    """Creates ``workdir`` if needed and checks that a run can write there.

    Raises:
      ConfigError: the path is empty, is a file, cannot be created or is not writable.
    """
    if not str(workdir).strip():
        raise ConfigError("--workdir is empty; give a directory, e.g. --workdir runs/NAME")
    path = pathlib.Path(workdir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--workdir {path} is a file; give a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"cannot create --workdir {path} ({err.strerror}); give a writable directory"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"--workdir {path} is not writable; give a writable directory")
    return path


def _process_index() -> int:
    """This process's index in a multi-process run (0 when single-process)."""
    import jax  # Deferred: the launcher checks the workdir before JAX is needed.

    if jax.distributed.is_initialized():
        return jax.process_index()
    return process_index_hint()


@contextlib.contextmanager
def workdir_lock(workdir: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Holds this process's lock on ``workdir`` for the duration of the block, and inside
    :func:`jaxlab.core.finishing.later` until a last checkpoint written in the block is finished.

    Raises:
      RunError: another live process holds the lock (the message names its process id).
    """
    path = (pathlib.Path(workdir) / f".lock-{_process_index()}").resolve()
    key = str(path)
    if key in _HELD:
        _HELD[key][1] += 1
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunError(
                f"{pathlib.Path(workdir)} is in use by another run (process {holder}); wait for "
                "it to finish, or use another --workdir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        _HELD[key] = [fd, 1]
    try:
        yield path
    finally:
        # A last checkpoint still being written (jaxlab.core.finishing) keeps the lock until it is.
        if not finishing.after_pending(functools.partial(_release, key)):
            _release(key)


def _release(key: str) -> None:
    """Ends one hold of the lock at ``key``; the last one unlocks it."""
    held = _HELD[key]
    held[1] -= 1
    if held[1] == 0:
        del _HELD[key]
        fcntl.flock(held[0], fcntl.LOCK_UN)
        os.close(held[0])


def holds_run(workdir: str | os.PathLike) -> bool:
    """Whether ``workdir`` holds a checkpoint (its own or a sub-run's) or a finished summary."""
    path = pathlib.Path(workdir)
    if (path / "summary.json").exists():
        return True
    for checkpoints in (path / "checkpoints", *path.glob("*/checkpoints")):
        if checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir()):
            return True
    return False


def changes_to_another_run(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The dotted keys where config tree ``new`` differs from ``old`` (both as
    :func:`jaxlab.core.config.to_dict` gives them, whole or under a ``"config"`` key) in a way that
    makes it a different run: every difference but one in :data:`RESUMABLE_CHANGES`."""
    return [d for d in config_diff(old, new) if d.removeprefix("config.") not in RESUMABLE_CHANGES]
