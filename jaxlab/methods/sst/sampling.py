"""Which singular-vector pairs SST trains next: a multinomial over the singular values, without
replacement.

Sparse Spectral Training (Zhao et al., ICML 2025, Sec. 4.4) draws the ``r`` pairs to update from a
multinomial whose weights are the singular values, ``p_i = s_i / Σ s`` (exploitation of the large
directions with exploration of the small ones); Sec. 5.3's hyperbolic experiments and the ablation
(App. I) also use the half-uniform mixture ``p_i = ½ (1/k + s_i / Σ s)``, which keeps every pair's
probability at least ``1/(2k)``. Draws are without replacement, in the sequential sense of
``torch.multinomial(p, r, replacement=False)`` (each next index is drawn from the remaining
weights, renormalised): the Gumbel-top-``r`` trick (``argtop_r(log p + Gumbel noise)``) gives
exactly that distribution in one jit-friendly pass (Plackett–Luce; Kool, van Hoof & Welling 2019).
"""

from __future__ import annotations

import enum
from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

__all__ = ["Sampling", "SamplingName", "active_permutation", "sample_active", "sampling_probs"]


class Sampling(enum.StrEnum):
    """Sampling weights: ``s`` (p ∝ s, the paper's default) or ``half_uniform``."""

    S = "s"
    HALF_UNIFORM = "half_uniform"


SamplingName = Literal[tuple(m.value for m in Sampling)]  # type: ignore[valid-type]


def sampling_probs(s: Float[Array, " k"], sampling: str = "s") -> Float[Array, " k"]:
    """The multinomial weights over the ``k`` pairs (sum 1); all-zero ``s`` gives uniform."""
    k = s.shape[0]
    s = jnp.maximum(s.astype(jnp.float32), 0.0)
    total = jnp.sum(s)
    prop = jnp.where(total > 0, s / jnp.where(total > 0, total, 1.0), 1.0 / k)
    if Sampling(sampling) is Sampling.HALF_UNIFORM:
        return 0.5 * (1.0 / k + prop)
    return prop


def sample_active(
    key: jax.Array, s: Float[Array, " k"], rank: int, sampling: str = "s"
) -> Bool[Array, " k"]:
    """A mask of ``rank`` pairs drawn without replacement from :func:`sampling_probs`."""
    p = sampling_probs(s, sampling)
    scores = jnp.log(p) + jax.random.gumbel(key, p.shape)
    _, idx = jax.lax.top_k(scores, rank)
    return jnp.zeros(p.shape, bool).at[idx].set(True)


def active_permutation(mask: Bool[Array, " k"]) -> Int[Array, " k"]:
    """The column order with the selected pairs first (each part in index order)."""
    return jnp.argsort(~mask, stable=True)
