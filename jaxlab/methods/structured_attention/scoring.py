"""Attention scoring functions: standard dot product, bilinear BTT and bilinear MLR.

Kuang et al., "Customizing the Inductive Biases of Softmax Attention using Structured Matrices",
ICML 2025. A scoring function maps a sequence ``x_BTD`` to logits ``s_BHQT``; softmax and the value
sum are shared (:class:`jaxlab.methods.structured_attention.icl_model.ScoredAttention`). Standard
attention scores ``x^T W_Q W_K^T x'`` with ``W_Q, W_K`` of rank ``d_head`` (Sec. 2), which loses
information when the inputs are high-dimensional (``d_head < d``). The paper replaces the low-rank
``W_Q W_K^T`` per head by a structured full- or high-rank ``D x D`` matrix ``M_h`` (Sec. 3):

* :class:`BilinearBTTScore` — ``s_h(t, t') = x_t . LN(BTT_h(x_t')) / sqrt(D)`` (Sec. 3.1): the
  query side is the raw input, the key side a Block Tensor-Train map
  (:class:`jaxlab.nn.linear.BTT`) followed by LayerNorm, as in the authors' ``BilinearBTTAttention``
  (whose LN is their stabiliser). With TT rank ``s = 1`` the implied ``M_h`` is full rank ``D``.
  The key's features come in the authors' ``(a b)`` order (output block minor,
  ``output_order="group_minor"``), in which rank-1 cores can make ``BTT_h`` the identity, so a
  head can score a key against itself (``x . x``); in the block-major order of jaxlab's linear
  layer the same cores give a permutation, no rank-1 ``BTT_h`` equals ``I``, and a head's
  ``trace(M_h) / ||M_h||_F`` (how well it matches a key with itself) is at most the square root
  of the number of (input block, output block) pairs that meet the diagonal (each such rank-1
  block adds at most its Frobenius norm): ``sqrt(12)`` at ``D = 48`` instead of ``sqrt(D)``.
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

Every score takes a batch ``x_BTD`` ``(B, T, D)``; an unbatched ``(T, D)`` sequence is a one-line
error that says to add the batch axis (``x[None]``), as jaxlab's attention functions do, rather
than a reshape the caller did not ask for.

``qk_norm=False`` removes the LayerNorms; the scores are then exactly ``x^T M_h x'`` for the matrix
that :meth:`dense_matrices` reconstructs (tested). The authors' recipe (``src/model.py``) is a set
of switches here: ``qk_norm`` (their ``do_qk_ln``, a bias-free LayerNorm, on for every model in
their ICL runs), ``logit_scale`` (``"sqrt"``, or their µP ``"mup"``: ``8/d_head`` for MHA, ``8/(r_l
2^l)`` per MLR level, ``1/D`` for BTT — no factor 8 there, as theirs) and ``rms_cap`` (each
factor's RMS held at most at its init scale on every forward, :func:`jaxlab.nn.linear.rms_capped`).
The factors start at N(0, 1/fan_in) with or without the cap: the authors draw them at N(0, 1), but
``muPify`` (``src/muP.py``) re-initialises them so before any training. One difference stays: the
authors cap all heads' factors of a level as one tensor; here each head's BTT caps its own."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from jaxlab.core.errors import ConfigError
from jaxlab.nn.attention import accumulation_dtype
from jaxlab.nn.layers import qk_layernorm
from jaxlab.nn.linear import BTT, LinearSpec, rms_capped

__all__ = [
    "LOGIT_SCALES",
    "MIN_LEVEL_WIDTH",
    "BilinearBTTScore",
    "BilinearMLRScore",
    "DotProductScore",
]

LOGIT_SCALES = ("sqrt", "mup")
# A LayerNorm of 1 number is exactly 0 and of 2 numbers is ±1 whatever their size, so an MLR level
# whose r_l 2^l per-head numbers are fewer than this scores nothing or a sign under qk_norm.
MIN_LEVEL_WIDTH = 3


def _check_scale(logit_scale: str) -> None:
    if logit_scale not in LOGIT_SCALES:
        raise ConfigError(f"logit_scale={logit_scale!r}: choose one of {list(LOGIT_SCALES)}")


def _check_input(owner: str, x_BTD, d_model: int, num_queries: int | None) -> None:
    """One line unless ``x`` is ``(B, T, d_model)`` and ``0 <= num_queries <= T``. Inputs are
    batched, as every jaxlab sequence function's (one sequence: ``x[None]``)."""
    shape = jnp.shape(x_BTD)
    if len(shape) != 3 or shape[-1] != d_model:
        hint = "; add a batch axis (x[None]) for one sequence" if len(shape) == 2 else ""
        raise ConfigError(f"{owner}: x must be (B, T, D={d_model}); got shape {shape}{hint}")
    if num_queries is not None and not 0 <= num_queries <= shape[1]:
        raise ConfigError(f"{owner}: num_queries={num_queries} must lie in [0, T={shape[1]}]")


