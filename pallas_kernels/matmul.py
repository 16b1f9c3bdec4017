"""Tiled matmul in Pallas with float32 accumulation and an optional fused activation epilogue.

``matmul(x, y, activation=...)`` computes ``act(x @ y)``: each program owns a ``(block_m, block_n)``
output tile and accumulates ``x[i, k] @ y[k, j]`` over ``block_k``-wide slices of the contracting
dimension in float32 (bf16 inputs feed the tensor cores / MXU at full rate, the sum does not lose
bits), then applies the activation to the float32 tile before the single rounding to the output
dtype — the epilogue fusion of CUTLASS-style GEMMs, which saves one round trip of the activation
through HBM. The TPU version follows the block-accumulate-in-VMEM pattern of the Pallas TPU matmul
guide. Differentiable through ``jax.custom_vjp``: the forward saves the pre-activation tile output,
the backward applies the activation's derivative elementwise and runs the same kernel for
``dX = dZ Yᵀ`` and ``dY = Xᵀ dZ``. Inputs of any size are zero-padded to the tiles (zeros add
nothing to a dot product) and the result sliced.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu
from jaxtyping import Array, Float

from pallas_kernels import fit
from pallas_kernels._checks import ACTIVATIONS
from pallas_kernels._common import (
    KernelConfigError,
    Style,
    check_power_of_two,
    f32_precision,
    load_tile,
    native_call,
    pow2_at_least,
    reduce_blocks,
    resolve_backend,
    round_up,
)

__all__ = ["ACTIVATIONS", "BlockSizes", "matmul", "matmul_reference"]
TILES = ("block_m", "block_n", "block_k")

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Output tile ``(block_m, block_n)`` and contracting step ``block_k`` (powers of two).

    Dimensions smaller than a block shrink it to the next power of two that covers them.
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    # GPU only: warps per program and software-pipelining depth of the contracting loop.
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in TILES:
            check_power_of_two("BlockSizes", name, getattr(self, name))
        check_power_of_two("BlockSizes", "num_warps", self.num_warps, minimum=1)
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise KernelConfigError(f"BlockSizes.num_stages={self.num_stages!r} must be >= 1")

    @classmethod
    def for_backend(cls, backend: Style) -> BlockSizes:
        return cls() if backend == "gpu" else cls(256, 256, 512)

    @classmethod
    def for_gpu(cls, rows: int, cols: int) -> BlockSizes:
        """The shipped GPU tiles, by what the H200 run of pallas_kernels/README.md measured: for
        outputs of at least 8192 x 8192, 128 x 256 tiles, 64 deep, with 8 warps (the defaults
        were slower there); the defaults elsewhere (measured at 2048)."""
        if min(rows, cols) >= 8192:
            return cls(128, 256, 64, num_warps=8, num_stages=3)
        return cls()

    @classmethod
    def fitted(cls, dtype, rows: int = 0, cols: int = 0) -> BlockSizes:
        """The GPU defaults for a ``rows x cols`` output (:meth:`for_gpu`), tiles halved until
        the shared-memory estimate at this dtype fits the device (:mod:`pallas_kernels.fit`)."""
        return fit.shrink(
            cls.for_gpu(rows, cols), TILES, lambda b: fit.matmul_bytes(b, dtype, b.num_stages),
            fit.smem_budget(),
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _Static:
    block_m: int
    block_n: int
    block_k: int
    activation: str | None
    style: Style
    interpret: bool
    precision: object  # of float32 dots (_common.f32_precision)
    num_warps: int
    num_stages: int


def _kernel(x_ref, y_ref, *refs, cfg: _Static, save_pre: bool):
    """One ``(block_m, block_n)`` output tile: sum over contracting blocks, then the epilogue."""
    o_ref, *rest = refs
    pre_ref, scratch = (rest[0], rest[1:]) if save_pre else (None, rest)
    bk = cfg.block_k

    def step(kk, carry):
        x_XI = load_tile(x_ref, kk, bk, cfg.style, axis=1)
        y_IO = load_tile(y_ref, kk, bk, cfg.style, axis=0)
        full = cfg.precision if x_XI.dtype == F32 else None  # no silent TF32 for f32
        dims = (((1,), (0,)), ((), ()))
        prod = lax.dot_general(x_XI, y_IO, dims, precision=full, preferred_element_type=F32)
        return (carry[0] + prod,)

    def finalize(carry):
        (z_XO,) = carry
        if pre_ref is not None:
            pre_ref[...] = z_XO.astype(pre_ref.dtype)
        act = ACTIVATIONS[cfg.activation] if cfg.activation else (lambda z: z)
        o_ref[...] = act(z_XO).astype(o_ref.dtype)

    nk = x_ref.shape[1] // bk if cfg.style == "gpu" else pl.num_programs(2)
    init = lambda: (jnp.zeros(o_ref.shape, F32),)
    reduce_blocks(step, init, finalize, lo=0, hi=nk, style=cfg.style, scratch=scratch, axis=2)


def _padded_call(x, y, cfg: _Static, save_pre: bool):
    """Pads ``(M, K) @ (K, N)`` to the tiles, runs the kernel, slices ``[out, (pre-act)]``."""
    (M, K), N = x.shape, y.shape[1]
    bm, bn, bk = (
        min(cfg.block_m, pow2_at_least(M)),
        min(cfg.block_n, pow2_at_least(N)),
        min(cfg.block_k, pow2_at_least(K)),
    )
    cfg = dataclasses.replace(cfg, block_m=bm, block_n=bn, block_k=bk)
    Mp, Np, Kp = round_up(M, bm), round_up(N, bn), round_up(K, bk)
    x = jnp.pad(x, ((0, Mp - M), (0, Kp - K)))
    y = jnp.pad(y, ((0, Kp - K), (0, Np - N)))
    if cfg.style == "tpu":
        grid = (Mp // bm, Np // bn, Kp // bk)
        in_specs = [
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ]
        scratch = [pltpu.VMEM((bm, bn), F32)]
        params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"))
    else:  # each program streams its full rows of x and columns of y
        grid = (Mp // bm, Np // bn)
        in_specs = [
            pl.BlockSpec((bm, Kp), lambda i, j: (i, 0)),
            pl.BlockSpec((Kp, bn), lambda i, j: (0, j)),
        ]
        scratch = []
        params = plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    out_spec = pl.BlockSpec((bm, bn), lambda i, j, *kk: (i, j))
    out_shape = [jax.ShapeDtypeStruct((Mp, Np), x.dtype)] * (2 if save_pre else 1)
    call = pl.pallas_call(
        functools.partial(_kernel, cfg=cfg, save_pre=save_pre),
        grid=grid,
        in_specs=in_specs,
        out_specs=[out_spec] * len(out_shape),
        out_shape=out_shape,
        scratch_shapes=scratch,
        compiler_params=params,
        interpret=cfg.interpret,
        name=f"matmul_{cfg.activation or 'linear'}",
    )
    outs = native_call(call, out_shape, cfg.style, cfg.interpret)(x, y)
    return [o[:M, :N] for o in outs]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _matmul(x, y, cfg: _Static):
    return _padded_call(x, y, cfg, save_pre=False)[0]


def _matmul_fwd(x, y, cfg: _Static):
    if cfg.activation is None:
        return _padded_call(x, y, cfg, save_pre=False)[0], (x, y, None)
    out, pre = _padded_call(x, y, cfg, save_pre=True)
    return out, (x, y, pre)


def _matmul_bwd(cfg: _Static, residuals, g):
    x, y, pre = residuals
    dz = g
    if cfg.activation is not None:  # the epilogue's derivative, elementwise (XLA fuses it)
        _, act_vjp = jax.vjp(ACTIVATIONS[cfg.activation], pre.astype(F32))
        (dz,) = act_vjp(g.astype(F32))
    dz = dz.astype(x.dtype)
    linear = dataclasses.replace(cfg, activation=None)
    dx = _padded_call(dz, y.T, linear, save_pre=False)[0]  # dX = dZ Yᵀ
    dy = _padded_call(x.T, dz, linear, save_pre=False)[0]  # dY = Xᵀ dZ
    return dx, dy


_matmul.defvjp(_matmul_fwd, _matmul_bwd)


def matmul(
    x: Float[Array, "*batch I"],
    y: Float[Array, "I O"],
    *,
    block_sizes: BlockSizes | None = None,
    activation: str | None = None,
    interpret: bool | None = None,
    backend: Style | None = None,
    precision=None,
) -> Float[Array, "*batch O"]:
    """``activation(x @ y)`` as a tiled Pallas kernel, accumulating in float32.

    Args:
      x: ``(..., I)``; leading dimensions are flattened into the rows.
      y: ``(I, O)``.
      block_sizes: tiles; default :meth:`BlockSizes.for_backend`, on a native GPU shrunk until
        their shared-memory estimate fits the device (:mod:`pallas_kernels.fit`).
      activation: ``None`` or a key of :data:`ACTIVATIONS`, fused into the epilogue.
      interpret: run the Pallas interpreter; ``None`` means exactly when on CPU.
      backend: ``"gpu"`` (Triton) or ``"tpu"`` (Mosaic) style; ``None`` follows the platform.
      precision: of float32 dots in a native kernel (as :func:`~pallas_kernels.flash_attention`'s);
        ``None`` means float32 accuracy.

    Returns:
      ``(..., O)`` in the promoted dtype of ``x`` and ``y``.

    Raises:
      KernelConfigError: for shapes that do not fit, an unknown activation or bad block sizes.
    """
    if y.ndim != 2 or x.ndim < 1 or x.shape[-1] != y.shape[0]:
        raise KernelConfigError(f"matmul: x{x.shape} @ y{y.shape} do not fit; y must be (I, O)")
    if activation is not None and activation not in ACTIVATIONS:
        raise KernelConfigError(
            f"matmul: unknown activation {activation!r}; choose None or one of {list(ACTIVATIONS)}"
        )
    style, interpret = resolve_backend(backend, interpret)
    dtype = jnp.promote_types(x.dtype, y.dtype)
    if block_sizes is None:
        native_gpu = style == "gpu" and not interpret
        rows = math.prod(x.shape[:-1])
        block_sizes = (
            BlockSizes.fitted(dtype, rows, y.shape[1])
            if native_gpu
            else BlockSizes.for_backend(style)
        )
    if not isinstance(block_sizes, BlockSizes):
        raise KernelConfigError(f"block_sizes must be a matmul BlockSizes, got {block_sizes!r}")
    tiles = {name: getattr(block_sizes, name) for name in TILES}
    if style == "gpu" and not interpret and min(tiles.values()) < 16:
        raise KernelConfigError(f"native GPU matmul needs blocks >= 16 (tl.dot); {block_sizes}")
    if style == "tpu" and not interpret and min(block_sizes.block_n, block_sizes.block_k) < 128:
        raise KernelConfigError(f"native TPU matmul needs block_n, block_k >= 128; {block_sizes}")
    cfg = _Static(**tiles, activation=activation, style=style, interpret=interpret,
                  precision=f32_precision(style, interpret, precision),
                  num_warps=block_sizes.num_warps, num_stages=block_sizes.num_stages)  # fmt: skip
    x_XI = x.reshape(-1, x.shape[-1]).astype(dtype)
    out_XO = _matmul(x_XI, y.astype(dtype), cfg)
    return out_XO.reshape(*x.shape[:-1], y.shape[1])


def matmul_reference(
    x: Float[Array, "*batch I"], y: Float[Array, "I O"], *, activation: str | None = None
) -> Float[Array, "*batch O"]:
    """The same product in plain jnp: float32 accumulation (float64 for float64 inputs),
    activation, one rounding."""
    dtype = jnp.promote_types(x.dtype, y.dtype)
    z = jnp.matmul(
        x.astype(dtype), y.astype(dtype), preferred_element_type=jnp.promote_types(dtype, F32)
    )
    return (ACTIVATIONS[activation](z) if activation else z).astype(dtype)
