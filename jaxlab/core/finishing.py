"""Writes a run leaves finishing in the background while the code after it goes on.

A training run's last checkpoint is written at its end, and an experiment usually does more after
its runs: draws figures, evaluates, summarises. Inside :func:`later` (the runner,
:func:`jaxlab.core.experiment.launch`, wraps each experiment in it) a
:class:`~jaxlab.core.checkpoint.Checkpointer` closed with its last save still being written hands
the rest of that save to the block (:func:`defer`) instead of waiting for it, so that the save and
the code after the run overlap. What was handed over is finished, in order, when the block ends and
also before anything else is deferred or another checkpointer opens (:func:`finish_now`): at most
one run's save is in flight, and nothing reads a checkpoint directory whose last step is still
being written. What must outlast such a save — the run's lock on its workdir
(:func:`jaxlab.core.workdir.workdir_lock`) — is handed over after it (:func:`after_pending`), so
that no other run takes the workdir while its last step is still being written. Outside the block
(a user's own code, a notebook, a test) nothing is deferred and a checkpointer's ``close`` waits,
as it always has.

This module imports nothing heavy: the runner enters the block for every experiment, including
those that never write a checkpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

__all__ = ["after_pending", "defer", "finish_now", "later"]

_PENDING: list[Callable[[], None]] | None = None  # inside later(): the finishers handed over


@contextlib.contextmanager
def later() -> Iterator[None]:
    """Inside the block, :func:`defer` keeps finishers for its end; they run when it ends (also when
    it ends by an exception), and their first error is raised there.

    Raises:
      Exception: the first error a finisher raised (each of them runs).
    """
    global _PENDING
    previous, _PENDING = _PENDING, []
    try:
        yield
    finally:
        try:
            finish_now()
        finally:
            _PENDING = previous


def defer(finish: Callable[[], None]) -> bool:
    """Hands ``finish`` to the enclosing :func:`later` block; False outside one (the caller then
    finishes now). What was handed over before is finished first."""
    if _PENDING is None:
        return False
    try:
        finish_now()
    finally:
        _PENDING.append(finish)
    return True


def after_pending(finish: Callable[[], None]) -> bool:
    """Hands ``finish`` to the enclosing :func:`later` block to run after the finishers handed over
    so far, which go on; False when there are none (or outside a block): the caller finishes now."""
    if not _PENDING:
        return False
    _PENDING.append(finish)
    return True


def finish_now() -> None:
    """Runs the finishers handed over so far, in order; raises the first error (each one runs)."""
    if not _PENDING:
        return
    pending = list(_PENDING)
    _PENDING.clear()
    error: BaseException | None = None
    for finish in pending:
        try:
            finish()
        except BaseException as err:  # noqa: BLE001 - every finisher runs; the first error is raised
            error = error or err
    if error is not None:
        raise error
