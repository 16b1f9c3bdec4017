"""A helper process that draws the runner's figures, so that importing matplotlib overlaps the run.

Importing matplotlib's figure machinery is a noticeable part of a short run's start-up (the root
README, "Start-up"), yet a run draws its figures only at its end. ``experiments/run.py`` therefore
opens :func:`drawing` before it imports JAX: a child Python process starts, imports matplotlib and
:mod:`jaxlab.core.plots` and draws one throw-away figure (fonts, layout), on another core while the
run imports JAX and trains (the child runs :func:`jaxlab.core.plots.serve_figure_helper`, which
hands its drawing to :func:`serve`; this module never imports :mod:`jaxlab.core.plots`, which
imports it). Inside the block the ``*_figure`` functions of :mod:`jaxlab.core.plots`
return a :class:`~jaxlab.core.plots.PendingFigure` (the call, not yet made), and
:func:`~jaxlab.core.plots.save_figure` sends it to the helper, which makes the same call and writes
the same PNG through the same :func:`~jaxlab.core.plots.save_figure`; it returns once the file is
written, as before.

Nothing changes for the caller when the helper cannot help. If it did not start, has died, or cannot
be sent the call (its arguments must pickle), the figure is drawn in the run's own process, as
without a helper. An exception raised while drawing in the helper makes the run's process draw the
figure itself, so that the exception is raised again there, from the caller's line; a file that
cannot be written is the same one-line :class:`~jaxlab.core.errors.RunError` either way. Outside
:func:`drawing` (notebooks, tests, a user's own code) nothing of this is used.

The two processes speak pickles over the helper's standard input and output: one request
``(function name, args, kwargs, path)``, one reply ``(status, message)``. The block's end stops the
helper at once (every request has had its reply by then, so nothing is cut short, and a run that
ended early does not wait for matplotlib's import); if the run's process ends otherwise, the
helper exits when its input closes.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jaxlab.core.environment import FIGURE_HELPER, env_flag
from jaxlab.core.errors import RunError

__all__ = ["FigureHelper", "active", "drawing", "serve"]

# Where jaxlab is imported from (a checkout or site-packages): the helper imports the same copy.
_ROOT = str(pathlib.Path(__file__).resolve().parents[2])

_ACTIVE: FigureHelper | None = None


class FigureHelper:
    """A child process that draws :mod:`jaxlab.core.plots` figures on request (see the module).

    Attributes:
      drawn: how many figures the helper has written.
    """

    def __init__(self) -> None:
        code = (
            f"import sys; sys.path.insert(0, {_ROOT!r}); "
            "from jaxlab.core.startup import raise_gc_threshold; raise_gc_threshold(); "
            "from jaxlab.core.plots import serve_figure_helper; serve_figure_helper()"
        )
        self.drawn = 0
        self._lock = threading.Lock()  # one request and its reply at a time
        try:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        except OSError:  # no interpreter to start: the figures are drawn in process
            self._proc = None

    @property
    def alive(self) -> bool:
        """Whether requests still go to the helper (False once it failed or was closed)."""
        return self._proc is not None

    def draw(self, name: str, args: tuple, kwargs: Mapping[str, Any], path: pathlib.Path) -> bool:
        """Has the helper call ``jaxlab.core.plots.<name>(*args, **kwargs)`` and save the figure
        at ``path``; True once it is written, False when the caller must draw it instead.

        Raises:
          RunError: ``path`` cannot be written (the message
            :func:`~jaxlab.core.plots.save_figure` gives).
        """
        if self._proc is None:
            return False
        try:
            request = pickle.dumps((name, args, dict(kwargs), str(path)))
        except Exception:  # noqa: BLE001 (an argument that does not pickle: drawn in process)
            return False
        with self._lock:
            try:
                self._proc.stdin.write(request)
                self._proc.stdin.flush()
                status, message = pickle.load(self._proc.stdout)
            except (AttributeError, OSError, EOFError, pickle.UnpicklingError):
                # The helper is gone (or closed meanwhile): this figure and the later ones are
                # drawn in process.
                self.close()
                return False
        if status == "ok":
            self.drawn += 1
            return True
        if status == "run_error":
            raise RunError(message)
        return False  # drawing failed there: the caller draws it, and raises the same error

    def close(self) -> None:
        """Ends the helper now. Every request has had its reply, so nothing is lost; a helper
        still importing matplotlib (a run that ended early) is not waited for."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()


def active() -> FigureHelper | None:
    """The helper that draws this process's figures now, or None (draw in process)."""
    helper = _ACTIVE
    return helper if helper is not None and helper.alive else None


@contextlib.contextmanager
def drawing() -> Iterator[FigureHelper | None]:
    """Starts a :class:`FigureHelper`; figures saved inside the block are drawn by it.

    Start it as early as possible: the helper's imports overlap whatever the process does next.
    ``JAXLAB_FIGURE_HELPER=off`` starts none (the block yields None and figures are drawn in
    process): a helper spends a core's time on its imports, which a machine with one core, or one
    that runs many short runs side by side (a test suite), may not have to spare.

    Raises:
      ConfigError: ``JAXLAB_FIGURE_HELPER`` is not a boolean.
    """
    global _ACTIVE
    if not env_flag(FIGURE_HELPER, default=True):
        yield None
        return
    helper, previous = FigureHelper(), _ACTIVE
    _ACTIVE = helper
    try:
        yield helper
    finally:
        _ACTIVE = previous
        helper.close()


def serve(draw: Callable[[str, tuple, dict[str, Any], str], None]) -> None:
    """The helper's main loop: ``draw(name, args, kwargs, path)`` for each request on stdin.

    The helper process runs :func:`jaxlab.core.plots.serve_figure_helper`, which warms matplotlib
    up and passes its drawing function here. Replies go to the original standard output; anything
    else written to it (a library's print) goes to standard error instead, so that the reply pipe
    carries only replies. Returns never: the process exits when its input closes.
    """
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    while True:
        try:
            name, args, kwargs, path = pickle.load(requests)
        except (EOFError, OSError, pickle.UnpicklingError):
            break
        try:
            draw(name, args, kwargs, path)
            reply = ("ok", "")
        except RunError as err:
            reply = ("run_error", str(err))
        except Exception as err:  # noqa: BLE001 (the run's process draws it and raises it again)
            reply = ("error", f"{type(err).__name__}: {err}")
        pickle.dump(reply, replies)
        replies.flush()
    replies.flush()
    os._exit(0)  # nothing to tear down: every figure is written
