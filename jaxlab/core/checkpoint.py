"""Orbax checkpoints of a whole run: model + optimizer state, data-iterator position, metadata.

One :class:`Checkpointer` wraps an ``orbax.checkpoint.CheckpointManager`` over
``workdir/checkpoints`` with three items per step: ``state`` (the ``nnx.State`` of model and
optimizer, restored straight onto its shardings), ``data`` (the grain iterator, so the restored
iterator yields exactly the next batch) and ``meta`` (JSON: step, base RNG key, loss-window
accumulators, the resolved config). Orbax writes each step into a temporary directory and renames it
when complete, so a kill mid-save leaves the previous steps intact. On restore, a step that fails to
load (damaged files) is reported and the previous one is tried; if none loads the run stops with a
:class:`~jaxlab.core.errors.RunError` — it never silently starts from scratch. In a multi-process
run only process 0 moves damaged steps aside; the others wait for it at a barrier, then reload the
directory listing, so no two processes rename the same directory. ``state`` is written by orbax's
PyTree handler with one change to its defaults: a replicated array is split across its replicas
for writing (orbax's replica-parallel save) only when each replica's slice holds at least
:data:`MIN_REPLICA_SLICE_BYTES`; below that, slicing costs a device program per slice and saves
nothing.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from jaxlab.core import finishing
from jaxlab.core.errors import RunError, disk_full, is_disk_full

__all__ = ["MIN_REPLICA_SLICE_BYTES", "Checkpointer", "Restored"]

# A replicated array is written in per-replica slices only when each slice is at least this big.
# Orbax slices every replicated array by default (except on GPU): each slice is a dispatched
# device program, compiled once per slice shape and offset, which for the small arrays of a small
# model costs far more than writing the whole array from one replica.
MIN_REPLICA_SLICE_BYTES = 1 << 20


def _state_handlers() -> ocp.handlers.DefaultCheckpointHandlerRegistry:
    """The handler of the ``state`` item: orbax's PyTree handler (the one ``StandardSave`` wraps,
    same files) with orbax's standard type handlers and :data:`MIN_REPLICA_SLICE_BYTES`."""
    th = ocp.type_handlers
    scalar = th.ScalarHandler()
    types = th.create_type_handler_registry(
        (int, scalar),
        (float, scalar),
        (bytes, scalar),
        (np.number, scalar),
        (np.ndarray, th.NumpyHandler()),
        (jax.Array, th.ArrayHandler(min_slice_bytes_for_replica_parallel=MIN_REPLICA_SLICE_BYTES)),
        (str, th.StringHandler()),
    )
    handler = ocp.PyTreeCheckpointHandler(type_handler_registry=types)
    registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
    registry.add("state", ocp.args.PyTreeSave, handler)
    registry.add("state", ocp.args.PyTreeRestore, handler)
    return registry


class Restored(NamedTuple):
    """What :meth:`Checkpointer.restore` brings back."""

    step: int
    state: Any
    meta: dict[str, Any]
    fell_back_from: tuple[int, ...]  # newer steps that were damaged and skipped


def sync_processes(name: str) -> None:
    """A barrier across the processes of a multi-process run (nothing to wait for otherwise)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


class _Held:
    """What a process wrote to stderr while held; :meth:`drop` discards it."""

    def __init__(self, file: Any):
        self.file, self.dropped = file, False

    def drop(self) -> None:
        self.dropped = True


def _settle_threads(quiet: float = 0.5, limit: float = 10.0) -> None:
    """Waits until no thread has started or ended for ``quiet`` seconds (at most ``limit``)."""
    start = last_change = time.monotonic()
    seen = {t.ident for t in threading.enumerate()}
    while time.monotonic() - last_change < quiet and time.monotonic() - start < limit:
        time.sleep(0.05)
        now = {t.ident for t in threading.enumerate()}
        if now != seen:
            seen, last_change = now, time.monotonic()
    gc.collect()  # orbax's failed tasks log when collected: here, while stderr is held


@contextlib.contextmanager
def _held_stderr() -> Iterator[_Held]:
    """Holds back the process's stderr (file descriptor 2, which orbax's and tensorstore's threads
    write to) and writes it out afterwards unless dropped. A full disk makes them print hundreds of
    lines of tracebacks for one failed save; the caller then drops them and raises one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        held = _Held(tmp)
        try:
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not held.dropped:
                tmp.seek(0)
                text = tmp.read()
                if text:
                    sys.stderr.write(text.decode(errors="replace"))
                    sys.stderr.flush()