class DotProductScore(nnx.Module):
    """Standard multi-head scores ``c * LN(x W_Q^h) . LN(x' W_K^h)``: ``c = 1/sqrt(d_head)``
    (``"sqrt"``) or the authors' ``8/d_head`` (``"mup"``); the LayerNorms (one for queries, one
    for keys, shared by the heads) only with ``qk_norm``."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        qk_norm: bool = False,
        logit_scale: str = "sqrt",
        rngs: nnx.Rngs,
    ):
        if d_model % num_heads:
            raise ConfigError(f"num_heads={num_heads} must divide d_model={d_model}")
        _check_scale(logit_scale)
        dense = LinearSpec()
        self.q = dense(d_model, d_model, std=d_model**-0.5, rngs=rngs)
        self.k = dense(d_model, d_model, std=d_model**-0.5, rngs=rngs)
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.q_norm = qk_layernorm(self.head_dim, rngs) if qk_norm else None
        self.k_norm = qk_layernorm(self.head_dim, rngs) if qk_norm else None
        hd = self.head_dim
        self.scale = hd**-0.5 if logit_scale == "sqrt" else 8.0 / hd

    def __call__(
        self, x_BTD: Float[Array, "B T D"], num_queries: int | None = None
    ) -> Float[Array, "B H Q T"]:
        """Logits of the last ``num_queries`` positions (all ``T`` by default) against all keys."""
        _check_input("DotProductScore", x_BTD, self.q.d_in, num_queries)
        B, T, _ = x_BTD.shape
        Q = T if num_queries is None else num_queries
        q_BQHE = self.q(x_BTD[:, T - Q :]).reshape(B, Q, self.num_heads, self.head_dim)
        k_BTHE = self.k(x_BTD).reshape(B, T, self.num_heads, self.head_dim)
        if self.q_norm is not None:
            q_BQHE, k_BTHE = self.q_norm(q_BQHE), self.k_norm(k_BTHE)
        return jnp.einsum("bqhe,bthe->bhqt", q_BQHE, k_BTHE) * self.scale

    def flops(self, T: int, num_queries: int | None = None) -> float:
        """Forward FLOPs of one sequence: the ``D x D`` query and key projections and the
        ``Q x T`` logits (``Q = num_queries``, ``T`` by default)."""
        D, Q = self.q.d_in, T if num_queries is None else num_queries
        return 2 * (Q + T) * D * D + 2 * Q * T * D

    def dense_matrices(self) -> Float[Array, "H D D"]:
        """``c W_Q^h W_K^h^T`` per head (rank ``d_head``; the scores without ``qk_norm``)."""
        wq = self.q.dense_matrix().reshape(-1, self.num_heads, self.head_dim)
        wk = self.k.dense_matrix().reshape(-1, self.num_heads, self.head_dim)
        return jnp.einsum("ihe,jhe->hij", wq, wk) * self.scale


class BilinearBTTScore(nnx.Module):
    """Bilinear BTT scores ``c * x_t . LN(BTT_h(x_t'))`` (paper Sec. 3.1), ``H`` heads, with
    ``c = 1/sqrt(D)`` (``"sqrt"``) or ``1/D`` (``"mup"``, the authors' µP scale for BTT).

    Each head's key map is a ``D -> D`` :class:`jaxlab.nn.linear.BTT` of TT rank ``btt_rank`` in
    the authors' ``(a b)`` output order (``output_order="group_minor"``, module docstring),
    initialised variance-preserving (entries N(0, 1/D): each core at N(0, 1/fan_in)), optionally
    RMS-capped (``rms_cap``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int = 1,
        *,
        btt_rank: int = 1,
        qk_norm: bool = True,
        logit_scale: str = "sqrt",
        rms_cap: bool = False,
        rngs: nnx.Rngs,
    ):
        _check_scale(logit_scale)
        D = d_model
        self.maps = nnx.List([
            BTT(D, D, btt_rank=btt_rank, std=D**-0.5, rms_cap=rms_cap,
                output_order="group_minor", rngs=rngs)
            for _ in range(num_heads)
        ])  # fmt: skip
        self.norms = nnx.List([qk_layernorm(D, rngs) for _ in range(num_heads)] if qk_norm else [])
        self.d_model, self.qk_norm = D, qk_norm
        # The authors' BilinearBTTAttention: 1/D under µP, 1/sqrt(D) otherwise.
        self.scale = D**-0.5 if logit_scale == "sqrt" else 1.0 / D

    def _keys(self, x_BTD):
        """Every head's ``LN_h(BTT_h(x))`` as two batched matrix products over the heads' stacked
        cores in the authors' layout (``BilinearBTTAttention``: the first stage a ``(c, BT, d) x
        (c, d, H b s)`` product batched over input blocks, the second ``(H b, BT, c s) x
        (H b, c s, a)`` batched over heads and output blocks, the output laid out ``(a b)``: its
        block index minor), not ``H`` separate maps; :meth:`_keys_per_head` is the per-head form
        it equals. (A single einsum with the head as a free axis was slower on CPU than
        either.)"""
        B, T, D = x_BTD.shape
        H, X = len(self.maps), B * T
        n1, n2, m2, m1, s = self.maps[0].shape
        dtype = accumulation_dtype(x_BTD)
        cores = [m.cores(dtype) for m in self.maps]
        r_HJIUR = jnp.stack([r for r, _ in cores])
        l_HJRUO = jnp.stack([left for _, left in cores])
        x_JXI = x_BTD.astype(dtype).reshape(X, n1, n2).transpose(1, 0, 2)
        r_flat = r_HJIUR.transpose(1, 2, 0, 3, 4).reshape(n1, n2, H * m2 * s)  # (J, I, H·U·R)
        y_flat = jnp.einsum("jmn,jnx->jmx", x_JXI, r_flat)  # first stage, per input block
        # regroup into (h, u) output groups, each with its (j, r) inputs
        y_grp = y_flat.reshape(n1, X, H * m2, s).transpose(2, 1, 0, 3).reshape(H * m2, X, n1 * s)
        l_grp = l_HJRUO.transpose(0, 3, 1, 2, 4).reshape(H * m2, n1 * s, m1)  # (H·U, J·R, O)
        z_grp = jnp.einsum("gmc,gcq->gmq", y_grp, l_grp)  # second stage, (H·U, X, O)
        # (a b): output feature i1 m2 + u, the block index u minor (the authors' permute)
        k_BTHD = z_grp.reshape(H, m2, B, T, m1).transpose(2, 3, 0, 4, 1).reshape(B, T, H, D)
        if not self.qk_norm:
            return k_BTHD
        # The heads' LayerNorms at once: the same statistics as nnx.LayerNorm, one scale per head.
        eps = self.norms[0].epsilon
        mean = jnp.mean(k_BTHD, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(k_BTHD - mean), axis=-1, keepdims=True)
        scale_HD = jnp.stack([n.scale[...] for n in self.norms]).astype(dtype)
        return (k_BTHD - mean) * jax.lax.rsqrt(var + eps) * scale_HD

    def _keys_per_head(self, x_BTD):
        """The reference: each head's BTT map and LayerNorm applied on its own."""
        keys = [m(x_BTD) for m in self.maps]
        if self.qk_norm:
            keys = [n(k) for n, k in zip(self.norms, keys, strict=True)]
        return jnp.stack(keys, axis=2)  # (B, T, H, D)

    def __call__(
        self, x_BTD: Float[Array, "B T D"], num_queries: int | None = None
    ) -> Float[Array, "B H Q T"]:
        """Logits of the last ``num_queries`` positions (all ``T`` by default) against all keys."""
        _check_input("BilinearBTTScore", x_BTD, self.d_model, num_queries)
        T = x_BTD.shape[1]
        Q = T if num_queries is None else num_queries
        k_BTHD = self._keys(x_BTD)
        return jnp.einsum("bqd,bthd->bhqt", x_BTD[:, T - Q :], k_BTHD) * self.scale

    def flops(self, T: int, num_queries: int | None = None) -> float:
        """Forward FLOPs of one sequence: the BTT maps of the ``T`` keys (two stages) and ``H``
        full-width ``Q x T`` logits (``Q = num_queries``, ``T`` by default)."""
        n1, n2, m2, m1, s = self.maps[0].shape
        Q = T if num_queries is None else num_queries
        per_token = 2 * s * (self.d_model * m2 + n1 * self.d_model)
        return len(self.maps) * (T * per_token + 2 * Q * T * self.d_model)

    def dense_matrices(self) -> Float[Array, "H D D"]:
        """``M_h`` with ``scores = x^T M_h x'`` when ``qk_norm=False`` (BTT_h is ``x' @ W``, so
        ``x . BTT_h(x') = x^T W^T x'``)."""
        return jnp.stack([m.dense_matrix().T for m in self.maps]) * self.scale


class BilinearMLRScore(nnx.Module):
    """Bilinear MLR scores (paper Sec. 3.2): ``sum_l c_l LN(q_l(x)) . LN(k_l(x'))`` with
    ``c_l = 1/sqrt(r_l 2^l)`` (``"sqrt"``) or ``8/(r_l 2^l)`` (``"mup"``, the authors' µP).

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
        logit_scale: str = "sqrt",
        rms_cap: bool = False,
        rngs: nnx.Rngs,
    ):
        _check_scale(logit_scale)
        ranks = tuple(int(r) for r in ranks)
        blocks = 2 ** (len(ranks) - 1)
        if not ranks or min(ranks) < 1 or d_model % blocks:
            raise ConfigError(
                f"mlr ranks={ranks}: need positive ranks whose {blocks} finest blocks divide "
                f"d_model={d_model}"
            )
        thin = [lv for lv, r in enumerate(ranks) if r * 2**lv < MIN_LEVEL_WIDTH]
        if qk_norm and thin:
            lv = thin[0]
            raise ConfigError(
                f"mlr ranks={ranks} with qk_norm: level {lv}'s LayerNorm sees r_l 2^l = "
                f"{ranks[lv] * 2**lv} number(s) per head, so its output is constant (1) or a sign "
                f"(2); give every level r_l 2^l >= {MIN_LEVEL_WIDTH} (a wider model, e.g. 3|2|1 "
                "per head at D = 48 with 8 heads)"
            )
        H, D = num_heads, d_model
        init = nnx.initializers.normal(1.0)
        self.wq, self.wk, self.norms_q, self.norms_k = (nnx.List() for _ in range(4))
        for level, r in enumerate(ranks):
            # N(0, 1/fan_in), fan-in the block's D / 2^l: the authors' muPify init (with or
            # without the cap; their N(0, 1) draw is always re-initialised so before training).
            std = (D / 2**level) ** -0.5
            for factors in (self.wq, self.wk):
                factors.append(nnx.Param(init(rngs.params(), (D, H * r)) * std))
            if qk_norm:
                self.norms_q.append(qk_layernorm(r * 2**level, rngs))
                self.norms_k.append(qk_layernorm(r * 2**level, rngs))
        self.ranks, self.num_heads, self.d_model, self.qk_norm = ranks, H, D, qk_norm
        self.mup, self.rms_cap = logit_scale == "mup", rms_cap

    def _factor(self, w, level: int, r: int):
        """A level's factor ``(D, H r)``, RMS-capped as the authors' ``BilinearMLRProjection``
        (blocks ``D / 2^l -> H r``) under ``rms_cap``."""
        if not self.rms_cap:
            return w[...]
        d_in = self.d_model // 2**level
        return rms_capped(w[...], cap=min(d_in, self.num_heads * r) ** 0.5 / d_in)

    def _scale(self, level: int, r: int) -> float:
        """``1/sqrt(r 2^l)``, times ``8/sqrt(r 2^l)`` under µP (the authors' form)."""
        width = r * 2**level
        return width**-0.5 * (8.0 * width**-0.5 if self.mup else 1.0)

    def _project(self, x_BTD, w, level, r):
        B, T, D = x_BTD.shape
        p = 2**level
        x_BTJI = x_BTD.reshape(B, T, p, D // p)
        w_JIHR = self._factor(w, level, r).reshape(p, D // p, self.num_heads, r)
        y_BTHRJ = jnp.einsum("btji,jihr->bthrj", x_BTJI, w_JIHR)
        return y_BTHRJ.reshape(B, T, self.num_heads, r * p)

    def __call__(
        self, x_BTD: Float[Array, "B T D"], num_queries: int | None = None
    ) -> Float[Array, "B H Q T"]:
        """Logits of the last ``num_queries`` positions (all ``T`` by default) against all keys."""
        _check_input("BilinearMLRScore", x_BTD, self.d_model, num_queries)
        T = x_BTD.shape[1]
        xq_BQD = x_BTD if num_queries is None else x_BTD[:, T - num_queries :]
        total = 0.0
        for level, r in enumerate(self.ranks):
            q = self._project(xq_BQD, self.wq[level], level, r)
            k = self._project(x_BTD, self.wk[level], level, r)
            if self.qk_norm:
                q, k = self.norms_q[level](q), self.norms_k[level](k)
            total = total + jnp.einsum("bqhe,bthe->bhqt", q, k) * self._scale(level, r)
        return total

    def flops(self, T: int, num_queries: int | None = None) -> float:
        """Forward FLOPs of one sequence: the level projections (``2 D sum r_l`` per head and
        token, ``Q`` queries and ``T`` keys) and the logits (``2 sum_l r_l 2^l`` per pair and
        head; ``Q = num_queries``, ``T`` by default)."""
        H, D = self.num_heads, self.d_model
        Q = T if num_queries is None else num_queries
        proj = 2 * (Q + T) * D * H * sum(self.ranks)
        logits = 2 * Q * T * H * sum(r * 2**lv for lv, r in enumerate(self.ranks))
        return proj + logits

    def dense_matrices(self) -> Float[Array, "H D D"]:
        """``M_h = sum_l c_l blockdiag_k(Q_{l,k} K_{l,k}^T)`` (scores with
        ``qk_norm=False`` equal ``x^T M_h x'``)."""
        H, D = self.num_heads, self.d_model
        m = jnp.zeros((H, D, D))
        for level, r in enumerate(self.ranks):
            p, size = 2**level, D // 2**level
            wq = self._factor(self.wq[level], level, r).reshape(p, size, H, r)
            wk = self._factor(self.wk[level], level, r).reshape(p, size, H, r)
            blocks_JHIO = jnp.einsum("jihr,johr->jhio", wq, wk) * self._scale(level, r)
            for b in range(p):
                sl = slice(b * size, (b + 1) * size)
                m = m.at[:, sl, sl].add(blocks_JHIO[b])
        return m
