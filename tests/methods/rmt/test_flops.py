"""The RMT's FLOP count against its lowered program: exact on the matrix products, exact in how it
moves with Dk alone, and XLA's total bounded on top (elementwise work only)."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jaxlab.core.flops import compiled_flops, dot_flops
from jaxlab.lm.transformer import TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig

T, L, R, DV = 32, 2, 4, 16


def _config(d_key, norm="rmsnorm"):
    return RMTConfig(
        vocab_size=512,
        seq_len=T,
        num_layers=L,
        rank=R,
        d_key=d_key,
        d_value=DV,
        d_ff=128,
        norm=norm,
    )


def _lowered(cfg):
    graphdef, state = nnx.split(RMT(cfg, rngs=nnx.Rngs(0)))
    tokens = jnp.zeros((1, T), jnp.int32)
    return jax.jit(lambda s, t: nnx.merge(graphdef, s)(t)).lower(state, tokens)


@pytest.fixture(scope="module")
def lowered():
    return {dk: _lowered(_config(dk)) for dk in (8, 24)}


@pytest.mark.parametrize("d_key", [8, 24])
def test_analytic_count_equals_the_matrix_products_of_the_program(lowered, d_key):
    assert _config(d_key).flops_per_token().forward * T == dot_flops(lowered[d_key])


def test_only_storage_and_retrieval_move_with_dk(lowered):
    # Per layer: q, k, v retrievals + output storage (4) and the FF's retrieval + storage (2); plus
    # the embedding's storage and the final retrieval: 6L + 2 products of R keys with the residual,
    # each 2 * R * Dk * Dv FLOPs per token. Nothing else depends on Dk.
    expected = 2 * R * DV * (24 - 8) * (6 * L + 2) * T
    assert dot_flops(lowered[24]) - dot_flops(lowered[8]) == expected
    ours = _config(24).flops_per_token().forward - _config(8).flops_per_token().forward
    assert ours * T == expected


def test_layernorm_changes_no_product():
    assert dot_flops(_lowered(_config(8, "layernorm"))) == _config(8).flops_per_token().forward * T


def test_xla_counts_only_elementwise_work_on_top(lowered):
    matmuls = dot_flops(lowered[8])
    rest = compiled_flops(lowered[8].compile()) - matmuls
    # Softmax, matrix norms, residual adds and GELU: a few FLOPs per activation. At this size the
    # smallest product that could go missing (one R x Dk key matrix on every token, 2*R*Dk*T) is
    # 2,048 FLOPs; the bound only rules out whole layers' worth of products.
    assert 0 < rest < 0.1 * matmuls


def test_paper_flops_without_vocab():
    # The paper quotes 1.965e9 (405M transformer) and 1.390e9 (305M RMT) training FLOPs per token
    # without the vocabulary terms; see the method README for the RMT's difference.
    tf = TransformerConfig.paper("405m").flops_per_token(include_vocab=False).train
    rmt = RMTConfig.paper("305m").flops_per_token(include_vocab=False).train
    assert tf == pytest.approx(1.965e9, rel=0.002)
    assert rmt == pytest.approx(1.390e9, rel=0.02)
