"""Associative-recall prompts: ``N`` random keys with scalar values and a query equal to one key.

A prompt holds keys ``x_i ~ N(0, I_d / d)`` (so ``|x_i| ~ 1``) with values ``y_i ~ N(0, 1)``, then
a query ``x_q = x_j`` for a uniformly drawn ``j``; the answer is ``y_j``. The only way to answer is
to find the key that equals the query, which needs a score ``x_q^T M x_i`` that peaks at ``i = j``
over random keys, i.e. ``M`` close to a multiple of the identity on the keys' ``d`` dimensions: the
mechanism probe of Kuang et al. 2025 (Sec. 1 and 3: a rank-``d_head`` ``W_Q W_K^T`` with
``d_head < d`` cannot tell keys apart that agree on its ``d_head`` directions). The zero
predictor's error is ``E[y^2] = 1``. :func:`retrieval_batch` is a pure function of
``(seed, index)``, so a pipeline that maps batch indices through it is deterministic and resumable.
"""

from __future__ import annotations

import numpy as np

__all__ = ["retrieval_batch"]


def retrieval_batch(
    seed: int, index: int, batch_size: int, dim: int, n_keys: int
) -> dict[str, np.ndarray]:
    """``{"xs": (B, N, d), "ys": (B, N), "query": (B, d), "target": (B,)}`` float32 and
    ``"index": (B,)`` int32 (the ``j`` of each prompt) for batch ``index`` of stream ``seed``."""
    rng = np.random.default_rng([seed, index])
    xs = rng.normal(size=(batch_size, n_keys, dim)) / np.sqrt(dim)
    ys = rng.normal(size=(batch_size, n_keys))
    j = rng.integers(0, n_keys, size=batch_size)
    rows = np.arange(batch_size)
    return {
        "xs": xs.astype(np.float32),
        "ys": ys.astype(np.float32),
        "query": xs[rows, j].astype(np.float32),
        "target": ys[rows, j].astype(np.float32),
        "index": j.astype(np.int32),
    }
