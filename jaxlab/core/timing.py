"""One protocol for timing compiled JAX work: warm up (compile), repeat, report the median.

Every benchmark in jaxlab (step times, solver times, kernel throughput) reports ratios measured in
one process with this protocol, so that two numbers being compared were taken the same way:

* each callable is called ``warmup`` times first (compilation and first-touch allocation are not
  timed); its result is blocked on (``jax.block_until_ready``), so asynchronous dispatch cannot
  make a call look faster than it is;
* then it is timed ``repeats`` times, each time over ``calls`` consecutive calls (for work too
  short to time alone), and the **median** per-call time is reported with all the samples;
* :func:`time_interleaved` times several callables in rounds (A, B, C, A, B, C, ...) so that drift
  in machine load hits each of them alike — use it whenever the numbers will be divided.

Callables take no arguments: close over the inputs (or over a mutable holder when a step donates
and returns its state, see :func:`jaxlab.methods.rmt.benchmark.step_seconds`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax

__all__ = ["Timing", "time_call", "time_interleaved"]


class Timing(NamedTuple):
    """Seconds per call: the median over repeats, and every repeat's per-call time."""

    median: float
    samples: tuple[float, ...]

    @property
    def spread(self) -> float:
        """Largest minus smallest sample (0 for one sample)."""
        return max(self.samples) - min(self.samples)


def _check(repeats: int, calls: int, warmup: int) -> None:
    if repeats < 1 or calls < 1 or warmup < 0:
        raise ValueError(
            f"need repeats >= 1, calls >= 1, warmup >= 0; got {repeats}, {calls}, {warmup}"
        )


def _timed(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    out = None
    for _ in range(calls):
        out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def time_call(
    fn: Callable[[], Any], *, repeats: int = 5, calls: int = 1, warmup: int = 1
) -> Timing:
    """Median seconds per call of ``fn()`` (see the module docstring for the protocol)."""
    return time_interleaved({"fn": fn}, repeats=repeats, calls=calls, warmup=warmup)["fn"]


def time_interleaved(
    fns: Mapping[str, Callable[[], Any]], *, repeats: int = 5, calls: int = 1, warmup: int = 1
) -> dict[str, Timing]:
    """Times every callable of ``fns`` in interleaved rounds; returns a :class:`Timing` per name."""
    _check(repeats, calls, warmup)
    for fn in fns.values():
        for _ in range(warmup):
            jax.block_until_ready(fn())
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(_timed(fn, calls))
    return {name: Timing(statistics.median(s), tuple(s)) for name, s in samples.items()}
