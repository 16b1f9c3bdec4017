"""The ``JAXLAB_*`` environment variables, each parsed in one place into a one-line error.

jaxlab reads a few settings from the environment rather than from a config, because they belong to
the machine or the launcher, not to the run: how many processes a multi-host run has
(``JAXLAB_NUM_PROCESSES``, ``JAXLAB_PROCESS_ID``, ``JAXLAB_COORDINATOR``, or
``JAXLAB_DISTRIBUTED=auto``), whether ``"auto"`` dispatches may pick the Pallas kernels
(``JAXLAB_PALLAS``), where JAX's compilation cache lives (``JAXLAB_COMPILATION_CACHE``), whether
``experiments/run.py`` draws its figures in a helper process (``JAXLAB_FIGURE_HELPER``, on by
default; :mod:`jaxlab.core.figure_helper`) and whether the notebooks run at smoke size
(``JAXLAB_SMOKE``). Every reader goes through the parsers here, so
a value that does not parse is a :class:`~jaxlab.core.errors.ConfigError` naming the variable, its
value and what it accepts, from library code as from ``experiments/run.py``, which checks them all
with :func:`check_environment` before it starts anything. Booleans are booleans everywhere:
``1/true/yes/on`` and ``0/false/no/off`` (any case); an empty value counts as unset.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Literal, NamedTuple

from jaxlab.core.errors import ConfigError

__all__ = [
    "COMPILATION_CACHE",
    "FIGURE_HELPER",
    "Distributed",
    "check_environment",
    "compilation_cache_setting",
    "distributed_settings",
    "env_flag",
    "env_int",
    "env_switch",
    "process_index_hint",
]

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
_BOOLEANS = "1/true/yes/on or 0/false/no/off"

NUM_PROCESSES = "JAXLAB_NUM_PROCESSES"
PROCESS_ID = "JAXLAB_PROCESS_ID"
COORDINATOR = "JAXLAB_COORDINATOR"
DISTRIBUTED = "JAXLAB_DISTRIBUTED"
PALLAS = "JAXLAB_PALLAS"
COMPILATION_CACHE = "JAXLAB_COMPILATION_CACHE"
FIGURE_HELPER = "JAXLAB_FIGURE_HELPER"
SMOKE = "JAXLAB_SMOKE"


def _raw(name: str, env: Mapping[str, str]) -> str | None:
    """The variable's value, stripped; None when it is unset or empty."""
    value = env.get(name, "").strip()
    return value or None


def env_flag(name: str, default: bool = False, env: Mapping[str, str] = os.environ) -> bool:
    """A boolean variable: ``1/true/yes/on`` or ``0/false/no/off`` (any case); ``default`` unset.

    Raises:
      ConfigError: any other value.
    """
    value = _raw(name, env)
    if value is None:
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean; use {_BOOLEANS}")


def env_int(
    name: str,
    default: int,
    *,
    minimum: int = 0,
    hint: str = "",
    env: Mapping[str, str] = os.environ,
) -> int:
    """A whole-number variable of at least ``minimum``; ``default`` when unset.

    Raises:
      ConfigError: a value that is not a whole number, or one below ``minimum`` (``hint`` is
        appended to the message).
    """
    value = _raw(name, env)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < minimum:
        what = "not a whole number" if number is None else f"below {minimum}"
        raise ConfigError(f"{name}={value!r} is {what}; give an integer >= {minimum}{hint}")
    return number


def env_switch(
    name: str, default: str = "auto", env: Mapping[str, str] = os.environ
) -> Literal["auto", "on", "off"]:
    """A three-way switch: ``auto``, or a boolean (``on`` / ``off`` and their synonyms).

    Raises:
      ConfigError: any other value.
    """
    value = _raw(name, env)
    if value is None:
        return default
    lowered = value.lower()
    if lowered == "auto":
        return "auto"
    if lowered in TRUE:
        return "on"
    if lowered in FALSE:
        return "off"
    raise ConfigError(f"{name}={value!r} must be auto, or {_BOOLEANS}")


