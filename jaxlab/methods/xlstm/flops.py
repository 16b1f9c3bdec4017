"""FLOPs per token of the xLSTM, counted like the baseline Transformer's (:mod:`jaxlab.core.flops`).

Per layer and token (a multiply-add is 2 FLOPs; training = 3x forward), with E the width, ``qk`` and
``v`` the total q/k and v widths, NH heads of sizes Dk, Dv and the chunk length L of the chunkwise
form (7B paper App. A gives the same terms):

* projections: ``2 E (2 qk + 2 v)`` for q, k, v and the output gate, ``2 v E`` for the out
  projection, ``4 E NH`` for the two scalar gates;
* mixing (the cell): inside a chunk every query meets the chunk's L keys, ``2 L qk`` for the
  logits and ``2 L v`` for the value sum (the full chunk, as Kaplan et al. count the full context);
  across chunks the state is read, ``2 NH Dk Dv``, and written, ``2 NH Dk Dv``;
* feed-forward: ``6 E d_ff`` (SwiGLU's three maps);
* vocabulary (``include_vocab``): the unembedding ``2 E V``.

The mixing cost depends on L, not on the context: that is the linear-in-S prefill.
"""

from __future__ import annotations

from jaxlab.core.flops import FlopCount
from jaxlab.methods.xlstm.config import xLSTMConfig

__all__ = ["xlstm_flops_per_token"]


def xlstm_flops_per_token(
    cfg: xLSTMConfig, *, seq_len: int | None = None, include_vocab: bool = True
) -> FlopCount:
    """Forward FLOPs per token of :class:`~jaxlab.methods.xlstm.xLSTM`, split by part.

    ``seq_len`` (default ``cfg.seq_len``) caps the chunk length: a sequence shorter than the chunk
    is one chunk.
    """
    E, qk, v, NH, N = cfg.d_model, cfg.qk_dim, cfg.v_dim, cfg.num_heads, cfg.num_layers
    L = min(cfg.chunk_size, seq_len or cfg.seq_len)
    proj = 2 * E * (2 * qk + 2 * v) + 2 * v * E + 4 * E * NH
    state = NH * cfg.qk_head_dim * cfg.v_head_dim
    mix = 2 * L * (qk + v) + 4 * state
    ff = 6 * E * cfg.ff_dim
    vocab = 2 * E * cfg.vocab_size if include_vocab else 0.0
    return FlopCount(N * proj, N * mix, N * ff, vocab)
