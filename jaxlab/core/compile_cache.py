"""JAX's persistent compilation cache for ``experiments/run.py``, on by default.

A second run of the same shapes (a resume, a re-run, the next seed of a sweep) then loads its
compiled steps from disk instead of compiling them again. The cache lives in the user's cache
directory, ``$XDG_CACHE_HOME/jaxlab/jax`` (``~/.cache/jaxlab/jax`` when that is unset). The
environment variable ``JAXLAB_COMPILATION_CACHE`` overrides it: a directory to use instead, or
``off`` (any boolean false: ``0/false/no/off``) to disable it (the test suite sets ``off`` or a
directory of its own, so that tests never write into the home directory); a directory that
cannot be created is a one-line error, while an unusable default place only turns the cache off.
When only JAX's own ``JAX_COMPILATION_CACHE_DIR`` is set, JAX's setting is left alone. The minimum
compile time for an entry is lowered from JAX's default of one second, because a small run on a
CPU starts with many compilations shorter than that.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

from jaxlab.core.environment import COMPILATION_CACHE, compilation_cache_setting
from jaxlab.core.errors import ConfigError

__all__ = ["cache_dir", "enable_compilation_cache"]

ENV = COMPILATION_CACHE
MIN_COMPILE_SECONDS = 0.0


def cache_dir(env: Mapping[str, str] = os.environ) -> pathlib.Path | None:
    """The cache directory the environment asks for, or None when it is off or left to JAX.

    Raises:
      ConfigError: ``JAXLAB_COMPILATION_CACHE`` names a file.
    """
    setting = compilation_cache_setting(env)
    if setting is False:
        return None
    if setting is not True:
        return setting
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    base = env.get("XDG_CACHE_HOME") or str(pathlib.Path(env.get("HOME", "~")) / ".cache")
    return pathlib.Path(base).expanduser() / "jaxlab" / "jax"


def enable_compilation_cache(env: Mapping[str, str] = os.environ) -> pathlib.Path | None:
    """Points JAX's persistent compilation cache at :func:`cache_dir`; returns the directory.

    Raises:
      ConfigError: ``JAXLAB_COMPILATION_CACHE`` names a directory that cannot be created.
    """
    path = cache_dir(env)
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        if compilation_cache_setting(env) is True:
            return None  # the default place is unusable: run without the cache, at compile cost
        raise ConfigError(
            f"{ENV}={env[ENV].strip()!r}: cannot create that directory "
            f"({err.strerror or err}); give a writable directory, or off"
        ) from None
    import jax  # deferred: --list does not need JAX

    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