class Checkpointer:
    """Saves and restores run checkpoints under ``directory``, keeping the last ``keep``.

    Args:
      directory: where the step directories live.
      keep: how many of the newest steps to keep.
      primary: whether this process may move damaged steps aside (default: process 0).
      barrier: waits for all processes (default :func:`sync_processes`); called on every process
        after the primary one has moved damaged steps, before the listing is reloaded.
    """

    def __init__(
        self,
        directory: str | pathlib.Path,
        *,
        keep: int = 3,
        primary: bool | None = None,
        barrier: Callable[[str], None] = sync_processes,
    ):
        # A run's last save may still be being written (jaxlab.core.finishing): finished first,
        # so that no checkpoint directory is read or written while its last step is incomplete.
        finishing.finish_now()
        self.directory = pathlib.Path(directory).absolute()
        self.primary = jax.process_index() == 0 if primary is None else primary
        self._held: contextlib.ExitStack | None = None  # stderr held after a failed save
        self._writing: tuple[int, contextlib.ExitStack, _Held] | None = None  # save(wait=False)
        self.barrier = barrier
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, create=True, enable_async_checkpointing=True
            ),
            handler_registry=_state_handlers(),
        )

    def steps(self) -> list[int]:
        """Complete checkpoint steps on disk, oldest first (a save still being written is finished
        first)."""
        self.wait()
        return sorted(self.manager.all_steps())

    def save(
        self, step: int, state: Any, iterator: Any, meta: dict[str, Any], *, wait: bool = True
    ) -> None:
        """Writes checkpoint ``step``: on disk when this returns, or with ``wait=False`` still being
        written in the background until :meth:`wait`, the next save or :meth:`close`.

        The iterator's position is read and the state's arrays are copied to host memory before
        this returns (orbax's asynchronous save), so either may change afterwards; the loop still
        leaves only a run's last save, after its last step, to finish later.

        Raises:
          RunError: the disk is full (one line; orbax's own error logs are held back while it
            saves, and the step's partial files are left to orbax, which never lists them). With
            ``wait=False`` the error comes where the save is finished.
        """
        self.wait()
        stack = contextlib.ExitStack()
        held = stack.enter_context(_held_stderr())
        try:
            self.manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.PyTreeSave(state),
                    data=grain.checkpoint.CheckpointSave(iterator),
                    meta=ocp.args.JsonSave(meta),
                ),
                force=True,
            )
        except Exception as err:
            self._failed(err, step, stack, held)
        self._writing = (step, stack, held)
        if wait:
            self.wait()

    def wait(self) -> None:
        """Finishes the save that :meth:`save` left being written (nothing when there is none).

        Raises:
          RunError: that save found the disk full (one line).
        """
        if self._writing is None:
            return
        step, stack, held = self._writing
        self._writing = None
        try:
            self.manager.wait_until_finished()
        except Exception as err:
            self._failed(err, step, stack, held)
        stack.close()

    def _failed(self, err: Exception, step: int, stack: contextlib.ExitStack, held: _Held) -> None:
        """Raises a failed save's error: one line for a full disk, else the error itself."""
        if not is_disk_full(err):
            stack.close()
            raise err
        # orbax's writer threads go on failing after the save has given up, until the manager is
        # closed: their tracebacks and "task exception never retrieved" logs say nothing more, so
        # stderr stays held (and is then dropped) until close() has let them finish.
        held.drop()
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        self._held = stack
        raise disk_full(self.directory, f"saving checkpoint {step}") from None

    def restore(self, abstract_state: Any, iterator: Any) -> Restored | None:
        """Restores the newest readable step into ``iterator`` and a state like ``abstract_state``.

        Returns ``None`` when there is no checkpoint at all (a fresh run).

        Raises:
          RunError: checkpoints exist but none of them can be read.
        """
        steps = self.steps()
        if not steps:
            # A kill during the very first save leaves only orbax's temporary directory: nothing
            # was lost, so start fresh. Anything else there is not ours to overwrite.
            leftovers = (
                [p.name for p in self.directory.iterdir() if "tmp" not in p.name]
                if self.directory.exists()
                else []
            )
            if leftovers:
                raise RunError(
                    f"{self.directory} holds no readable checkpoint (found: "
                    f"{', '.join(sorted(leftovers)[:5])}); delete it to start the run from scratch"
                )
            return None
        damaged: list[int] = []
        for step in reversed(steps):
            try:
                restored = self.manager.restore(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.PyTreeRestore(
                            abstract_state,
                            restore_args=ocp.checkpoint_utils.construct_restore_args(
                                abstract_state
                            ),
                        ),
                        data=grain.checkpoint.CheckpointRestore(iterator),
                        meta=ocp.args.JsonRestore(),
                    ),
                )
            except Exception as err:  # noqa: BLE001 - any failure to read marks the step damaged
                reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
                print(
                    f"warning: checkpoint step {step} in {self.directory} is damaged ({reason}); "
                    "trying the previous one",
                    file=sys.stderr,
                )
                damaged.append(step)
                continue
            if damaged:
                # Move damaged steps aside (kept for inspection) so that they can be re-written.
                # One process renames; the others wait for it, then all re-read the listing.
                if self.primary:
                    for bad in damaged:
                        target = self.directory.parent / f"damaged-checkpoint-{bad}"
                        shutil.rmtree(target, ignore_errors=True)
                        (self.directory / str(bad)).rename(target)
                self.barrier("jaxlab_damaged_checkpoints_moved")
                self.manager.reload()
                print(
                    f"resuming from step {step}; damaged steps {damaged} were moved to "
                    f"{self.directory.parent}/damaged-checkpoint-*",
                    file=sys.stderr,
                )
            return Restored(step, restored["state"], dict(restored["meta"]), tuple(damaged))
        raise RunError(
            f"no checkpoint in {self.directory} can be read (damaged steps: {damaged}); "
            "delete the directory to start over, or restore it from a backup"
        )

    def close(self) -> None:
        """Finishes a save still being written, then closes orbax's manager. Inside
        :func:`jaxlab.core.finishing.later` (the runner) both are handed to the block, so that a
        run's last save goes on while the code after the run does.

        Raises:
          RunError: the save being finished found the disk full (one line).
        """
        if self._writing is not None and finishing.defer(self._close_now):
            return
        self._close_now()

    def _close_now(self) -> None:
        try:
            self.wait()
        finally:
            try:
                self.manager.close()
            finally:
                if self._held is not None:  # after a full disk (see save)
                    _settle_threads()
                    self._held.close()
                    self._held = None
