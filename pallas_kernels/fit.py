"""Shared-memory footprints of the GPU kernels, and the default tiles that fit a device.

A Triton program keeps its tiles in registers and shared memory; a block that asks for more shared
memory than the multiprocessor has fails when XLA compiles it (``RESOURCE_EXHAUSTED``; on an H200
the chunkwise mLSTM at head dim 256 asked for 327,680 bytes of the 232,448 a Hopper block may
have). The functions here estimate, from the shapes alone, the bytes of one program of each
kernel: every tile it holds counted once, float32 carries and accumulators included (Triton
converts them between layouts through shared memory), and the tiles a pipelined loop streams
``num_stages`` times. That rule gives the 327,680 bytes above, up to the gate columns: the
256 x 256 float32 state plus the two 64 x 256 bf16 tiles of k and v. It is an estimate, not
Triton's allocator: the defaults are the largest tiles whose estimate fits (:func:`shrink`), and
``scripts/gpu_bench.sh`` checks on the hardware that they compile and run. Explicit
``BlockSizes`` are used as given.

The budget per block is the device's opt-in shared memory (:data:`SMEM_BYTES`, by compute
capability; 227 KiB on Hopper), read off ``jax.devices()[0]`` on a GPU and Hopper's when lowering
from a machine without one (``python -m pallas_kernels.lower`` targets an H200).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

__all__ = [
    "ATTENTION_TILES",
    "MIN_GPU_TILE",
    "SMEM_BYTES",
    "fit_attention",
    "shrink",
    "flash_attention_bytes",
    "matmul_bytes",
    "mlr_attention_bytes",
    "mlstm_bytes",
    "smem_budget",
]

KiB = 1024
# Opt-in shared memory per block by compute capability (CUDA C Programming Guide, "Technical
# Specifications per Compute Capability"): Hopper 227 KiB, A100 163 KiB, the others 99 KiB.
SMEM_BYTES = {"9.0": 227 * KiB, "8.0": 163 * KiB, "8.7": 163 * KiB}
DEFAULT_SMEM = 99 * KiB  # sm_86/sm_89 and anything unknown
HOPPER = "9.0"


def smem_budget() -> int:
    """Shared memory one block may use on the default GPU (Hopper's without a GPU)."""
    if jax.default_backend() != "gpu":
        return SMEM_BYTES[HOPPER]
    capability = getattr(jax.devices()[0], "compute_capability", HOPPER)
    return SMEM_BYTES.get(str(capability), DEFAULT_SMEM)


def _size(dtype) -> int:
    return jnp.dtype(dtype).itemsize


# Each flash (and MLR) attention program and the BlockSizes fields that tile it.
ATTENTION_TILES = {
    "forward": ("block_q", "block_k"),
    "dkv": ("block_q_dkv", "block_k_dkv"),
    "dq": ("block_q_dq", "block_k_dq"),
}


def flash_attention_bytes(blocks, head_dim: int, dtype, num_stages: int = 2) -> dict[str, int]:
    """The estimate of each flash attention program (forward, dK/dV, dQ; the keys of
    :data:`ATTENTION_TILES`) for ``blocks`` (a ``flash_attention.BlockSizes``) at a (padded)
    ``head_dim``."""
    s, D = _size(dtype), head_dim
    bq, bk = blocks.block_q, blocks.block_k
    forward = s * D * (bq + 2 * num_stages * bk) + s * bq * bk + 4 * bq * D + 4 * bq * bk
    bq, bk = blocks.block_q_dkv, blocks.block_k_dkv
    dkv = s * D * (2 * bk + 2 * num_stages * bq) + 2 * s * bq * bk + 2 * 4 * bk * D + 4 * bq * bk
    bq, bk = blocks.block_q_dq, blocks.block_k_dq
    dq = s * D * (2 * bq + 2 * num_stages * bk) + s * bq * bk + 4 * bq * D + 4 * bq * bk
    return {"forward": forward, "dkv": dkv, "dq": dq}


def mlr_attention_bytes(blocks, head_dim: int, value_dim: int, dtype) -> dict[str, int]:
    """MLR attention's programs are flash attention's (two pipeline stages) at the wider of the
    two head dims."""
    return flash_attention_bytes(blocks, max(head_dim, value_dim), dtype, 2)


def fit_attention(blocks, nbytes, budget: int):
    """``blocks`` with each attention program's tiles shrunk (:func:`shrink`) until that
    program's estimate ``nbytes(blocks)[name]`` fits ``budget``."""
    for name, fields in ATTENTION_TILES.items():
        blocks = shrink(blocks, fields, lambda b, n=name: nbytes(b)[n], budget)
    return blocks


def matmul_bytes(blocks, dtype, num_stages: int = 3) -> int:
    """One output tile: ``num_stages`` slices of x and y. The float32 accumulator is not counted:
    it stays in the tensor cores' registers (128 x 256 tiles, 64 deep, three stages, compiled and
    ran on the H200 of pallas_kernels/README.md, which counting it would have refused)."""
    bm, bn, bk = blocks.block_m, blocks.block_n, blocks.block_k
    return num_stages * _size(dtype) * bk * (bm + bn)


def mlstm_bytes(chunk: int, tile: int, dtype) -> dict[str, int]:
    """Each chunkwise mLSTM program at chunk ``L`` and head-dim tile ``tile`` (the width of the
    state tiles and of the head-dim slices the loops contract), by kernel name."""
    s, L, d = _size(dtype), chunk, tile
    f32 = 4
    return {
        # C tile carried over the chunks; k and v tiles and the key weights of one chunk.
        "mlstm_states": f32 * d * d + s * L * 2 * d + f32 * L,
        # q, k slices and a C slice per step of the head-dim loop; the L x L scores and weights,
        # the v tile, and the float32 q·C and numerator tiles.
        "mlstm_outputs": 3 * s * L * d + f32 * d * d + 2 * f32 * L * L + 2 * f32 * L * d,
        # dC tile carried; the float32 w0·q and dnum tiles of one chunk.
        "mlstm_dstates": f32 * d * d + 2 * f32 * L * d,
        # dnum, v, C, dC slices per step of the value loop; dP and its pre-activation; q, k tiles;
        # three float32 accumulators and the two outputs.
        "mlstm_dqk": f32 * L * d
        + s * L * d
        + 2 * f32 * d * d
        + 2 * f32 * L * L
        + 2 * s * L * d
        + 5 * f32 * L * d,
        # q, k slices and a dC slice per step of the key loop; the L x L weights; dnum and two
        # float32 accumulators.
        "mlstm_dv": 2 * s * L * d + f32 * d * d + 2 * f32 * L * L + 3 * f32 * L * d,
    }


MIN_GPU_TILE = 16  # tl.dot's smallest operand dimension


def shrink(blocks, fields, nbytes, budget: int, floor: int = MIN_GPU_TILE):
    """``blocks`` (a frozen dataclass) with its ``fields`` halved, the largest first, until
    ``nbytes(blocks) <= budget`` or none is above ``floor`` (then the smallest there is)."""
    while nbytes(blocks) > budget:
        sizes = {name: getattr(blocks, name) for name in fields}
        name = max(sizes, key=lambda n: sizes[n])
        if sizes[name] <= floor:
            break
        blocks = dataclasses.replace(blocks, **{name: sizes[name] // 2})
    return blocks
