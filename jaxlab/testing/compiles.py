"""Counting XLA compilations: what a block of code compiles, from JAX's own monitoring events."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax

__all__ = ["BACKEND_COMPILE", "backend_compiles"]

# JAX's event for one backend compile (or, with the persistent cache, its read from disk).
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def backend_compiles() -> Iterator[list[str]]:
    """Collects the name of every program XLA compiles (or reads from the persistent cache) in
    the ``with`` block, e.g. ``["jit(train_step)"]``; the list stays ``[]`` when nothing compiles::

        with backend_compiles() as names:
            step(state, batch)
        assert names == []
    """
    names: list[str] = []

    def listener(event: str, seconds: float, **kwargs: Any) -> None:
        if event == BACKEND_COMPILE:
            names.append(str(kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
