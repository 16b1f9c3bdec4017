"""Associative-recall prompts: ``N`` random keys with scalar values and a query near one key.

A prompt holds keys ``x_i ~ N(0, I_d / d)`` (so ``|x_i| ~ 1``) with values ``y_i ~ N(0, 1)``, then
a query ``x_q = x_j + sigma e`` with ``e ~ N(0, I_d / d)`` for a uniformly drawn ``j``; the answer
is ``y_j``. The only way to answer is to find the key nearest the query, which needs a score
``x_q^T M x_i`` that peaks at ``i = j`` over random keys, i.e. ``M`` close to a multiple of the
identity on the keys' ``d`` dimensions: the mechanism probe of Kuang et al. 2025 (Sec. 1 and 3: a
rank-``d_head`` ``W_Q W_K^T`` with ``d_head < d`` cannot tell keys apart that agree on its
``d_head`` directions). With ``sigma = 0`` (the query equals the key) a head with per-head QK
LayerNorm scores a cosine, which an exact match maximises in any window, so low rank costs only
speed; the noise (``query_noise``) is what makes a rank-``d_head`` window lose the key (see the
method README). The zero predictor's error is ``E[y^2] = 1``. :func:`retrieval_batch` is a pure
function of ``(seed, index)``, so a pipeline that maps batch indices through it is deterministic
and resumable.
"""

from __future__ import annotations

import numpy as np

__all__ = ["retrieval_batch"]


def retrieval_batch(
    seed: int, index: int, batch_size: int, dim: int, n_keys: int, query_noise: float = 0.0
) -> dict[str, np.ndarray]:
    """``{"xs": (B, N, d), "ys": (B, N), "query": (B, d), "target": (B,)}`` float32 and
    ``"index": (B,)`` int32 (the ``j`` of each prompt) for batch ``index`` of stream ``seed``;
    the query is key ``j`` plus ``query_noise`` times a fresh draw of the keys' distribution."""
    rng = np.random.default_rng([seed, index])
    xs = rng.normal(size=(batch_size, n_keys, dim)) / np.sqrt(dim)
    ys = rng.normal(size=(batch_size, n_keys))
    j = rng.integers(0, n_keys, size=batch_size)
    rows = np.arange(batch_size)
    noise = rng.normal(size=(batch_size, dim)) / np.sqrt(dim)
    return {
        "xs": xs.astype(np.float32),
        "ys": ys.astype(np.float32),
        "query": (xs[rows, j] + query_noise * noise).astype(np.float32),
        "target": ys[rows, j].astype(np.float32),
        "index": j.astype(np.int32),
    }
