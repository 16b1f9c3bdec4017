"""FLOPs of the attention kinds' token mixing, counted over the pairs each one really scores.

Per token and layer, averaged over the ``T`` causal queries of a row (a multiply-add is 2 FLOPs):
query ``i`` scores ``P_i`` keys (``i + 1`` for causal MHA, ``min(i + 1, window + 1)`` for SWA);
the logits cost ``2 P_i d`` and the value sum ``2 P_i d_v`` for ``d`` contracted channels. For MLR
(Kuang et al. 2025, Sec. 4) level ``l`` contracts its ``r_l`` channels over the causal pairs of
its blocks, so the logits cost ``2 sum_l r_l P_i^(l)`` and the value sum stays full; for
Global+SWA the global half scores every causal pair and the local half the window, and the summed
probability matrix multiplies the values over every causal pair. This is the exact count of the
causal work, unlike the full-context convention of :mod:`jaxlab.core.flops` (``T`` keys per query).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxlab.nn.mlr_attention import mlr_covering_levels

__all__ = ["attention_mix_flops"]


def _mean_keys(T: int, window: int | None = None) -> float:
    keys = np.arange(1, T + 1, dtype=np.float64)
    return float(np.minimum(keys, window + 1).mean() if window is not None else keys.mean())


def attention_mix_flops(
    kind: str, *, seq_len: int, num_heads: int, head_dim: int, window: int = 0,
    ranks: Sequence[int] = (),
) -> float:  # fmt: skip
    """Forward FLOPs per token of one layer's token mixing (logits and value sum), all heads."""
    T, H, D = seq_len, num_heads, head_dim
    full = _mean_keys(T)
    if kind == "mha":
        qk = 2 * full * D
    elif kind == "swa":
        local = _mean_keys(T, window)
        return H * 4 * local * D
    elif kind == "gswa":
        qk = 2 * full * D / 2 + 2 * _mean_keys(T, window) * D / 2
    elif kind == "mlr":
        causal = np.tril(np.ones((T, T), bool))
        count = mlr_covering_levels(T, len(ranks))
        # pairs covered by level l: covering count > l
        qk = 2 * sum(r * ((count > lv) & causal).sum() for lv, r in enumerate(ranks)) / T
    else:
        raise ValueError(f"unknown attention kind {kind!r}")
    return float(H * (qk + 2 * full * D))
