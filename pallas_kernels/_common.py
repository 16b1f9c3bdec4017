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

The two attention kernels (flash and MLR) share more: the q/k/v check (:func:`check_qkv`, kept
with the error type in :mod:`pallas_kernels._checks`, which imports no Pallas), the f32 tile
product (:func:`dot`), the ``pallas_call`` launcher that builds their BlockSpecs from array roles
(:func:`attention_call`) and the ``custom_vjp`` that ties a forward launcher to a backward one
(:func:`attention_vjp`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from pallas_kernels._checks import KernelConfigError, check_qkv

__all__ = [
    "F32",
    "MASK_VALUE",
    "KernelConfigError",
    "Style",
    "attention_call",
    "attention_vjp",
    "check_power_of_two",
    "check_qkv",
    "div",
    "dot",
    "extra_inputs",
    "f32_precision",
    "load_tile",
    "native_call",
    "reduce_blocks",
    "resolve_backend",
    "round_up",
    "split_refs",
]

Style = Literal["gpu", "tpu"]
F32 = jnp.float32
# Finite, so a masked logit minus a running max never produces inf - inf = NaN.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


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


# --------------------------------------------------------------------- attention: tile maths


# How a native GPU kernel computes a float32 dot that asks for float32 accuracy. HIGHEST lowers
# to Triton's "ieee" input precision, plain FMAs without the tensor cores.
GPU_F32_DOT = lax.Precision.HIGHEST


def f32_precision(style: Style, interpret: bool, precision=None):
    """The precision of a kernel's float32 dots: ``precision`` where given (any value
    ``lax.dot_general`` takes), else float32 accuracy: :data:`GPU_F32_DOT` in a native GPU kernel
    and ``HIGHEST`` elsewhere. The interpreter computes exact float32 dots whatever is asked (XLA
    on the CPU has no TF32 algorithms)."""
    if interpret:
        return lax.Precision.HIGHEST
    if precision is not None:
        return precision
    return GPU_F32_DOT if style == "gpu" else lax.Precision.HIGHEST


def dot(a, b, contract: tuple[int, int], precision=lax.Precision.HIGHEST):
    """``a · b`` contracting dim ``contract[0]`` of ``a`` with ``contract[1]`` of ``b``, in f32.

    float32 operands use ``precision`` (the kernel's :func:`f32_precision`: float32 accuracy by
    default, so GPUs do not silently drop to TF32's 10-bit mantissa); others use the tensor cores.
    """
    dims = (((contract[0],), (contract[1],)), ((), ()))
    precision = precision if a.dtype == F32 and b.dtype == F32 else None
    return lax.dot_general(a, b, dims, precision=precision, preferred_element_type=F32)


def div(a, b: int):
    """``a // b`` for a traced ``a >= 0``. ``jnp.floor_divide`` corrects negative quotients with
    ``sign``, whose Mosaic lowering asks the TPU for its chip version (so lowering fails without
    one); truncating ``lax.div`` is the same on non-negative values. ``b`` takes ``a``'s dtype,
    so the index maths stays int32 under x64."""
    return lax.div(a, jnp.asarray(b, a.dtype))


# ------------------------------------------------------------------ attention: pallas_call plumbing


def split_refs(refs, n_main: int, cfg):
    """A kernel's refs as ``(main, seg_q, seg_k, slopes, rest)``: the first ``n_main`` inputs,
    the optional segment ids and ALiBi slopes (present as ``cfg.has_seg``, ``cfg.has_alibi``
    say, else None) that :func:`extra_inputs` appended, and the outputs and scratch refs."""
    main, rest = refs[:n_main], list(refs[n_main:])
    seg_q = seg_k = slopes = None
    if cfg.has_seg:
        seg_q, seg_k, *rest = rest
    if cfg.has_alibi:
        slopes, *rest = rest
    return main, seg_q, seg_k, slopes, rest


def extra_inputs(seg_q, seg_k, slopes, row_is_q: bool):
    """The optional inputs (segment ids, ALiBi slopes) and their :func:`attention_call` roles;
    ``row_is_q`` says whether the program's own block is a query block."""
    arrays, roles = [], []
    if seg_q is not None:
        arrays += [seg_q, seg_k]
        roles += ["seg_row", "seg_stream"] if row_is_q else ["seg_stream", "seg_row"]
    if slopes is not None:
        arrays.append(slopes)
        roles.append("slopes")
    return arrays, roles


def attention_call(
    kernel,
    cfg,
    *,
    rows: tuple[int, int],
    stream: tuple[int, int],
    arrays,
    roles,
    out_shape,
    out_roles,
    scratch,
    name,
    clamp: Callable,
    groups: int = 1,
    width=None,
):
    """Builds the BlockSpecs of one attention kernel and calls it (flash and MLR attention).

    Every array is ``(B, heads, L, width)`` or a segment array; ``roles[n]`` says whether array
    ``n`` is tiled like the program's own block (``"row"``), streamed (``"stream"``), indexed by
    kv head (suffix ``"_kv"``, head ``h // groups``), a segment array (``"seg_row"`` /
    ``"seg_stream"`` with the length on axis 1 or 2) or the ALiBi slopes. ``rows = (block,
    count)`` and ``stream = (block, count)`` tile the program's own and the streamed axis;
    ``clamp(r, s)`` is the streamed block index fetched on TPU at step ``s`` of row block ``r``
    (a kernel clamps it to the blocks it visits, so skipped ones are not fetched). ``width`` is
    the head width that sets the GPU warps (default: the first array's). ``cfg`` is the kernel's
    static config (``style``, ``interpret``), passed to ``kernel`` as ``cfg=``.
    """
    B, H = arrays[0].shape[:2]
    row_block, n_rows = rows
    stream_block, n_stream = stream
    kv_head = lambda h: div(h, groups)  # noqa: E731  (h >= 0; no floor_divide, see div)

    def spec(role, array):
        tpu = cfg.style == "tpu"
        if role == "slopes":  # (H,): a scalar per program, in SMEM on TPU
            return pl.BlockSpec(memory_space=pltpu.SMEM) if tpu else pl.BlockSpec(array.shape)
        head = kv_head if role.endswith("_kv") else (lambda h: h)
        role = role.removesuffix("_kv")
        seg = role.startswith("seg_")  # (B, L, 1) query-side ids or (B, 1, L) key-side ids
        axis = (1 if array.shape[-1] == 1 else 2) if seg else 2  # the length axis
        streamed = role.endswith("stream")
        block = [None, *array.shape[1:]] if seg else [None, None, *array.shape[2:]]
        if not streamed:
            block[axis] = row_block
        elif tpu:
            block[axis] = stream_block  # GPU: the whole length, sliced inside the kernel

        def index_map(b, h, r, *s):
            index = [b, 0, 0] if seg else [b, head(h), 0, 0]
            if not streamed:
                index[axis] = r
            elif tpu:
                index[axis] = clamp(r, s[0])
            return tuple(index)

        return pl.BlockSpec(tuple(block), index_map)

    in_specs = [spec(role, a) for role, a in zip(roles, arrays, strict=True)]
    out_specs = [spec(role, o) for role, o in zip(out_roles, out_shape, strict=True)]
    if cfg.style == "tpu":
        grid = (B, H, n_rows, n_stream)
        params = pltpu.CompilerParams(dimension_semantics=("parallel",) * 3 + ("arbitrary",))
        scratch_shapes = [pltpu.VMEM(shape, F32) for shape in scratch]
    else:
        grid = (B, H, n_rows)
        width = width or arrays[0].shape[-1]
        warps = getattr(cfg, "num_warps", None) or (4 if width <= 64 else 8)
        params = plgpu.CompilerParams(num_warps=warps, num_stages=getattr(cfg, "num_stages", 2))
        scratch_shapes = []
    call = pl.pallas_call(
        functools.partial(kernel, cfg=cfg),
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        scratch_shapes=scratch_shapes,
        compiler_params=params,
        interpret=cfg.interpret,
        name=name,
    )
    return native_call(call, out_shape, cfg.style, cfg.interpret)(*arrays)


def attention_vjp(forward: Callable, backward: Callable) -> Callable:
    """``attend(q, k, v, seg_q, seg_k, slopes, cfg) -> o``, differentiable in q, k, v.

    The FlashAttention-2 split (Dao 2023): ``forward(q, k, v, seg_q, seg_k, slopes, cfg)`` returns
    the output and the log-sum-exp ``L`` of each query row (Alg. 1); the backward pass computes
    ``delta = rowsum(dO ∘ O)`` (Alg. 2 line 4, an elementwise pass XLA fuses on its own) and hands
    ``backward(cfg, [q, k, v, dO, L, delta], seg_q, seg_k, slopes)`` the kernels' inputs, which
    returns ``(dq, dk, dv)``. Segment ids and slopes are constants (no gradient); ``cfg`` is
    static (hashable).
    """

    @functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
    def attend(q, k, v, seg_q, seg_k, slopes, cfg):
        return forward(q, k, v, seg_q, seg_k, slopes, cfg)[0]

    def attend_fwd(q, k, v, seg_q, seg_k, slopes, cfg):
        o, lse = forward(q, k, v, seg_q, seg_k, slopes, cfg)
        return o, (q, k, v, seg_q, seg_k, slopes, o, lse)

    def attend_bwd(cfg, residuals, do):
        q, k, v, seg_q, seg_k, slopes, o, lse = residuals
        delta = jnp.sum(o.astype(F32) * do.astype(F32), axis=-1, keepdims=True)
        dq, dk, dv = backward(cfg, [q, k, v, do, lse, delta], seg_q, seg_k, slopes)
        return dq, dk, dv, None, None, None

    attend.defvjp(attend_fwd, attend_bwd)
    return attend
