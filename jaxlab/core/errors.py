"""The two kinds of user-facing error that jaxlab raises instead of deep JAX tracebacks.

``ConfigError`` is a mistake in what the user asked for (unknown key, wrong type, shapes that do not
fit); the runner prints it on one line and exits with status 2. ``RunError`` is a run that cannot go
on (non-finite loss, damaged checkpoint, a workdir holding another run); the runner prints it and
exits with status 1. Both carry a message that says what to change. :func:`disk_full` turns a
full disk, however deep the library that hit it wraps the error, into a one-line ``RunError``, and
:func:`cannot_write` any other failure to write a run's file (no permission, a directory in the
way) into one naming the file.
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil

__all__ = ["ConfigError", "RunError", "cannot_write", "disk_full", "is_disk_full"]


class ConfigError(ValueError):
    """A user error in a config: unknown key, wrong type, or an invalid combination of values."""


class RunError(RuntimeError):
    """A run that cannot continue: non-finite loss, damaged checkpoint, conflicting workdir."""


def is_disk_full(err: BaseException | None) -> bool:
    """Whether ``err`` (or an error it was raised from) is "no space left on device"."""
    while err is not None:
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(err):  # tensorstore (orbax) wraps it in text
            return True
        err = err.__cause__ or err.__context__
    return False


def disk_full(path: str | os.PathLike, doing: str) -> RunError:
    """The one-line error for a full disk under ``path``: what was being written, the space left."""
    here = pathlib.Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    free = shutil.disk_usage(here).free / 2**20
    return RunError(
        f"no space left on the device of {path} ({free:.0f} MiB free) while {doing}; free some "
        "space and re-run the same command to resume"
    )


def cannot_write(path: str | os.PathLike, err: OSError) -> RunError:
    """The one-line error for a run's file that cannot be written: a full disk (:func:`disk_full`),
    or the file, the reason and what to do (the run resumes once the file can be written)."""
    path = pathlib.Path(path)
    if is_disk_full(err):
        return disk_full(path.parent, f"writing {path.name}")
    return RunError(
        f"cannot write {path} ({err.strerror or err}); make it and its directory writable (or "
        "move it away), then re-run the same command to resume"
    )
