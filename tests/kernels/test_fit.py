"""The GPU kernels' default tiles fit a Hopper block's shared memory (pallas_kernels.fit).

The estimate is checked against the one failure measured on an H200 (the untiled mLSTM state
kernel at head dim 256 asked for 327,680 bytes of 232,448), then the defaults every kernel picks
are checked at xLSTM 7B's head (Dqk 256, Dv 512; and 512 x 512) and over ``kernels_bench``'s grid:
each program's estimate within Hopper's budget. No kernel runs: shapes only.
"""

import jax.numpy as jnp
import pytest

from pallas_kernels import (
    FlashAttentionBlockSizes,
    MatmulBlockSizes,
    MLRAttentionBlockSizes,
    fit,
)
from pallas_kernels.mlstm_chunkwise import _fit_tiles

HOPPER = fit.SMEM_BYTES["9.0"]
DTYPES = (jnp.bfloat16, jnp.float32)


def test_hopper_budget_and_the_estimate_of_the_measured_failure():
    assert HOPPER == 232_448  # the "available" of the H200's RESOURCE_EXHAUSTED message
    assert fit.smem_budget() == HOPPER  # no GPU here: the lowering target, Hopper
    # The state kernel before the head-dim tiles: one program held the whole 256 x 256 state.
    untiled = fit.mlstm_bytes(64, 256, jnp.bfloat16)["mlstm_states"]
    assert untiled - 64 * 4 == 327_680 > HOPPER  # the requested bytes, up to the gate column


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("Dk, Dv", [(256, 512), (512, 512), (64, 128)])
def test_mlstm_tiles_split_the_7b_head_until_every_program_fits(Dk, Dv, dtype):
    Dkp, Dvp, tk, tv = _fit_tiles(Dk, Dv, 64, dtype, None, "gpu", native=True)
    assert max(fit.mlstm_bytes(64, max(tk, tv), dtype).values()) <= HOPPER
    assert Dkp % tk == 0 and Dvp % tv == 0 and min(tk, tv) >= fit.MIN_GPU_TILE
    if Dv >= 256:
        assert tv < Dv  # the head is split: whole, it would not fit
        assert max(fit.mlstm_bytes(64, Dv, dtype).values()) > HOPPER


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_flash_and_mlr_defaults_fit_over_the_bench_grid(head_dim, dtype):
    blocks = FlashAttentionBlockSizes.fitted(head_dim, dtype)
    sizes = fit.flash_attention_bytes(blocks, head_dim, dtype, blocks.num_stages)
    assert max(sizes.values()) <= HOPPER
    assert blocks == FlashAttentionBlockSizes() or head_dim > 64 or dtype == jnp.float32
    mlr = MLRAttentionBlockSizes.fitted(head_dim, dtype)
    assert max(fit.mlr_attention_bytes(mlr, head_dim, head_dim, dtype).values()) <= HOPPER


def test_flash_defaults_shrink_only_where_the_estimate_says_so():
    """bf16 at head dim 128 (the bench's largest) keeps the shipped tiles; float32 there does
    not fit them and only the program that does not fit shrinks (dK/dV's query side)."""
    shipped = FlashAttentionBlockSizes.for_gpu(128, jnp.bfloat16)
    assert FlashAttentionBlockSizes.fitted(128, jnp.bfloat16) == shipped
    shipped = FlashAttentionBlockSizes.for_gpu(128, jnp.float32)
    sizes = fit.flash_attention_bytes(shipped, 128, jnp.float32)
    assert sizes["dkv"] > HOPPER >= sizes["forward"]
    fitted = FlashAttentionBlockSizes.fitted(128, jnp.float32)
    assert fitted.block_q == shipped.block_q and fitted.block_q_dkv < shipped.block_q_dkv


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2048, 8192])
def test_matmul_defaults_fit(n, dtype):
    blocks = MatmulBlockSizes.fitted(dtype, n, n)
    assert fit.matmul_bytes(blocks, dtype, blocks.num_stages) <= HOPPER
    if n == 8192 and dtype == jnp.bfloat16:  # the tiles the H200 ran, kept
        assert blocks == MatmulBlockSizes.for_gpu(n, n) != MatmulBlockSizes()


def test_shrink_stops_at_the_floor():
    blocks = fit.shrink(MatmulBlockSizes(), ("block_m", "block_n", "block_k"), lambda b: 1 << 40, 1)
    assert (blocks.block_m, blocks.block_n, blocks.block_k) == (16, 16, 16)
