"""The xLSTM's memory options change memory, not results: the SwiGLU applied per block of tokens
(``xLSTMConfig.ffn_chunk``) and two-level rematerialisation of scanned blocks (``remat_group``)
give the plain model's logits and gradients (``ffn_chunk`` in the loop model and in the scanned,
rematerialised one the 7B step compiles).

Neither option changes a parameter, so the same seed builds the same weights in both models.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.task import cross_entropy
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig

CFG = xLSTMConfig(seq_len=16, num_layers=2, d_model=32, num_heads=4, chunk_size=4)
TOKENS = jax.random.randint(jax.random.key(0), (2, 16), 0, 256)


def _loss_and_grads(cfg):
    model = xLSTM(cfg, rngs=nnx.Rngs(0))

    def loss(m):
        logits = m(TOKENS[:, :-1])  # 15 tokens: off the block grid of 4 and 6
        return cross_entropy(logits, TOKENS[:, 1:])[0], logits

    (_, logits), grads = nnx.value_and_grad(loss, has_aux=True)(model)
    return logits, nnx.to_pure_dict(grads)


@pytest.mark.parametrize("scan", [False, True], ids=["loop", "scanned_remat"])
def test_per_block_swiglu_equals_plain(scan):
    base = dataclasses.replace(CFG, scan_blocks=scan, remat=scan)
    want_logits, want_grads = _loss_and_grads(base)
    for chunk in (4, 6):
        logits, grads = _loss_and_grads(dataclasses.replace(base, ffn_chunk=chunk))
        np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-5)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                     grads, want_grads)  # fmt: skip


def test_per_block_swiglu_scans_blocks():
    """The blocked SwiGLU's forward holds (B, chunk, d_ff) activations, not (B, T, d_ff)."""
    cfg = dataclasses.replace(CFG, ffn_chunk=4, num_layers=1)
    model = xLSTM(cfg, rngs=nnx.Rngs(0))
    mlp = model.blocks[0].mlp
    x = jnp.zeros((2, 16, cfg.d_model))
    text = jax.jit(lambda x: mlp(x)).lower(x).as_text()
    assert f"2x4x{cfg.ff_dim}xf32" in text and f"2x16x{cfg.ff_dim}xf32" not in text


def test_negative_ffn_chunk_is_one_line():
    with pytest.raises(ConfigError, match="ffn_chunk must be >= 0"):
        dataclasses.replace(CFG, ffn_chunk=-1)


def test_grouped_remat_equals_one_level():
    base = dataclasses.replace(CFG, num_layers=4, scan_blocks=True, remat=True)
    want_logits, want_grads = _loss_and_grads(base)
    logits, grads = _loss_and_grads(dataclasses.replace(base, remat_group=2))
    np.testing.assert_allclose(logits, want_logits, rtol=1e-6, atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                 grads, want_grads)  # fmt: skip


def test_remat_group_must_divide_the_blocks():
    with pytest.raises(ConfigError, match="remat_group=3 must divide model.num_layers=4"):
        dataclasses.replace(CFG, num_layers=4, remat_group=3)
