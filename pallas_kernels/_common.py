"""Plumbing shared by the kernels: the error type, backend choice and the block-reduction driver.

Every kernel here reduces over a sequence of blocks (keys for attention, the contracting dimension
for matmul). GPUs (Triton) have no sequential grid axis, so there the reduction is a ``fori_loop``
inside one program over a full-length reference. TPUs (Mosaic) run the grid's last axis
sequentially and pipeline its blocks from HBM, so there the reduction is that grid axis with the
carry in VMEM scratch. :func:`reduce_blocks` hides the difference so each kernel writes its tile
step once. On CPU the kernels run with ``interpret=True`` in either style (tests run both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

__all__ = [
    "KernelConfigError",
    "Style",
    "check_power_of_two",
    "load_tile",
    "reduce_blocks",
    "resolve_backend",
    "round_up",
]

Style = Literal["gpu", "tpu"]


class KernelConfigError(ValueError):
    """A kernel called with block sizes or shapes it cannot take; the message says what to change.

    ``jaxlab.nn.attention`` re-raises it as ``jaxlab.core.errors.ConfigError`` (pallas_kernels does
    not import jaxlab).
    """


def resolve_backend(backend: str | None, interpret: bool | None) -> tuple[Style, bool]:
    """Kernel style and interpret flag for a call.

    ``backend=None`` follows ``jax.default_backend()``: TPU → the sequential-grid style, anything
    else → the GPU style (a loop inside the program), which is also the faster one to interpret on
    CPU. ``interpret=None`` interprets exactly when the default backend is the CPU.
    """
    platform = jax.default_backend()
    if interpret is None:
        interpret = platform == "cpu"
    if backend is None:
        backend = "tpu" if platform == "tpu" else "gpu"
    if backend not in ("gpu", "tpu"):
        raise KernelConfigError(f"unknown kernel backend {backend!r}; choose 'gpu' or 'tpu'")
    if not interpret and platform != backend:
        raise KernelConfigError(
            f"a native {backend} kernel cannot run on the {platform} backend; "
            "pass interpret=True (or leave interpret=None)"
        )
    return backend, bool(interpret)


def check_power_of_two(owner: str, name: str, value: int, minimum: int = 8) -> None:
    """Raises KernelConfigError unless ``value`` is an int power of two ``>= minimum``."""
    if not isinstance(value, int) or value < minimum or value & (value - 1):
        raise KernelConfigError(
            f"{owner}.{name}={value!r} must be a power of two >= {minimum} (e.g. 64 or 128)"
        )


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def pow2_at_least(n: int, floor: int = 8) -> int:
    """The smallest power of two ``>= max(n, floor)``: blocks shrink to fit short inputs."""
    return max(floor, 1 << max(n - 1, 0).bit_length())


def load_tile(ref, j, size: int, style: Style, axis: int = 0):
    """Block ``j`` (of ``size`` rows along ``axis``) of a 2-D ref.

    GPU style passes the full-length ref and slices it; TPU style's ref already is block ``j``.
    """
    if style == "tpu":
        return ref[...]
    start = pl.multiple_of(j * size, size)
    index = [slice(None), slice(None)]
    index[axis] = pl.ds(start, size)
    return ref[tuple(index)]


def reduce_blocks(
    step: Callable,
    init: Callable[[], Sequence[jax.Array]],
    finalize: Callable[[Sequence[jax.Array]], None],
    *,
    lo,
    hi,
    style: Style,
    scratch: Sequence = (),
    axis: int = -1,
) -> None:
    """Runs ``carry = step(j, carry)`` for blocks ``lo <= j < hi``, then ``finalize(carry)``.

    Args:
      step: ``(j, carry) -> carry`` on one block.
      init: builds the initial carry (called inside the kernel).
      finalize: writes the outputs from the final carry.
      lo, hi: the blocks that contribute (a causal mask skips the others); traced ints are fine.
      style: ``"gpu"`` loops in the program; ``"tpu"`` uses grid axis ``axis`` as the loop, the
        carry living in ``scratch`` refs between grid steps.
    """
    if style == "gpu":
        finalize(lax.fori_loop(lo, hi, step, tuple(init())))
        return
    j = pl.program_id(axis)

    @pl.when(j == 0)
    def _init():
        for ref, value in zip(scratch, init(), strict=True):
            ref[...] = value

    @pl.when(jnp.logical_and(j >= lo, j < hi))
    def _step():
        carry = step(j, tuple(ref[...] for ref in scratch))
        for ref, value in zip(scratch, carry, strict=True):
            ref[...] = value

    @pl.when(j == pl.num_programs(axis) - 1)
    def _finalize():
        finalize(tuple(ref[...] for ref in scratch))
