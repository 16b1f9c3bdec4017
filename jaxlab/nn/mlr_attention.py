"""Multi-level low-rank (MLR) attention along the sequence axis, computed block by block.

Kuang, Amsel, Lotfi, Qiu, Potapczynski & Wilson, "Customizing the Inductive Biases of Softmax
Attention using Structured Matrices", ICML 2025, Sec. 4 (MLR attention for language modelling).
The head channels ``M = sum_l r_l`` split into level groups, level 0 first. Level ``l`` splits the
sequence into ``2^l`` contiguous blocks of length ``T / 2^l`` and scores only pairs in the same
block, with its own ``r_l`` channels and logit scale ``1/r_l`` (the paper's and the authors' code's
``1/r_l``, not ``1/sqrt(r_l)``). The logit of a pair is the sum over the levels that cover it,
divided by nothing (``normalize=None``), by ``L`` (``"levels"``) or by the number of levels that
cover the pair (``"block_levels"``, the setting of the paper's LM runs; in the authors' code the
``mlr_divide_by_num_levels`` and ``mlr_block_divide_by_num_levels`` flags).

Blockwise form. The authors' code builds one dense ``T x T`` logit matrix per level and adds
them: ``O(L T^2)`` memory and no saving. Here every pair is scored once, in the region of its
*finest covering level* ``c``: for ``c < L - 1`` these are the pairs of one level-``c`` block that
fall in different halves of it (under a causal mask only the lower off-diagonal half-block), and for
``c = L - 1`` the diagonal blocks of the finest level. A region's pairs all share ``c``, so they
contract only the channels of levels ``0..c`` (queries pre-scaled by ``1/r_l``) and their
normalisation is one number (``1``, ``1/L`` or ``1/(c + 1)``). The regions partition the pairs,
so one softmax over all of a query's keys is a log-sum-exp merge of per-region partial results
(the running max and sum of FlashAttention, Dao 2023). The QK work is then
``sum_l r_l 2^-l / sum_l r_l`` of full attention's (:func:`mlr_qk_flop_ratio`); softmax and the
value sum are unchanged. A region runs a few query rows of its blocks at a time against all their
keys (``lax.map`` / ``lax.scan`` steps of about :data:`REGION_TILE` logits per head), so the logits
alive at once stay in cache, and the backward pass recomputes each step's probabilities from the
saved log-sum-exp (FlashAttention-2, Dao 2023, Alg. 2) instead of storing ``T^2 / 2`` of them.
:func:`mlr_attention_reference` is the dense construction, kept as the oracle.
``impl="pallas"`` runs the same attention through the Pallas kernel
:func:`pallas_kernels.mlr_attention` (one flash-attention pass whose QK width varies per tile
pair); ``impl="auto"`` picks it on GPUs and TPUs under the repo-wide switch of the other kernels
(:func:`jaxlab.nn.pallas_switch.pallas_ready`) when its tiles fit the finest block, else this path.

Not to be confused with the *bilinear* MLR score of the same paper
(:class:`jaxlab.methods.structured_attention.scoring.BilinearMLRScore`, Sec. 3.2): there the
multi-level structure is on the **feature** axis (``M_h = sum_l blockdiag_k(Q_{l,k} K_{l,k}ᵀ)``, a
``D x D`` matrix between a query's and a key's features, replacing the low-rank ``W_Q W_Kᵀ``), with
dense ``T x T`` logits, for in-context regression; here it is on the **sequence** axis (level ``l``
scores only pairs of positions in the same block), which saves QK work in a language model.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

import pallas_kernels
from jaxlab.core.errors import ConfigError
from jaxlab.nn.attention import AttentionImpl, accumulation_dtype, check_qkv
from jaxlab.nn.pallas_switch import pallas_ready

__all__ = [
    "MLRNormalize",
    "REGION_TILE",
    "check_mlr",
    "mlr_attention",
    "blockwise_full_attention",
    "mlr_attention_reference",
    "mlr_covering_levels",
    "mlr_qk_flop_ratio",
    "mlr_region_queries",
]

MLRNormalize = Literal["levels", "block_levels"] | None
_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: masked rows stay NaN-free


def mlr_qk_flop_ratio(ranks: Sequence[int]) -> float:
    """QK FLOPs of MLR attention relative to full attention of head dim ``sum(ranks)``.

    Level ``l`` covers ``2^-l`` of the (causal or full) pairs with ``r_l`` channels:
    ``sum_l r_l 2^-l / sum_l r_l`` (0.601 for the paper's 32|8|6|4|4|4|4|2).
    """
    return sum(r * 2.0**-level for level, r in enumerate(ranks)) / sum(ranks)


def check_mlr(ranks: Sequence[int], head_dim: int, seq_len: int, normalize=None) -> None:
    """Raises a one-line :class:`ConfigError` unless ``ranks`` fit heads of ``head_dim`` channels
    on a sequence of ``seq_len`` positions (``2^(L-1)`` must divide it)."""
    ranks = tuple(ranks)
    if not ranks or any(int(r) < 1 for r in ranks):
        raise ConfigError(f"mlr ranks={ranks} must be a non-empty list of positive ints (8,4,2,2)")
    if sum(ranks) != head_dim:
        raise ConfigError(
            f"mlr ranks={ranks} sum to {sum(ranks)}; they must sum to the head dim {head_dim}"
        )
    blocks = 2 ** (len(ranks) - 1)
    if seq_len % blocks:
        raise ConfigError(
            f"mlr ranks={ranks} has {len(ranks)} levels, whose {blocks} finest blocks must divide "
            f"seq_len={seq_len}; use fewer levels or another seq_len"
        )
    if normalize not in (None, "levels", "block_levels"):
        raise ConfigError(f"mlr normalize={normalize!r}; choose None, 'levels' or 'block_levels'")


def mlr_covering_levels(seq_len: int, num_levels: int) -> np.ndarray:
    """``(T, T)`` int array: how many levels cover each pair (1 + the finest covering level)."""
    pos = np.arange(seq_len)
    count = np.zeros((seq_len, seq_len), np.int32)
    for level in range(num_levels):
        block = seq_len // 2**level
        count += (pos[:, None] // block) == (pos[None, :] // block)
    return count


def _norm_factor(normalize, level: int, num_levels: int) -> float:
    if normalize == "levels":
        return 1.0 / num_levels
    if normalize == "block_levels":
        return 1.0 / (level + 1)
    return 1.0


def _split(x, n: int, parts: int):
    """``(B, T, ...)`` -> ``(B, n, parts, T / (n * parts), ...)``: n blocks of ``parts`` pieces."""
    B, T = x.shape[:2]
    return x.reshape(B, n, parts, T // (n * parts), *x.shape[2:])


def _pick(x, *, n: int, last: bool, causal: bool, side: str):
    """The view of ``(B, T, ...)`` that one region's queries (``side="q"``) or keys see: the
    finest level's diagonal blocks, or for a coarser level ``c`` with ``n = 2^c`` blocks the
    second half's queries against the first half's keys (causal), or each half's queries
    against the other half's keys, folded into the block axis (not causal)."""
    if x is None:
        return None
    x = _split(x, n, 1 if last else 2)
    if last:
        return x[:, :, 0]
    if causal:
        return x[:, :, 1 if side == "q" else 0]
    if side == "k":
        x = x[:, :, ::-1]
    return x.reshape(x.shape[0], -1, *x.shape[3:])


# Logits per (batch row, head) that one step of a region computes: a region runs this many // (n S)
# query rows of its n blocks at a time against all their S keys, so a step's logits stay in cache
# (256 Ki: 128 rows of the 2048 keys of every region at T = 4096). See :func:`_blockwise`.
REGION_TILE = 2**18


def _pad_axis(x, axis: int, amount: int, value):
    if not amount:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, amount)
    return jnp.pad(x, widths, constant_values=value)


