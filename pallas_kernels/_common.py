"""Plumbing shared by the kernels: the error type, backend choice and the block-reduction driver.

Every kernel here reduces over a sequence of blocks (keys for attention, the contracting dimension
for matmul). GPUs (Triton) have no sequential grid axis, so there the reduction is a ``fori_loop``
inside one program over a full-length reference. TPUs (Mosaic) run the grid's last axis
sequentially and pipeline its blocks from HBM, so there the reduction is that grid axis with the
carry in VMEM scratch. :func:`reduce_blocks` hides the difference so each kernel writes its tile
step once. On CPU the kernels run with ``interpret=True`` in either style (tests run both).

A native kernel is tied to a platform (Triton to CUDA/ROCm GPUs, Mosaic to TPUs), but which platform
a program runs on is only known when it is lowered: ``jax.export`` lowers for a platform that is not
present. :func:`native_call` therefore stages the kernel behind ``lax.platform_dependent``: lowering
for the kernel's platform keeps the kernel, lowering for any other one (or running it eagerly there)
raises :class:`KernelConfigError` — a check at lowering time, not at trace time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

__all__ = [
    "KernelConfigError",
    "Style",
    "check_power_of_two",
    "load_tile",
    "native_call",
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
    CPU. ``interpret=None`` interprets exactly when the default backend is the CPU. A native kernel
    asked for on another platform is refused when it is lowered or run (:func:`native_call`), not
    here, so that ``jax.export`` can lower it for a platform this machine does not have.
    """
    platform = jax.default_backend()
    if interpret is None:
        interpret = platform == "cpu"
    if backend is None:
        backend = "tpu" if platform == "tpu" else "gpu"
    if backend not in ("gpu", "tpu"):
        raise KernelConfigError(f"unknown kernel backend {backend!r}; choose 'gpu' or 'tpu'")
    return backend, bool(interpret)


# The lowering platforms each kernel style compiles for (names as in lax.platform_dependent).
NATIVE_PLATFORMS: dict[Style, tuple[str, ...]] = {"gpu": ("cuda", "rocm"), "tpu": ("tpu",)}


def _wrong_platform_message(style: str, platforms) -> str:
    where = platforms if isinstance(platforms, str) else "/".join(platforms)
    return (
        f"a native {style} kernel cannot run on the {where} backend; "
        "pass interpret=True (or leave interpret=None)"
    )


# Stands in for a native kernel on the platforms it does not support: same output avals, and an
# error when run eagerly or lowered (the branch platform_dependent keeps for those platforms).
_wrong_platform_p = Primitive("pallas_kernels_wrong_platform")
_wrong_platform_p.multiple_results = True


@_wrong_platform_p.def_abstract_eval
def _wrong_platform_abstract_eval(*args, out_avals, style):
    return out_avals


@_wrong_platform_p.def_impl
def _wrong_platform_impl(*args, out_avals, style):
    raise KernelConfigError(_wrong_platform_message(style, jax.default_backend()))


def _wrong_platform_lowering(ctx, *args, out_avals, style):
    raise KernelConfigError(_wrong_platform_message(style, ctx.module_context.platforms))


def _wrong_platform_batching(args, dims, *, out_avals, style):  # vmap of a native kernel
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    args = [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims, strict=True)]
    batched = tuple(a.update(shape=(size, *a.shape)) for a in out_avals)
    return _wrong_platform_p.bind(*args, out_avals=batched, style=style), (0,) * len(batched)


mlir.register_lowering(_wrong_platform_p, _wrong_platform_lowering)
batching.primitive_batchers[_wrong_platform_p] = _wrong_platform_batching


def native_call(call: Callable, out_shape: Sequence, style: Style, interpret: bool) -> Callable:
    """``call`` (a ``pallas_call``) guarded so it only lowers for its own platform.

    Interpreted kernels run anywhere and are returned unchanged. A native one is staged through
    ``lax.platform_dependent``: lowering for one of :data:`NATIVE_PLATFORMS` ``[style]`` keeps the
    kernel and drops the other branch, so ``jax.export(..., platforms=["cuda"])`` works on a CPU
    machine; lowering for another platform (``jax.jit`` on the CPU, say), or running eagerly there,
    raises :class:`KernelConfigError`.
    """
    if interpret:
        return call
    out_avals = tuple(jax.core.ShapedArray(o.shape, o.dtype) for o in out_shape)

    def kernel(*arrays):  # both branches return a list (platform_dependent compares pytrees)
        return list(call(*arrays))

    def refuse(*arrays):
        return list(_wrong_platform_p.bind(*arrays, out_avals=out_avals, style=style))

    def guarded(*arrays):
        native = dict.fromkeys(NATIVE_PLATFORMS[style], kernel)
        return lax.platform_dependent(*arrays, default=refuse, **native)

    return guarded


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
