"""XLA compile options per program: a fast compile where compiling outweighs running.

On CPU most of a small program's first call is XLA's code generation: LLVM's optimisation of the
generated code and, in the XLA of JAX 0.10, the MLIR fusion emitters. The smoke run of an LM
(``lm_baseline --smoke --set train.steps=2``) spends most of its time there, on programs that then
run for milliseconds (the measurements are in the root README, "Start-up").
:data:`FAST_CPU_OPTIONS` (LLVM at level 0, the older loop emitters where XLA has the switch)
compile those programs several times faster; they compute the same values up to rounding, and
matrix products, which run in library kernels, keep their speed, but elementwise work (the random
bits of an initialisation above all) runs slower. They also leave XLA's YNNPACK fusions out
(``xla_cpu_experimental_ynn_fusion_type`` empty, where XLA has the option): a program whose
matrix products run in YNNPACK builds those kernels' pipelines on its first call, which for a
program run a few times costs more than it saves; Eigen's matrix products need no such set-up.

So the fast compile is only for a run where the work it slows is small (:func:`short_run_options`):
a CPU run of a few steps of a small model, the case of a smoke test or of a first try from a
notebook. A real run, the step timer and the ahead-of-time compile keep XLA's defaults.

XLA's options come and go between versions (JAX 0.11's XLA has no ``xla_cpu_use_fusion_emitters``)
and an unknown one fails the compile, so :func:`known_options` asks the running XLA, once per option
and process, by compiling the identity with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

__all__ = [
    "FAST_CPU_OPTIONS",
    "SHORT_RUN_MAX_FLOPS",
    "SHORT_RUN_MAX_STATE",
    "SHORT_RUN_MAX_STEPS",
    "compile_lowered",
    "known_options",
    "not_refused",
    "short_run_options",
    "small_jit",
]

FAST_CPU_OPTIONS: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
    "xla_cpu_experimental_ynn_fusion_type": "",
}
# A run is short (compiled fast) when all three hold: at most this many steps, ...
SHORT_RUN_MAX_STEPS = 16
# ... at most this many estimated training FLOPs in all (a fraction of a second of a CPU core, so
# that even a step several times slower costs less than the compile time saved), ...
SHORT_RUN_MAX_FLOPS = 1e10
# ... and a train state of at most this many numbers (the initialisation's random bits are the
# elementwise work that level 0 slows most).
SHORT_RUN_MAX_STATE = 4_000_000

_KNOWN: dict[str, bool] = {}
_UNKNOWN = re.compile(r"No such compile option: '([^']+)'")


def _refused(err: Exception) -> str | None:
    found = _UNKNOWN.search(str(err))
    return None if found is None else found.group(1)


def known_options(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``options`` less those the running XLA does not know (None when nothing is left).

    The options not asked about before in this process are tried together, by compiling the
    identity with them (one small program; one more for each option XLA refuses, which its error
    names); the answers are kept.
    """
    ask = {k: v for k, v in (options or {}).items() if k not in _KNOWN}
    while ask:
        try:
            jax.jit(lambda x: x).lower(np.float32(0)).compile(ask)
        except jax.errors.JaxRuntimeError as err:
            name = _refused(err)
            if name not in ask:
                raise
            _KNOWN[name] = False
            del ask[name]
            continue
        _KNOWN.update(dict.fromkeys(ask, True))
        break
    return {k: v for k, v in (options or {}).items() if _KNOWN[k]} or None


def not_refused(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``options`` less those the running XLA has refused in this process (None when nothing is
    left); unlike :func:`known_options`, asks XLA nothing."""
    return {k: v for k, v in (options or {}).items() if _KNOWN.get(k, True)} or None


def compile_lowered(lowered: Any, options: Mapping[str, Any] | None) -> Any:
    """``lowered.compile(options)``, dropping (and remembering) any option XLA does not know.

    For a program compiled once by hand: an option XLA knows costs no extra compile, one it does
    not costs one failed compile per process.
    """
    options = not_refused(options)
    while True:
        try:
            return lowered.compile(compiler_options=options)
        except jax.errors.JaxRuntimeError as err:
            name = _refused(err)
            if not options or name not in options:
                raise
            _KNOWN[name] = False
            options = {k: v for k, v in options.items() if k != name} or None


def short_run_options(
    platform: str, steps: int, state_size: int, units_per_step: int
) -> dict[str, Any] | None:
    """The compile options of a training run's programs: fast ones for a short CPU run, else None.

    Args:
      platform: the devices' platform (``"cpu"``, ``"gpu"``, ``"tpu"``).
      steps: the run's steps.
      state_size: numbers in the train state (parameters and optimizer state).
      units_per_step: tokens (or examples) per step.

    The training FLOPs are estimated as ``6 N U S`` (Kaplan et al. 2020: 6 FLOPs per parameter
    and token), with ``N = state_size / 3`` parameters (AdamW keeps two moments per parameter),
    ``U`` units per step and ``S`` steps; a run is short when ``S <= SHORT_RUN_MAX_STEPS``, the
    estimate is at most :data:`SHORT_RUN_MAX_FLOPS` and ``state_size <= SHORT_RUN_MAX_STATE``.
    """
    flops = 2.0 * state_size * max(units_per_step, 1) * steps
    short = (
        platform == "cpu"
        and steps <= SHORT_RUN_MAX_STEPS
        and flops <= SHORT_RUN_MAX_FLOPS
        and state_size <= SHORT_RUN_MAX_STATE
    )
    return known_options(FAST_CPU_OPTIONS) if short else None


def small_jit(fn: Any) -> Any:
    """``jax.jit(fn)`` compiled fast on CPU, for a program of a handful of scalars (a
    learning-rate schedule read for the log): one quick compile instead of one per eager op."""
    options = known_options(FAST_CPU_OPTIONS) if jax.default_backend() == "cpu" else None
    return jax.jit(fn, compiler_options=options)