class _Region:
    """One region of the blockwise form, head-major: ``n`` blocks of ``Q`` queries against ``S``
    keys, run ``rows`` queries of every block at a time (``Q`` padded to a multiple of it).

    ``pick_q`` / ``pick_k`` map ``(B, T, ...)`` arrays to the ``(B, n, Q | S, ...)`` views the
    region sees (:func:`_pick`); their linear transposes carry gradients back."""

    def __init__(self, c, L, T, periods, causal, tile, segment_ids, slopes):
        self.last = c == L - 1
        n = periods * 2**c
        self.pick_q = functools.partial(_pick, n=n, last=self.last, causal=causal, side="q")
        self.pick_k = functools.partial(_pick, n=n, last=self.last, causal=causal, side="k")
        pos = jnp.arange(T)[None]
        q_pos, self.k_pos = self.pick_q(pos)[0], self.pick_k(pos)[0]  # (n, Q), (n, S)
        self.Q, self.S = q_pos.shape[1], self.k_pos.shape[1]
        self.rows = max(1, min(self.Q, tile // (n * self.S)))
        self.steps = -(-self.Q // self.rows)
        self.pad = self.steps * self.rows - self.Q
        self.q_pos = _pad_axis(q_pos, 1, self.pad, 0)
        self.causal_mask = causal and self.last
        self.seg_q = None if segment_ids is None else self.rows_first(self.pick_q(segment_ids), -1)
        self.seg_k = None if segment_ids is None else self.pick_k(segment_ids)
        self.slopes = slopes

    def rows_first(self, x_BNQ, value=0.0):
        """``(B, n, Q, ...)`` -> ``(steps, B, n, rows, ...)``: the region's query steps."""
        x = _pad_axis(x_BNQ, 2, self.pad, value)
        x = x.reshape(*x.shape[:2], self.steps, self.rows, *x.shape[3:])
        return jnp.moveaxis(x, 2, 0)

    def queries(self, x_BNQH, value=0.0):
        """``(B, n, Q, H, ...)`` -> ``(steps, B, n, H, rows, ...)`` (padded with ``value``)."""
        x = _pad_axis(jnp.moveaxis(x_BNQH, 3, 2), 3, self.pad, value)
        x = x.reshape(*x.shape[:3], self.steps, self.rows, *x.shape[4:])
        return jnp.moveaxis(x, 3, 0)

    def keys(self, x_BNSH):
        """``(B, n, S, H, ...)`` -> ``(B, n, H, S, ...)``."""
        return jnp.moveaxis(x_BNSH, 3, 2)

    def unqueries(self, x):
        """Inverse of :meth:`queries` for ``(steps, B, n, H, rows, ...)``, padding dropped."""
        x = jnp.moveaxis(x, 0, 3)  # (B, n, H, steps, rows, ...)
        x = x.reshape(*x.shape[:3], self.steps * self.rows, *x.shape[5:])[:, :, :, : self.Q]
        return jnp.moveaxis(x, 2, 3)  # (B, n, Q, H, ...)

    def masks(self, q_pos, seg_q, acc, keys_first=False):
        """``keep`` (or None) and ALiBi ``bias`` (or None) of one step's queries (positions
        ``(n, rows)``) against the region's keys, broadcastable to ``(B, n, H, rows, S)``, or to
        ``(B, n, H, S, rows)`` with ``keys_first``; the bias in ``acc``."""

        def pair(x_q, x_k):  # (..., n, rows) and (..., n, S) -> broadcastable (..., n, 1, ., .)
            if keys_first:
                x_q, x_k = x_q[..., None, None, :], x_k[..., None, :, None]
            else:
                x_q, x_k = x_q[..., None, :, None], x_k[..., None, None, :]
            return x_q, x_k

        keep = None
        if self.causal_mask:
            q_b, k_b = pair(q_pos, self.k_pos)
            keep = (q_b >= k_b)[None]
        if seg_q is not None:
            q_b, k_b = pair(seg_q, self.seg_k)
            keep = (q_b == k_b) if keep is None else keep & (q_b == k_b)
        bias = None
        if self.slopes is not None:
            q_b, k_b = pair(q_pos, self.k_pos)
            dist = jnp.abs(q_b - k_b).astype(acc)[None]  # (1, n, 1, ., .)
            bias = -self.slopes.astype(acc)[:, None, None] * dist
        return keep, bias


def _step_logits(region, q_t, k, q_pos, seg_q, keys_first=False):
    """Masked logits ``(B, n, H, rows, S)`` of one step's queries (``(B, n, H, S, rows)`` with
    ``keys_first``) and their ``keep`` mask."""
    spec = "bnhkw,bnhqw->bnhkq" if keys_first else "bnhqw,bnhkw->bnhqk"
    a, b = (k, q_t) if keys_first else (q_t, k)
    acc = accumulation_dtype(q_t, k)
    s = jnp.einsum(spec, a, b, preferred_element_type=acc)
    keep, bias = region.masks(q_pos, seg_q, acc, keys_first)
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = jnp.where(keep, s, _MASK_VALUE)
    return s, keep


def _step_inputs(region):
    """The per-step positions and segment ids of a region's queries (scan inputs)."""
    q_pos = jnp.moveaxis(region.q_pos.reshape(-1, region.steps, region.rows), 1, 0)
    return q_pos, region.seg_q


def _region_forward(region, q_c, k_w, v):
    """Partial softmax of one region: max ``m``, sum ``z`` and unnormalised output ``o`` of each
    query over the region's keys only, as ``(B, n, Q, H)``, ``(B, n, Q, H)``, ``(B, n, Q, H,
    E)``; ``rows`` queries of every block per step of a ``lax.map``."""
    r = region
    k, v = r.keys(r.pick_k(k_w)), r.keys(r.pick_k(v))
    q_pos, seg_q = _step_inputs(r)
    acc = accumulation_dtype(q_c, k_w, v)

    def step(xs):
        q_t, pos, seg = xs
        s, keep = _step_logits(r, q_t, k, pos, seg)
        m = s.max(-1)
        p = jnp.exp(s - m[..., None])
        if keep is not None:
            p = jnp.where(keep, p, 0.0)
        o = jnp.einsum("bnhqk,bnhkd->bnhqd", p.astype(v.dtype), v,
                       preferred_element_type=acc)  # fmt: skip
        return m, p.sum(-1), o

    xs = (r.queries(r.pick_q(q_c)), q_pos, seg_q)
    m, z, o = step(jax.tree.map(lambda x: x[0], xs)) if r.steps == 1 else jax.lax.map(step, xs)
    if r.steps == 1:
        m, z, o = (x[None] for x in (m, z, o))
    return r.unqueries(m), r.unqueries(z), r.unqueries(o)


def _regions(q_regions, k, segment_ids, slopes, causal, periods, tile):
    """``(q_c, region c)`` for every finest covering level ``c``."""
    T, L = k.shape[1], len(q_regions)
    regions = [_Region(c, L, T, periods, causal, tile, segment_ids, slopes) for c in range(L)]
    return zip(q_regions, regions, strict=True)


def _blockwise_forward(q_regions, k, v, segment_ids, slopes, causal, periods, tile):
    """Output ``(B, T, H, E)`` and log-sum-exp ``(B, T, H)`` of the blockwise form."""
    B, T, H, _ = k.shape
    merged = []  # (m, z, o) over the whole sequence, one per region
    for q_c, r in _regions(q_regions, k, segment_ids, slopes, causal, periods, tile):
        m, z, o = _region_forward(r, q_c, k[..., : q_c.shape[-1]], v)
        if causal and not r.last:  # first halves have no keys in this region: neutral entries
            m = jnp.stack([jnp.full_like(m, _MASK_VALUE), m], axis=2)
            z = jnp.stack([jnp.zeros_like(z), z], axis=2)
            o = jnp.stack([jnp.zeros_like(o), o], axis=2)
        merged.append((m.reshape(B, T, H), z.reshape(B, T, H), o.reshape(B, T, H, -1)))
    m_all = jnp.max(jnp.stack([m for m, _, _ in merged]), axis=0)
    z_all = sum(z * jnp.exp(m - m_all) for m, z, _ in merged)
    o_all = sum(o * jnp.exp(m - m_all)[..., None] for m, _, o in merged)
    return (o_all / z_all[..., None]).astype(v.dtype), m_all + jnp.log(z_all)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _blockwise(q_regions, k, v, segment_ids, slopes, causal, periods=1, tile=REGION_TILE):
    """Attention whose pairs of finest covering level ``c`` are scored by ``q_regions[c]`` (the
    pre-scaled first ``w_c`` query channels) against the first ``w_c`` key channels; see the module
    docstring. ``periods`` level-0 blocks tile the sequence (pairs in different ones are not
    scored). Each region runs ``max(1, tile // (n S))`` query rows of its ``n`` blocks at a time
    against all their ``S`` keys (a softmax per step, no carry), and the regions merge by their
    log-sum-exp, so the logits held at once are about ``tile`` per head, not a region's. The
    backward pass is FlashAttention-2's Alg. 2 (Dao 2023) per region, recomputing each step's
    probabilities from the saved log-sum-exp.
    Returns ``(B, T, H, E)``."""
    return _blockwise_forward(q_regions, k, v, segment_ids, slopes, causal, periods, tile)[0]


def _blockwise_fwd(q_regions, k, v, segment_ids, slopes, causal, periods, tile):
    out, lse = _blockwise_forward(q_regions, k, v, segment_ids, slopes, causal, periods, tile)
    return out, (q_regions, k, v, segment_ids, slopes, out, lse)


def _region_backward(region, q_c, k_w, v, do, lse, delta):
    """Gradients of one region's queries, keys (first ``w`` channels) and values, in the
    ``(B, T, H, ...)`` layout of the inputs (FlashAttention-2 Alg. 2 with the probabilities
    recomputed from the saved log-sum-exp, ``rows`` queries of every block per scan step)."""
    r = region
    big = -_MASK_VALUE  # padded queries: p = exp(s - big) = 0
    k, vv = r.keys(r.pick_k(k_w)), r.keys(r.pick_k(v))
    # dQ = dS K contracts the keys, the leading axis of dS in the keys-first layout below; XLA
    # CPU runs that form on a slow path whose time hardly falls with the width w. As
    # dQ^T = K^T dS^T with K^T built once per region (outside the scan) it is a plain product
    # whose time scales with w (mlr_attention_bench's timed-products breakdown).
    k_t = jnp.swapaxes(k, -1, -2)  # (B, n, H, w, S)
    q_pos, seg_q = _step_inputs(r)
    acc = accumulation_dtype(q_c, k_w, v)
    acc_kw = dict(preferred_element_type=acc)

    def step(carry, xs):
        dk, dv = carry
        q_t, do_t, lse_t, delta_t, pos, seg = xs
        # keys first: every product below contracts the last axis of its first operand (dQ
        # through K^T, above); XLA CPU sends products contracting a leading axis to a slower path
        s_t, keep = _step_logits(r, q_t, k, pos, seg, keys_first=True)  # (B, n, H, S, rows)
        p_t = jnp.exp(s_t - lse_t[..., None, :])
        if keep is not None:
            p_t = jnp.where(keep, p_t, 0.0)
        dv = dv + jnp.einsum("bnhkq,bnhqd->bnhkd", p_t.astype(do_t.dtype), do_t, **acc_kw)
        dp_t = jnp.einsum("bnhkd,bnhqd->bnhkq", vv, do_t, **acc_kw)
        ds_t = (p_t * (dp_t - delta_t[..., None, :])).astype(k.dtype)
        dq_t = jnp.einsum("bnhwk,bnhkq->bnhwq", k_t, ds_t, **acc_kw)  # dQ^T, (B, n, H, w, rows)
        dk = dk + jnp.einsum("bnhkq,bnhqw->bnhkw", ds_t, q_t, **acc_kw)
        return (dk, dv), dq_t

    xs = (r.queries(r.pick_q(q_c)), r.queries(r.pick_q(do)), r.queries(r.pick_q(lse), big),
          r.queries(r.pick_q(delta)), q_pos, seg_q)  # fmt: skip
    zeros = lambda x: jnp.zeros(x.shape, acc)
    (dk, dv), dq = jax.lax.scan(step, (zeros(k), zeros(vv)), xs)
    unpick = lambda pick, x, g: jax.linear_transpose(pick, x)(g.astype(x.dtype))[0]
    dq = jnp.swapaxes(dq, -1, -2)  # back to (steps, B, n, H, rows, w), once after the scan
    return (unpick(r.pick_q, q_c, r.unqueries(dq)), unpick(r.pick_k, k_w, jnp.moveaxis(dk, 2, 3)),
            unpick(r.pick_k, v, jnp.moveaxis(dv, 2, 3)))  # fmt: skip


def _blockwise_bwd(causal, periods, tile, residuals, do):
    q_regions, k, v, segment_ids, slopes, out, lse = residuals
    acc = accumulation_dtype(*q_regions, k, v)
    delta = jnp.sum(out.astype(acc) * do.astype(acc), axis=-1)
    dq_regions, dk, dv = [], jnp.zeros(k.shape, acc), jnp.zeros(v.shape, acc)
    for q_c, r in _regions(q_regions, k, segment_ids, slopes, causal, periods, tile):
        w = q_c.shape[-1]
        dq_c, dk_w, dv_c = _region_backward(r, q_c, k[..., :w], v, do, lse, delta)
        dq_regions.append(dq_c)
        dk = dk.at[..., :w].add(dk_w.astype(acc))
        dv = dv + dv_c.astype(acc)
    return tuple(dq_regions), dk.astype(k.dtype), dv.astype(v.dtype), None, None


_blockwise.defvjp(_blockwise_fwd, _blockwise_bwd)
# The blockwise path is hundreds of small operations (a scan per region and level); compiled as one
# program it costs one compile per shape, where an eager call would compile and dispatch each of
# them on its own (the root CHANGELOG has the times). Inside a caller's jit these are inner calls
# that XLA inlines.
_blockwise_jit = jax.jit(_blockwise, static_argnums=(5, 6, 7))


@functools.partial(jax.jit, static_argnums=(6, 7, 8, 9, 10))
def _mlr_blockwise(q, k, v, segment_ids, slopes, logit_scale, ranks, normalize, causal, periods,
                   tile):  # fmt: skip
    """:func:`mlr_attention`'s XLA path after its checks: the region queries and the blockwise
    form, one program (``logit_scale`` may be traced)."""
    q_regions = mlr_region_queries(q, ranks, normalize, logit_scale)
    return _blockwise(tuple(q_regions), k, v, segment_ids, slopes, causal, periods, tile)


def mlr_region_queries(q, ranks, normalize=None, logit_scale: float = 1.0):
    """The per-region queries of the blockwise form: for finest covering level ``c``, the first
    ``sum_{l<=c} r_l`` channels, level ``l``'s multiplied by ``logit_scale * f_c / r_l`` with
    ``f_c`` the region's normalisation (1, 1/L or 1/(c+1))."""
    L, acc = len(ranks), accumulation_dtype(q)  # float32, or float64 for float64 queries
    per_level = np.concatenate([np.full(r, 1.0 / r, acc) for r in ranks])
    out = []
    for c, w in enumerate(np.cumsum(ranks)):
        scale = per_level[:w] * (logit_scale * _norm_factor(normalize, c, L))
        out.append((q[..., :w].astype(acc) * scale).astype(q.dtype))
    return out


def mlr_attention(
    q: Float[Array, "B T H M"],
    k: Float[Array, "B T H M"],
    v: Float[Array, "B T H E"],
    *,
    ranks: Sequence[int],
    causal: bool = True,
    normalize: MLRNormalize = None,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    logit_scale: float = 1.0,
    block_len: int | None = None,
    impl: str | AttentionImpl = "auto",
    tile: int = REGION_TILE,
) -> Float[Array, "B T H E"]:
    """MLR attention (Kuang et al. 2025, Sec. 4), blockwise (see the module docstring).

    Args:
      q, k: queries and keys, ``M = sum(ranks)`` channels per head, level 0 (global) first.
      v: values (any head dim).
      ranks: ``r_l`` per level; ``2^(L-1)`` must divide ``T``.
      causal: keys at positions ``<=`` the query's only.
      normalize: ``None``, ``"levels"`` (divide by L) or ``"block_levels"`` (by the number of
        levels covering the pair).
      segment_ids: keep only pairs in the same document (packed rows).
      alibi_slopes: ALiBi slopes per head, added after the MLR logits (Press et al. 2022).
      logit_scale: extra multiplier of every MLR logit (e.g. an RMT's 1/(layer + 1)).
      block_len: length of the level-0 block, the context the levels are laid on (default T;
        a model passes its training ``seq_len``). Causal inputs of another length are padded at
        the end to a multiple of it (causal queries never see the padding): a shorter prompt
        gets the blocks it would have inside a full row, and past ``block_len`` the level-0
        blocks repeat (pairs in different ones are not scored).
      impl: an :class:`~jaxlab.nn.attention.AttentionImpl` (a model's ``attention_impl``):
        ``"pallas"`` the Pallas kernel, ``"auto"`` the kernel where
        :func:`~jaxlab.nn.pallas_switch.pallas_ready` says so and its tiles fit the finest block
        (else the blockwise XLA path), any other the blockwise XLA path.
      tile: logits per (row, head) that one step of the blockwise XLA path computes: each region
        runs ``max(1, tile // (n S))`` query rows of its ``n`` blocks of ``S`` keys at a time
        (results do not depend on it).

    Returns:
      ``(B, T, H, E)`` in v's dtype; for ``B = 0`` or ``T = 0`` the empty array of that shape.

    Raises:
      ConfigError: ranks that do not fit M or ``block_len``, a non-causal input of another
        length, shapes that do not match (an unbatched ``(T, H, M)`` input included), an unknown
        ``impl``, or ``impl="pallas"`` with shapes the kernel cannot tile.
    """
    check_qkv(q, k, v, owner="mlr_attention", segment_ids=segment_ids, alibi_slopes=alibi_slopes,
              grouped=False)  # fmt: skip
    try:
        impl = AttentionImpl(impl)
    except ValueError:
        options = ", ".join(i.value for i in AttentionImpl)
        raise ConfigError(f"unknown mlr_attention impl {impl!r}; choose one of {options}") from None
    _check_tile(tile)
    B, T = q.shape[:2]
    if block_len is not None and int(block_len) < 1:
        raise ConfigError(f"mlr_attention: block_len={block_len} must be a positive int or None")
    block_len = T if block_len is None else int(block_len)
    check_mlr(ranks, q.shape[-1], block_len, normalize)
    if B == 0 or T == 0:  # no query: the empty result, as jax.nn.dot_product_attention gives
        return jnp.zeros((*q.shape[:3], v.shape[-1]), v.dtype)
    periods = -(-T // block_len)
    pad = periods * block_len - T
    if pad and not causal:
        raise ConfigError(
            f"mlr_attention: non-causal input of length {T} needs a multiple of block_len="
            f"{block_len}"
        )
    if pad:
        grow = lambda x: jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2))
        q, k, v = grow(q), grow(k), grow(v)
        segment_ids = None if segment_ids is None else grow(segment_ids)
    auto_pallas = impl is AttentionImpl.AUTO and pallas_ready(kernel="mlr_attention")
    if impl is AttentionImpl.PALLAS or auto_pallas:
        kwargs = dict(ranks=tuple(ranks), causal=causal, normalize=normalize,
                      segment_ids=segment_ids, alibi_slopes=alibi_slopes,
                      logit_scale=logit_scale, block_len=block_len)  # fmt: skip
        try:
            return pallas_kernels.mlr_attention(q, k, v, **kwargs)[:, :T]
        except pallas_kernels.KernelConfigError as err:
            if impl is AttentionImpl.PALLAS:
                raise ConfigError(f"mlr_attention impl 'pallas': {err}") from None
    out = _mlr_blockwise(q, k, v, segment_ids, alibi_slopes, logit_scale, tuple(ranks), normalize,
                         causal, periods, int(tile))  # fmt: skip
    return out[:, :T]


def blockwise_full_attention(
    q: Float[Array, "B T H M"],
    k: Float[Array, "B T H M"],
    v: Float[Array, "B T H E"],
    *,
    num_levels: int,
    causal: bool = True,
    scale: float | None = None,
    tile: int = REGION_TILE,
) -> Float[Array, "B T H E"]:
    """Standard softmax attention through the same region decomposition as :func:`mlr_attention`
    (every region contracts all M channels): the like-for-like baseline of the benchmark, and a
    check of the merge (it equals plain attention)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q_s = (q.astype(accumulation_dtype(q)) * scale).astype(q.dtype)
    _check_tile(tile)
    return _blockwise_jit((q_s,) * num_levels, k, v, None, None, causal, 1, int(tile))


def _check_tile(tile) -> None:
    if not isinstance(tile, int | np.integer) or isinstance(tile, bool) or tile < 1:
        raise ConfigError(f"mlr_attention: tile={tile!r} must be a positive int (default 2**18)")


def mlr_attention_reference(
    q: Float[Array, "B T H M"],
    k: Float[Array, "B T H M"],
    v: Float[Array, "B T H E"],
    *,
    ranks: Sequence[int],
    causal: bool = True,
    normalize: MLRNormalize = None,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    logit_scale: float = 1.0,
) -> Float[Array, "B T H E"]:
    """The dense construction (as the authors' code builds it): one masked ``T x T`` logit matrix
    per level, summed, normalised, masked and soft-maxed. ``O(L T^2)``; the oracle of the tests."""
    check_qkv(q, k, v, owner="mlr_attention", segment_ids=segment_ids, alibi_slopes=alibi_slopes,
              grouped=False)  # fmt: skip
    check_mlr(ranks, q.shape[-1], q.shape[1], normalize)
    T, L = q.shape[1], len(ranks)
    pos = jnp.arange(T)
    acc = accumulation_dtype(q, k, v)  # float32, or float64 for float64 inputs
    s = jnp.zeros((q.shape[0], q.shape[2], T, T), acc)
    count = jnp.zeros((T, T), acc)
    start = 0
    for level, r in enumerate(ranks):
        block = T // 2**level
        same = (pos[:, None] // block) == (pos[None, :] // block)
        q_l, k_l = q[..., start : start + r], k[..., start : start + r]
        s_l = jnp.einsum("bthm,bshm->bhts", q_l, k_l, preferred_element_type=acc) / r
        s, count, start = s + jnp.where(same, s_l, 0.0), count + same, start + r
    if normalize == "levels":
        s = s / L
    elif normalize == "block_levels":
        s = s / count
    s = s * logit_scale
    if alibi_slopes is not None:
        s = s - alibi_slopes[None, :, None, None] * jnp.abs(pos[:, None] - pos[None, :])
    keep = jnp.ones((1, 1, T, T), bool)
    if causal:
        keep &= (pos[:, None] >= pos[None, :])[None, None]
    if segment_ids is not None:
        keep &= (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]
    p = jax.nn.softmax(jnp.where(keep, s, _MASK_VALUE), axis=-1)
    return jnp.einsum("bhts,bshe->bthe", p.astype(v.dtype), v).astype(v.dtype)
