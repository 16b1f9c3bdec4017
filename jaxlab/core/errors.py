"""The two kinds of user-facing error that jaxlab raises instead of deep JAX tracebacks.

``ConfigError`` is a mistake in what the user asked for (unknown key, wrong type, shapes that do not
fit); the runner prints it on one line and exits with status 2. ``RunError`` is a run that cannot go
on (non-finite loss, damaged checkpoint, a workdir holding another run); the runner prints it and
exits with status 1. Both carry a message that says what to change.
"""

from __future__ import annotations

__all__ = ["ConfigError", "RunError"]


class ConfigError(ValueError):
    """A user error in a config: unknown key, wrong type, or an invalid combination of values."""


class RunError(RuntimeError):
    """A run that cannot continue: non-finite loss, damaged checkpoint, conflicting workdir."""
