"""FLOPs per token of the RMT, counted like the baseline's (:mod:`jaxlab.core.flops`).

Per layer and token (a multiply-add is 2 FLOPs; paper Table 7's accounting, training = 3x forward):

* attention storage/retrieval: q, k, v retrievals and the output storage are each one contraction
  of ``R`` keys with the ``Dk x Dv`` matrix, ``2 R Dk Dv`` FLOPs, so ``8 R Dk Dv`` in all — this
  replaces the transformer's ``8 D^2`` for W_Q, W_K, W_V, W_O;
* attention mixing: ``4 T R Dv`` (logits and value sum over the full context of T);
* feed-forward: ``4 (R Dv) d_ff`` for the MLP plus ``4 R Dk Dv`` for its retrieval and storage;
* vocabulary (``include_vocab``): the unembedding ``2 (R Dv) V`` plus the embedding storage and the
  final retrieval, ``4 R Dk Dv``.
"""

from __future__ import annotations

from jaxlab.core.flops import FlopCount
from jaxlab.methods.rmt.config import RMTConfig

__all__ = ["rmt_flops_per_token"]


def rmt_flops_per_token(
    cfg: RMTConfig, *, seq_len: int | None = None, include_vocab: bool = True
) -> FlopCount:
    """Forward FLOPs per token of :class:`~jaxlab.methods.rmt.RMT`, split by part."""
    T = seq_len or cfg.seq_len
    R, K, V, L = cfg.rank, cfg.d_key, cfg.d_value, cfg.num_layers
    rw = 2 * R * K * V  # one storage or one retrieval of R vectors
    attention_rw = 4 * rw
    mix = 4 * T * R * V
    ff = 4 * cfg.width * cfg.d_ff + 2 * rw
    vocab = 2 * cfg.width * cfg.vocab_size + 2 * rw if include_vocab else 0.0
    return FlopCount(L * attention_rw, L * mix, L * ff, vocab)
