"""Attention scoring functions: standard dot product, bilinear BTT and bilinear MLR.

Kuang et al., "Customizing the Inductive Biases of Softmax Attention using Structured Matrices",
ICML 2025. A scoring function maps a sequence ``x_BTD`` to logits ``s_BHTS``; softmax and the value
sum are shared (:class:`jaxlab.methods.structured_attention.icl_model.ScoredAttention`). Standard
attention scores ``x^T W_Q W_K^T x'`` with ``W_Q, W_K`` of rank ``d_head`` (Sec. 2), which loses
information when the inputs are high-dimensional (``d_head < d``). The paper replaces the low-rank
``W_Q W_K^T`` per head by a structured full- or high-rank ``D x D`` matrix ``M_h`` (Sec. 3):

* :class:`BilinearBTTScore` — ``s_h(t, t') = x_t . LN(BTT_h(x_t')) / sqrt(D)`` (Sec. 3.1): the
  query side is the raw input, the key side a Block Tensor-Train map
  (:class:`jaxlab.nn.linear.BTT`) followed by LayerNorm, as in the authors' ``BilinearBTTAttention``
  (whose LN is their stabiliser). With TT rank ``s = 1`` the implied ``M_h`` is full rank ``D``.
* :class:`BilinearMLRScore` — ``M_h = sum_l blockdiag_k(Q_{l,k} K_{l,k}^T)`` (Sec. 3.2): level
  ``l`` splits the features into ``2^l`` blocks, each with rank-``r_l`` query and key factors, so
  the projections cost as much as standard attention with ``d_qk = sum_l r_l`` and ``M_h`` has rank
  ``min(D, sum_l r_l 2^l)``. Each level's queries and keys (``r_l 2^l`` numbers) pass a LayerNorm
  and score at ``1/sqrt(r_l 2^l)``, summed over levels, as in the authors' ``BilinearMLRAttention``
  (their default, no division by the number of levels). Not the *MLR attention* of the same
  paper's Sec. 4 (:func:`jaxlab.nn.mlr_attention.mlr_attention`): that one puts the levels on the
  **sequence** axis (level ``l`` scores only pairs of positions in the same block, saving QK work
  in a language model); this one puts them on the **feature** axis (a structured ``D x D``
  bilinear form between a query's and a key's features, dense ``T x T`` logits).
* :class:`DotProductScore` — the standard multi-head baseline.

``qk_norm=False`` removes the LayerNorms; the scores are then exactly ``x^T M_h x'`` for the matrix
that :meth:`dense_matrices` reconstructs (tested). The authors also cap each factor's RMS at its
init scale on every forward (a µP-style reparametrisation); that is left out here (plain AdamW).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from jaxlab.core.errors import ConfigError
from jaxlab.nn.linear import BTT, LinearSpec

__all__ = ["BilinearBTTScore", "BilinearMLRScore", "DotProductScore"]


def _layernorm(dim: int, rngs: nnx.Rngs) -> nnx.LayerNorm:
    # dtype None: computed in the promotion of input and float32 scale, float32 for bfloat16 and
    # float32 inputs (as before) and float64 for float64 ones, like the attention around it.
    return nnx.LayerNorm(dim, use_bias=False, dtype=None, rngs=rngs)


class DotProductScore(nnx.Module):
    """Standard multi-head scores ``(x W_Q^h) . (x' W_K^h) / sqrt(d_head)``."""

    def __init__(self, d_model: int, num_heads: int, *, rngs: nnx.Rngs):
        if d_model % num_heads:
            raise ConfigError(f"num_heads={num_heads} must divide d_model={d_model}")
        dense = LinearSpec()
        self.q = dense(d_model, d_model, std=d_model**-0.5, rngs=rngs)
        self.k = dense(d_model, d_model, std=d_model**-0.5, rngs=rngs)
        self.num_heads, self.head_dim = num_heads, d_model // num_heads

    def __call__(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B H T T"]:
        B, T, _ = x_BTD.shape
        q_BTHE = self.q(x_BTD).reshape(B, T, self.num_heads, self.head_dim)
        k_BTHE = self.k(x_BTD).reshape(B, T, self.num_heads, self.head_dim)
        return jnp.einsum("bthe,bshe->bhts", q_BTHE, k_BTHE) / math.sqrt(self.head_dim)

    def flops(self, T: int) -> float:
        """Forward FLOPs of one sequence: two ``D x D`` projections and the ``T x T`` logits."""
        D = self.q.d_in
        return 2 * 2 * T * D * D + 2 * T * T * D

    def dense_matrices(self) -> Float[Array, "H D D"]:
        """``W_Q^h W_K^h^T`` per head (rank ``d_head``)."""
        wq = self.q.dense_matrix().reshape(-1, self.num_heads, self.head_dim)
        wk = self.k.dense_matrix().reshape(-1, self.num_heads, self.head_dim)
        return jnp.einsum("ihe,jhe->hij", wq, wk) / math.sqrt(self.head_dim)


class BilinearBTTScore(nnx.Module):
    """Bilinear BTT scores ``x_t . LN(BTT_h(x_t')) / sqrt(D)`` (paper Sec. 3.1), ``H`` heads.

    Each head's key map is a ``D -> D`` :class:`jaxlab.nn.linear.BTT` of TT rank ``btt_rank``,
    initialised variance-preserving (entries N(0, 1/D)).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int = 1,
        *,
        btt_rank: int = 1,
        qk_norm: bool = True,
        rngs: nnx.Rngs,
    ):
        D = d_model
        self.maps = nnx.List(
            [BTT(D, D, btt_rank=btt_rank, std=D**-0.5, rngs=rngs) for _ in range(num_heads)]
        )
        self.norms = nnx.List([_layernorm(D, rngs) for _ in range(num_heads)] if qk_norm else [])
        self.d_model, self.qk_norm = D, qk_norm

    def _keys(self, x_BTD):
        keys = [m(x_BTD) for m in self.maps]
        if self.qk_norm:
            keys = [n(k) for n, k in zip(self.norms, keys, strict=True)]
        return jnp.stack(keys, axis=2)  # (B, T, H, D)

    def __call__(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B H T T"]:
        k_BTHD = self._keys(x_BTD)
        return jnp.einsum("btd,bshd->bhts", x_BTD, k_BTHD) / math.sqrt(self.d_model)

    def flops(self, T: int) -> float:
        """Forward FLOPs of one sequence: the BTT maps (two stages) and ``H`` full-width logits."""
        n1, n2, m2, m1, s = self.maps[0].shape
        per_token = 2 * s * (self.d_model * m2 + n1 * self.d_model)
        return len(self.maps) * (T * per_token + 2 * T * T * self.d_model)

    def dense_matrices(self) -> Float[Array, "H D D"]:
        """``M_h`` with ``scores = x^T M_h x'`` when ``qk_norm=False`` (BTT_h is ``x' @ W``, so
        ``x . BTT_h(x') = x^T W^T x'``)."""
        return jnp.stack([m.dense_matrix().T for m in self.maps]) / math.sqrt(self.d_model)


class BilinearMLRScore(nnx.Module):
    """Bilinear MLR scores (paper Sec. 3.2): ``sum_l LN(q_l(x)) . LN(k_l(x')) / sqrt(r_l 2^l)``.

    Level ``l`` holds query and key factors ``(D, H r_l)``: its ``2^l`` feature blocks' factors
    (``(D / 2^l, r_l)`` per head) stacked along ``D``, the layout of :class:`jaxlab.nn.linear.MLR`'s
    first factor. ``q_l(x)`` maps every block of ``x`` through its own factor and concatenates the
    ``2^l`` results (``r_l 2^l`` numbers per head). Levels on the feature axis; the sequence-axis
    MLR attention of Sec. 4 is :func:`jaxlab.nn.mlr_attention.mlr_attention` (module docstring).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int = 1,
        *,
        ranks: Sequence[int],
        qk_norm: bool = True,
        rngs: nnx.Rngs,
    ):
        ranks = tuple(int(r) for r in ranks)
        blocks = 2 ** (len(ranks) - 1)
        if not ranks or min(ranks) < 1 or d_model % blocks:
            raise ConfigError(
                f"mlr ranks={ranks}: need positive ranks whose {blocks} finest blocks divide "
                f"d_model={d_model}"
            )
        H, D = num_heads, d_model
        init = nnx.initializers.normal(1.0)
        self.wq, self.wk, self.norms_q, self.norms_k = (nnx.List() for _ in range(4))
        for level, r in enumerate(ranks):
            std = (D / 2**level) ** -0.5  # variance preserving within a block
            for factors in (self.wq, self.wk):
                factors.append(nnx.Param(init(rngs.params(), (D, H * r)) * std))
            if qk_norm:
                self.norms_q.append(_layernorm(r * 2**level, rngs))
                self.norms_k.append(_layernorm(r * 2**level, rngs))
        self.ranks, self.num_heads, self.d_model, self.qk_norm = ranks, H, D, qk_norm

    def _project(self, x_BTD, w, level, r):
        B, T, D = x_BTD.shape
        p = 2**level
        x_BTPI = x_BTD.reshape(B, T, p, D // p)
        w_PIHR = w[...].reshape(p, D // p, self.num_heads, r)
        y_BTHRP = jnp.einsum("btpi,pihr->bthrp", x_BTPI, w_PIHR)
        return y_BTHRP.reshape(B, T, self.num_heads, r * p)

    def __call__(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B H T T"]:
        total = 0.0
        for level, r in enumerate(self.ranks):
            q = self._project(x_BTD, self.wq[level], level, r)
            k = self._project(x_BTD, self.wk[level], level, r)
            if self.qk_norm:
                q, k = self.norms_q[level](q), self.norms_k[level](k)
            scale = (r * 2**level) ** -0.5
            total = total + jnp.einsum("bthe,bshe->bhts", q, k) * scale
        return total

    def flops(self, T: int) -> float:
        """Forward FLOPs of one sequence: the level projections (``2 D sum r_l`` per head and side
        per token) and the logits (``2 sum_l r_l 2^l`` per pair and head)."""
        H, D = self.num_heads, self.d_model
        proj = 2 * 2 * T * D * H * sum(self.ranks)
        logits = 2 * T * T * H * sum(r * 2**lv for lv, r in enumerate(self.ranks))
        return proj + logits

    def dense_matrices(self) -> Float[Array, "H D D"]:
        """``M_h = sum_l blockdiag_k(Q_{l,k} K_{l,k}^T) / sqrt(r_l 2^l)`` (scores with
        ``qk_norm=False`` equal ``x^T M_h x'``)."""
        H, D = self.num_heads, self.d_model
        m = jnp.zeros((H, D, D))
        for level, r in enumerate(self.ranks):
            p, size = 2**level, D // 2**level
            wq = self.wq[level][...].reshape(p, size, H, r)
            wk = self.wk[level][...].reshape(p, size, H, r)
            blocks_PHIJ = jnp.einsum("pihr,pjhr->phij", wq, wk) * (r * p) ** -0.5
            for b in range(p):
                sl = slice(b * size, (b + 1) * size)
                m = m.at[:, sl, sl].add(blocks_PHIJ[b])
        return m
