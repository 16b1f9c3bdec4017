"""The baseline Transformer matched to an xLSTM: same width, depth and heads, same parameters.

Used by the experiments that compare the two (``xlstm_lm``, ``xlstm_inference``): the Transformer
(ALiBi, so no position table; RMSNorm like the xLSTM) gets the MLP width, a multiple of 8, that
brings its non-embedding parameters closest to the xLSTM's.
"""

from __future__ import annotations

from flax import nnx

from jaxlab.lm.transformer import TransformerConfig
from jaxlab.methods.xlstm.config import xLSTMConfig
from jaxlab.methods.xlstm.model import xLSTM
from jaxlab.nn.layers import non_embedding_params

__all__ = ["matched_transformer"]


def matched_transformer(xcfg: xLSTMConfig, **overrides) -> TransformerConfig:
    """The Transformer with ``xcfg``'s width, depth, heads, vocabulary and row length and the MLP
    width that matches its non-embedding parameters (``overrides`` on top)."""
    target = non_embedding_params(nnx.eval_shape(lambda: xLSTM(xcfg, rngs=nnx.Rngs(0))))
    E, N = xcfg.d_model, xcfg.num_layers
    attn_and_norms = 4 * E * E + 2 * E  # Q, K, V, out; two RMSNorm scales per layer
    d_ff = max(8, round(((target - E) / N - attn_and_norms) / (2 * E) / 8) * 8)
    fields = dict(
        seq_len=xcfg.seq_len, vocab_size=xcfg.vocab_size, num_layers=N, num_heads=xcfg.num_heads,
        d_model=E, d_ff=d_ff, norm="rmsnorm", positions="alibi", init=xcfg.init,
    )  # fmt: skip
    return TransformerConfig(**{**fields, **overrides})