class Distributed(NamedTuple):
    """How a multi-process run starts: ``jax.distributed.initialize``'s arguments.

    ``auto`` (``JAXLAB_DISTRIBUTED=auto``) leaves them to JAX's cluster detection (TPU pods,
    SLURM), and the other fields are then None.
    """

    auto: bool
    num_processes: int | None = None
    process_id: int | None = None
    coordinator: str | None = None


def _coordinator(env: Mapping[str, str]) -> str:
    value = _raw(COORDINATOR, env)
    if value is None:
        raise ConfigError(
            f"a multi-process run ({NUM_PROCESSES}={_raw(NUM_PROCESSES, env)}) needs "
            f"{COORDINATOR}=host:port, the address of process 0"
        )
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"{COORDINATOR}={value!r} is not host:port (a port in 1..65535); give the address of "
            "process 0, e.g. 10.0.0.1:1234"
        )
    return value


def distributed_settings(env: Mapping[str, str] = os.environ) -> Distributed | None:
    """The multi-process settings the environment asks for, or None for a single-process run.

    ``JAXLAB_DISTRIBUTED=auto`` (or on) lets JAX detect the cluster; otherwise a run is
    multi-process when ``JAXLAB_NUM_PROCESSES`` > 1, and then needs ``JAXLAB_COORDINATOR``
    (``host:port``) and ``JAXLAB_PROCESS_ID`` (0 .. processes - 1).

    Raises:
      ConfigError: one of the variables holds a bad value, or a multi-process run lacks one.
    """
    if env_switch(DISTRIBUTED, default="off", env=env) != "off":
        return Distributed(auto=True)
    num = env_int(NUM_PROCESSES, 1, minimum=1, hint=" (the number of processes)", env=env)
    process_id = process_index_hint(env)
    if num == 1:
        return None
    if _raw(PROCESS_ID, env) is None:
        raise ConfigError(
            f"a multi-process run ({NUM_PROCESSES}={num}) needs {PROCESS_ID}, this process's "
            f"index from 0 to {num - 1}"
        )
    if process_id >= num:
        raise ConfigError(
            f"{PROCESS_ID}={process_id} is not below {NUM_PROCESSES}={num}; give each process "
            f"an index from 0 to {num - 1}"
        )
    return Distributed(False, num, process_id, _coordinator(env))


def process_index_hint(env: Mapping[str, str] = os.environ) -> int:
    """``JAXLAB_PROCESS_ID`` (0 when unset): this process's index before JAX knows it.

    Raises:
      ConfigError: a value that is not an integer >= 0.
    """
    return env_int(PROCESS_ID, 0, hint=" (this process's index in the run)", env=env)


def compilation_cache_setting(env: Mapping[str, str] = os.environ) -> pathlib.Path | bool:
    """``JAXLAB_COMPILATION_CACHE``: a directory, False (off), or True (the default place).

    ``0/false/no/off`` (and ``none``) turn the cache off; ``1/true/yes/on`` or unset keep the
    default; anything else names a directory (created when the cache is enabled,
    :func:`jaxlab.core.compile_cache.enable_compilation_cache`). Nothing is written here.

    Raises:
      ConfigError: a path that exists and is not a directory.
    """
    value = _raw(COMPILATION_CACHE, env)
    if value is None or value.lower() in TRUE:
        return True
    if value.lower() in (*FALSE, "none"):
        return False
    path = pathlib.Path(value).expanduser()
    existing = next((p for p in (path, *path.parents) if p.exists()), path)
    if existing.exists() and not existing.is_dir():
        where = "is a file" if existing == path else f"lies below the file {existing}"
        raise ConfigError(f"{COMPILATION_CACHE}={value!r} {where}; give a directory, or off")
    return path


def check_environment(env: Mapping[str, str] = os.environ) -> None:
    """Parses every ``JAXLAB_*`` variable jaxlab reads, so a bad value fails before a run starts.

    Raises:
      ConfigError: the first variable whose value does not parse (one line, naming it).
    """
    distributed_settings(env)
    env_switch(PALLAS, env=env)
    env_flag(SMOKE, env=env)
    env_flag(FIGURE_HELPER, default=True, env=env)
    compilation_cache_setting(env)
