"""Per-token FLOP accounting for decoder-only LMs (a multiply-add counts as 2 FLOPs).

Forward FLOPs per token follow Kaplan et al. 2020 ("Scaling Laws for Neural Language Models",
Table 1): every weight matrix costs ``2 * fan_in * fan_out`` per token, and attention adds
``2 * T * d_attn`` for the logits ``QK^T`` and the same again for the weighted sum of values, where
``T`` is the context length (the full context, as in Kaplan's table, not the causal half).
Embedding lookups are free; the unembedding is a matmul. Training costs 3x the forward pass (the
backward pass is twice the forward). ``include_vocab=False`` drops the unembedding, which is how
several papers quote model FLOPs (the RMT paper's Tables 3-4, for example).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["FlopCount", "transformer_flops_per_token"]


class FlopCount(NamedTuple):
    """FLOPs per token of one forward pass, split by part, and the training total (3x forward)."""

    attention_proj: float
    attention_mix: float
    mlp: float
    vocab: float

    @property
    def forward(self) -> float:
        return self.attention_proj + self.attention_mix + self.mlp + self.vocab

    @property
    def train(self) -> float:
        return 3.0 * self.forward


def transformer_flops_per_token(cfg, *, seq_len: int | None = None, include_vocab: bool = True):
    """FLOPs per token of :class:`jaxlab.nn.transformer.Transformer` built from ``cfg``.

    Args:
      cfg: a ``TransformerConfig`` (duck-typed: ``d_model, num_layers, num_heads, kv_heads,
        head_dim, ff_dim, vocab_size, seq_len``).
      seq_len: context length for the attention terms (default ``cfg.seq_len``).
      include_vocab: count the unembedding matmul.
    """
    T = seq_len or cfg.seq_len
    d, L, hd = cfg.d_model, cfg.num_layers, cfg.head_dim
    q_width, kv_width = cfg.num_heads * hd, cfg.kv_heads * hd
    proj = 2 * d * (q_width + 2 * kv_width) + 2 * q_width * d  # Q, K, V in; output projection
    mix = 2 * 2 * T * q_width  # logits and the value sum, every query head over T keys
    mlp = 2 * 2 * d * cfg.ff_dim
    vocab = 2 * d * cfg.vocab_size if include_vocab else 0.0
    return FlopCount(L * proj, L * mix, L * mlp, vocab)
