"""JAX's persistent compilation cache for ``experiments/run.py``, on by default.

A second run of the same shapes (a resume, a re-run, the next seed of a sweep) then loads its
compiled steps from disk instead of compiling them again. The cache lives in the user's cache
directory, ``$XDG_CACHE_HOME/jaxlab/jax`` (``~/.cache/jaxlab/jax`` when that is unset). The
environment variable ``JAXLAB_COMPILATION_CACHE`` overrides it: a directory to use instead, or
``off`` to disable it (the test suite sets ``off`` so that tests never write into the home
directory). When only JAX's own ``JAX_COMPILATION_CACHE_DIR`` is set, JAX's setting is left alone.
The minimum compile time for an entry is lowered from JAX's default of one second, because a small
run on a CPU starts with many compilations shorter than that.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

__all__ = ["cache_dir", "enable_compilation_cache"]

ENV = "JAXLAB_COMPILATION_CACHE"
MIN_COMPILE_SECONDS = 0.0


def cache_dir(env: Mapping[str, str] = os.environ) -> pathlib.Path | None:
    """The cache directory the environment asks for, or None when it is off or left to JAX."""
    value = env.get(ENV, "").strip()
    if value.lower() in ("off", "0", "false", "none"):
        return None
    if value:
        return pathlib.Path(value).expanduser()
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    base = env.get("XDG_CACHE_HOME") or str(pathlib.Path(env.get("HOME", "~")) / ".cache")
    return pathlib.Path(base).expanduser() / "jaxlab" / "jax"


def enable_compilation_cache(env: Mapping[str, str] = os.environ) -> pathlib.Path | None:
    """Points JAX's persistent compilation cache at :func:`cache_dir`; returns the directory."""
    path = cache_dir(env)
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # an unwritable cache only costs compile time: run without it
    import jax  # deferred: --list does not need JAX

    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
