"""MLR attention in Pallas: flash attention whose QK contraction width varies per tile pair.

Multi-level low-rank (MLR) attention (Kuang, Amsel, Lotfi, Qiu, Potapczynski & Wilson, "Customizing
the Inductive Biases of Softmax Attention using Structured Matrices", ICML 2025, Sec. 4): the head
channels ``M = sum_l r_l`` split into level groups, level 0 first; level ``l`` scores only pairs in
the same contiguous block of length ``block_len / 2^l`` with its ``r_l`` channels and logit scale
``1/r_l``, and a pair's logit is the sum over the levels that cover it, divided by nothing, by
``L`` (``normalize="levels"``) or by the number of covering levels (``"block_levels"``).

Coverage is nested (a pair covered by level ``l`` is covered by every coarser one), so the channels
of a pair's covering levels are a *prefix* of the channel axis: ``w_c = sum_{l <= c} r_l`` for the
finest covering level ``c``. With query and key tiles no longer than the finest block
(``block_len / 2^(L-1)``), ``c`` is one number per (query tile, key tile) pair, and so is the
block-level normalisation ``1/(c + 1)``. The kernels are FlashAttention-2 (Dao 2023, Alg. 1 forward
with online softmax and float32 accumulators; Alg. 2 backward split into a dK/dV kernel and a dQ
kernel, Sec. 3.1.2) whose tile step picks, with a ``lax.switch`` over ``c`` (static widths; it
lowers to nested ``scf.if`` on both Triton and Mosaic), a contraction over the first
``ceil(w_c / block_d)`` channel chunks only, the last chunk's channels past ``w_c`` zeroed. The
queries are pre-scaled outside the kernels by ``logit_scale / r_l`` per level (and by ``1/L`` for
``"levels"``); ``"block_levels"`` multiplies the tile's logits by ``1/(c + 1)``. Key tiles outside
the query's level-0 block are never visited (the loop bounds skip them, and causal masking skips
the tiles above the diagonal), so the QK work is ``sum_l r_l 2^-l / sum_l r_l`` of flash
attention's up to the chunk rounding; softmax and the value sum are unchanged. Options as in
``flash_attention``: document masking by segment ids and ALiBi (added after the MLR logits).
:func:`mlr_attention_reference` is the dense construction in jnp, the oracle beside the kernel.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jaxtyping import Array, Float, Int

from pallas_kernels import fit
from pallas_kernels._common import (
    F32,
    MASK_VALUE,
    KernelConfigError,
    Style,
    attention_call,
    attention_vjp,
    check_power_of_two,
    check_qkv,
    div,
    dot,
    extra_inputs,
    f32_precision,
    load_tile,
    pow2_at_least,
    reduce_blocks,
    resolve_backend,
    round_up,
    split_refs,
)

__all__ = ["BlockSizes", "mlr_attention", "mlr_attention_reference"]
NORMALIZE = (None, "levels", "block_levels")
_TILES = ("block_q", "block_k", "block_q_dkv", "block_k_dkv", "block_q_dq", "block_k_dq")


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes (powers of two >= 8) of the forward, dK/dV and dQ kernels, and the channel chunk.

    ``block_q*`` tile the queries, ``block_k*`` the keys; tiles longer than the finest level's
    block shrink to it. ``block_d`` is the chunk in which the QK contraction width grows: a tile
    pair of finest covering level ``c`` contracts ``ceil(w_c / block_d)`` chunks (16 on GPUs, the
    smallest ``tl.dot`` depth; on TPUs 128, a full lane row, so heads up to 128 channels are one
    chunk: the MXU contracts 128 at a time and a narrower contraction would save nothing there).
    """

    block_q: int = 64
    block_k: int = 64
    block_q_dkv: int = 64
    block_k_dkv: int = 64
    block_q_dq: int = 64
    block_k_dq: int = 64
    block_d: int = 16

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_power_of_two("BlockSizes", field.name, getattr(self, field.name))

    @classmethod
    def for_backend(cls, backend: Style) -> BlockSizes:
        return cls() if backend == "gpu" else cls(128, 128, 128, 128, 128, 128, block_d=128)

    @classmethod
    def fitted(cls, width: int, dtype) -> BlockSizes:
        """The GPU defaults, tiles halved until every program's shared-memory estimate at this
        (padded) head width and dtype fits the device (:mod:`pallas_kernels.fit`)."""
        return fit.fit_attention(
            cls.for_backend("gpu"),
            lambda b: fit.mlr_attention_bytes(b, width, width, dtype),
            fit.smem_budget(),
        )


@dataclasses.dataclass(frozen=True)
class _Static:
    """Everything the kernels need that is known at trace time (hashable: custom_vjp nondiff)."""

    block_q: int
    block_k: int
    block_q_dkv: int
    block_k_dkv: int
    block_q_dq: int
    block_k_dq: int
    chunk: int  # channels per QK contraction chunk
    widths: tuple[int, ...]  # w_c: channels of levels 0..c
    factors: tuple[float, ...]  # f_c: the logit factor of a tile pair of finest level c
    block_len: int  # level-0 block: pairs in different ones are not scored
    causal: bool
    has_seg: bool
    has_alibi: bool
    style: Style
    interpret: bool
    precision: object  # of the float32 dots (_common.f32_precision)

    @property
    def levels(self) -> int:
        return len(self.widths)

    def n_chunks(self, c: int) -> int:
        return -(-self.widths[c] // self.chunk)


# ------------------------------------------------------------------------------------ tile maths


def _finest_level(cfg: _Static, q_start, k_start):
    """Finest level covering a tile pair of one level-0 block: the number of finer levels whose
    block holds both tile starts (tiles never straddle a finest block, so the tile pair agrees)."""
    c = jnp.int32(0)
    for level in range(1, cfg.levels):
        size = cfg.block_len >> level
        c = c + (div(q_start, size) == div(k_start, size)).astype(jnp.int32)
    return c


def _bounds(cfg: _Static, r, row_block: int, stream_block: int, row_is_q: bool):
    """Stream blocks ``[lo, hi)`` that row block ``r`` meets: those of its level-0 block, and under
    a causal mask only up to (queries) or from (keys) the diagonal. All indices are >= 0."""
    per_block = cfg.block_len // stream_block
    lo = div(r * row_block, cfg.block_len) * per_block
    hi = lo + per_block
    if cfg.causal and row_is_q:
        hi = jnp.minimum(hi, div((r + 1) * row_block - 1, stream_block) + 1)
    elif cfg.causal:
        lo = jnp.maximum(lo, div(r * row_block, stream_block))
    return lo, hi


def _chunks(ref, j, size: int, n: int, cfg: _Static):
    """The first ``n`` channel chunks of a 2-D ref: its own block (``j=None``) or streamed block
    ``j`` of ``size`` rows (GPU style slices the full-length ref; TPU style's ref is block j)."""
    rows = slice(None)
    if j is not None and cfg.style == "gpu":
        rows = pl.ds(pl.multiple_of(j * size, size), size)
    return [ref[rows, pl.ds(m * cfg.chunk, cfg.chunk)] for m in range(n)]


def _prefix(chunks, c: int, cfg: _Static):
    """Chunks of level prefix ``c``: the last one's channels past ``w_c`` zeroed."""
    chunks = list(chunks[: cfg.n_chunks(c)])
    rest = cfg.widths[c] - (len(chunks) - 1) * cfg.chunk
    if rest < cfg.chunk:
        last = chunks[-1]
        keep = lax.broadcasted_iota(jnp.int32, last.shape, 1) < rest
        chunks[-1] = jnp.where(keep, last, jnp.zeros_like(last))
    return chunks


def _logits(q_chunks, k_chunks, c: int, q_start, k_start, seg_q, seg_k, slope, cfg: _Static):
    """Masked logits of one tile pair of finest level ``c``: ``f_c · q̃ kᵀ`` over the prefix chunks
    (``q̃`` pre-scaled by ``1/r_l``), then ALiBi, the causal and the document masks."""
    s = dot(q_chunks[0], k_chunks[0], (1, 1), cfg.precision)
    for a, b in zip(q_chunks[1:], k_chunks[1:], strict=True):
        s = s + dot(a, b, (1, 1), cfg.precision)
    if cfg.factors[c] != 1.0:
        s = s * cfg.factors[c]
    q_pos = q_start + lax.broadcasted_iota(jnp.int32, s.shape, 0)
    k_pos = k_start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    if slope is not None:
        s = s - slope * jnp.abs(q_pos - k_pos).astype(F32)
    mask = q_pos >= k_pos if cfg.causal else None
    if seg_q is not None:
        same = seg_q == seg_k  # (bq, 1) == (1, bk)
        mask = same if mask is None else jnp.logical_and(mask, same)
    return s if mask is None else jnp.where(mask, s, MASK_VALUE)


def _by_level(cfg: _Static, q_start, k_start, tile, j, carry):
    """``tile(c, j, carry)`` for the tile pair's finest covering level ``c``, static in each
    branch (one branch per level)."""
    branches = [functools.partial(tile, c) for c in range(cfg.levels)]
    return lax.switch(_finest_level(cfg, q_start, k_start), branches, j, carry)


# --------------------------------------------------------------------------------------- kernels


def _fwd_kernel(*refs, cfg: _Static):
    """FlashAttention-2 Alg. 1 for one (batch, head, query block), per-tile contraction width."""
    (q_ref, k_ref, v_ref), seg_q_ref, seg_k_ref, slopes_ref, rest = split_refs(refs, 3, cfg)
    o_ref, lse_ref, *scratch = rest
    h, i = pl.program_id(1), pl.program_id(2)
    bq, bk = cfg.block_q, cfg.block_k
    q_chunks = _chunks(q_ref, None, bq, cfg.n_chunks(cfg.levels - 1), cfg)
    seg_q = None if seg_q_ref is None else seg_q_ref[...]
    slope = None if slopes_ref is None else slopes_ref[h]

    def tile(c, j, carry):
        m_T1, l_T1, acc_TE = carry
        k_chunks = _chunks(k_ref, j, bk, cfg.n_chunks(c), cfg)
        v_SE = load_tile(v_ref, j, bk, cfg.style)
        seg_k = None if seg_k_ref is None else load_tile(seg_k_ref, j, bk, cfg.style, axis=1)
        q_c = _prefix(q_chunks, c, cfg)
        s_TS = _logits(q_c, k_chunks, c, i * bq, j * bk, seg_q, seg_k, slope, cfg)
        m_new = jnp.maximum(m_T1, jnp.max(s_TS, axis=1, keepdims=True))
        p_TS = jnp.exp(s_TS - m_new)
        correction = jnp.exp(m_T1 - m_new)  # rescales what was summed under the old maximum
        l_new = correction * l_T1 + jnp.sum(p_TS, axis=1, keepdims=True)
        acc_new = correction * acc_TE + dot(p_TS.astype(v_SE.dtype), v_SE, (1, 0), cfg.precision)
        return m_new, l_new, acc_new

    def init():
        return (
            jnp.full((bq, 1), -jnp.inf, F32),
            jnp.zeros((bq, 1), F32),
            jnp.zeros(o_ref.shape, F32),
        )

    def finalize(carry):
        m_T1, l_T1, acc_TE = carry
        o_ref[...] = (acc_TE / l_T1).astype(o_ref.dtype)
        lse_ref[...] = m_T1 + jnp.log(l_T1)

    step = lambda j, carry: _by_level(cfg, i * bq, j * bk, tile, j, carry)  # noqa: E731
    lo, hi = _bounds(cfg, i, bq, bk, row_is_q=True)
    reduce_blocks(step, init, finalize, lo=lo, hi=hi, style=cfg.style, scratch=scratch, axis=3)


def _side(refs, index, size: int, n: int, cfg: _Static, seg_axis: int):
    """Block ``index`` (``None``: the program's own block) of one side of a backward tile pair:
    the first ``n`` chunks of ``refs[0]`` (q̃ or k), then the other refs' blocks (dO, the
    forward's logsumexp, rowsum(dO ∘ O); or v), and the segment ids, last (None if absent)."""
    chunked, *rest, seg = refs

    def load(ref, axis=0):
        return ref[...] if index is None else load_tile(ref, index, size, cfg.style, axis)

    seg = None if seg is None else load(seg, seg_axis)
    return (_chunks(chunked, index, size, n, cfg), *map(load, rest), seg)


def _bwd_tile(cfg: _Static, c: int, queries, keys, q_start, k_start, slope, stream_is_q: bool):
    """FlashAttention-2 Alg. 2 lines 11-14 for a tile pair of finest level ``c``: the prefix
    chunks of q̃ and k, the forward's probabilities ``P`` recomputed from its logsumexp, and
    ``dS = f_c · P ∘ (dO Vᵀ - rowsum(dO ∘ O))``, the tile's logit factor chained into q̃ kᵀ.

    The streamed side's chunks are those dS multiplies into the gradient, so their channels past
    ``w_c`` are zeroed (the tile adds nothing there); one zeroed operand suffices for the logits.
    """
    (q_chunks, do_TE, lse_T1, delta_T1, seg_q), (k_chunks, v_SE, seg_k) = queries, keys
    n = cfg.n_chunks(c)
    q_c, k_c = q_chunks[:n], k_chunks[:n]
    if stream_is_q:
        q_c = _prefix(q_c, c, cfg)
    else:
        k_c = _prefix(k_c, c, cfg)
    s_TS = _logits(q_c, k_c, c, q_start, k_start, seg_q, seg_k, slope, cfg)
    p_TS = jnp.exp(s_TS - lse_T1)  # the forward's probabilities, recomputed
    ds_TS = p_TS * (
        dot(do_TE, v_SE, (1, 1), cfg.precision) - delta_T1
    )  # dS = P ∘ (dP - rowsum(dO ∘ O))
    if cfg.factors[c] != 1.0:
        ds_TS = ds_TS * cfg.factors[c]
    return q_c, k_c, p_TS, ds_TS


def _dkv_kernel(*refs, cfg: _Static):
    """FlashAttention-2 Alg. 2, loop over query blocks: dK (by chunks) and dV of one key block."""
    main, seg_q_ref, seg_k_ref, slopes_ref, rest = split_refs(refs, 6, cfg)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = main
    dk_ref, dv_ref, *scratch = rest
    h, j = pl.program_id(1), pl.program_id(2)
    bq, bk = cfg.block_q_dkv, cfg.block_k_dkv
    n_all = dk_ref.shape[-1] // cfg.chunk
    keys = _side((k_ref, v_ref, seg_k_ref), None, bk, n_all, cfg, seg_axis=1)
    q_refs = (q_ref, do_ref, lse_ref, delta_ref, seg_q_ref)
    slope = None if slopes_ref is None else slopes_ref[h]

    def tile(c, i, carry):
        *dk, dv_SE = carry
        queries = _side(q_refs, i, bq, cfg.n_chunks(c), cfg, seg_axis=0)
        q_c, _, p_TS, ds_TS = _bwd_tile(cfg, c, queries, keys, i * bq, j * bk, slope, True)
        do_TE, n = queries[1], len(q_c)
        dv_SE = dv_SE + dot(p_TS.T.astype(do_TE.dtype), do_TE, (1, 0), cfg.precision)  # Pᵀ dO
        ds_ST = ds_TS.T.astype(q_c[0].dtype)  # explicit .T: Mosaic
        dk = [
            acc + dot(ds_ST, q_m, (1, 0), cfg.precision)
            for acc, q_m in zip(dk[:n], q_c, strict=True)
        ] + dk[n:]
        return (*dk, dv_SE)

    def init():
        return (*[jnp.zeros((bk, cfg.chunk), F32)] * n_all, jnp.zeros(keys[1].shape, F32))

    def finalize(carry):
        *dk, dv_SE = carry
        for m, dk_m in enumerate(dk):
            dk_ref[:, pl.ds(m * cfg.chunk, cfg.chunk)] = dk_m.astype(dk_ref.dtype)
        dv_ref[...] = dv_SE.astype(dv_ref.dtype)

    step = lambda i, carry: _by_level(cfg, i * bq, j * bk, tile, i, carry)  # noqa: E731
    lo, hi = _bounds(cfg, j, bk, bq, row_is_q=False)
    reduce_blocks(step, init, finalize, lo=lo, hi=hi, style=cfg.style, scratch=scratch, axis=3)


def _dq_kernel(*refs, cfg: _Static):
    """FlashAttention-2 Alg. 2, dQ part (by chunks), owned by one query block: no atomics."""
    main, seg_q_ref, seg_k_ref, slopes_ref, rest = split_refs(refs, 6, cfg)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = main
    dq_ref, *scratch = rest
    h, i = pl.program_id(1), pl.program_id(2)
    bq, bk = cfg.block_q_dq, cfg.block_k_dq
    n_all = dq_ref.shape[-1] // cfg.chunk
    q_refs = (q_ref, do_ref, lse_ref, delta_ref, seg_q_ref)
    queries = _side(q_refs, None, bq, n_all, cfg, seg_axis=0)
    slope = None if slopes_ref is None else slopes_ref[h]

    def tile(c, j, carry):
        keys = _side((k_ref, v_ref, seg_k_ref), j, bk, cfg.n_chunks(c), cfg, seg_axis=1)
        _, k_c, _, ds_TS = _bwd_tile(cfg, c, queries, keys, i * bq, j * bk, slope, False)
        ds_TS, n = ds_TS.astype(k_c[0].dtype), len(k_c)
        dq = [
            acc + dot(ds_TS, k_m, (1, 0), cfg.precision)
            for acc, k_m in zip(carry[:n], k_c, strict=True)
        ]
        return (*dq, *carry[n:])

    def finalize(carry):
        for m, dq_m in enumerate(carry):
            dq_ref[:, pl.ds(m * cfg.chunk, cfg.chunk)] = dq_m.astype(dq_ref.dtype)

    step = lambda j, carry: _by_level(cfg, i * bq, j * bk, tile, j, carry)  # noqa: E731
    init = lambda: tuple([jnp.zeros((bq, cfg.chunk), F32)] * n_all)  # noqa: E731
    lo, hi = _bounds(cfg, i, bq, bk, row_is_q=True)
    reduce_blocks(step, init, finalize, lo=lo, hi=hi, style=cfg.style, scratch=scratch, axis=3)


# ------------------------------------------------------------------------------- pallas_calls


def _call(kernel, cfg: _Static, *, rows, stream, row_is_q: bool, arrays, out_shape, **kwargs):
    """One kernel through :func:`~pallas_kernels._common.attention_call` (no GQA; outputs are
    ``"row"``): on TPU the streamed index is clamped to the row's ``[lo, hi)`` (:func:`_bounds`)
    so skipped blocks are not fetched (the last useful one repeats)."""
    row_block, stream_block = rows[0], stream[0]

    def clamp(r, s):
        lo, hi = _bounds(cfg, r, row_block, stream_block, row_is_q)
        return jnp.minimum(jnp.maximum(s, lo), hi - 1)

    return attention_call(
        kernel, cfg, rows=rows, stream=stream, arrays=arrays, out_shape=out_shape,
        out_roles=["row"] * len(out_shape), clamp=clamp,
        width=max(arrays[0].shape[-1], arrays[2].shape[-1]), **kwargs,
    )  # fmt: skip


def _forward(q, k, v, seg_q, seg_k, slopes, cfg: _Static):
    B, H, T, _ = q.shape
    bq, bk = cfg.block_q, cfg.block_k
    extra, extra_roles = extra_inputs(seg_q, seg_k, slopes, row_is_q=True)
    out_shape = [jax.ShapeDtypeStruct(v.shape, v.dtype), jax.ShapeDtypeStruct((B, H, T, 1), F32)]
    return _call(
        _fwd_kernel, cfg, rows=(bq, T // bq), stream=(bk, T // bk), row_is_q=True,
        arrays=[q, k, v, *extra], roles=["row", "stream", "stream", *extra_roles],
        out_shape=out_shape, scratch=[(bq, 1), (bq, 1), (bq, v.shape[-1])],
        name="mlr_attention_fwd",
    )  # fmt: skip


def _backward(cfg: _Static, arrays, seg_q, seg_k, slopes):
    """dQ, dK, dV from the kernels' inputs ``[q, k, v, dO, L, delta]`` (FA-2 Alg. 2)."""
    q, k, v = arrays[:3]
    B, H, T, M = q.shape
    E = v.shape[-1]
    n = M // cfg.chunk
    extra, extra_roles = extra_inputs(seg_q, seg_k, slopes, row_is_q=False)
    bq, bk = cfg.block_q_dkv, cfg.block_k_dkv
    dk, dv = _call(
        _dkv_kernel, cfg, rows=(bk, T // bk), stream=(bq, T // bq), row_is_q=False,
        arrays=arrays + extra,
        roles=["stream", "row", "row", "stream", "stream", "stream", *extra_roles],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        scratch=[(bk, cfg.chunk)] * n + [(bk, E)], name="mlr_attention_dkv",
    )  # fmt: skip
    extra, extra_roles = extra_inputs(seg_q, seg_k, slopes, row_is_q=True)
    bq, bk = cfg.block_q_dq, cfg.block_k_dq
    (dq,) = _call(
        _dq_kernel, cfg, rows=(bq, T // bq), stream=(bk, T // bk), row_is_q=True,
        arrays=arrays + extra,
        roles=["row", "stream", "stream", "row", "row", "row", *extra_roles],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype)],
        scratch=[(bq, cfg.chunk)] * n, name="mlr_attention_dq",
    )  # fmt: skip
    return dq, dk, dv


_mlr = attention_vjp(_forward, _backward)


# ------------------------------------------------------------------------------ public wrapper


def _check(q, k, v, ranks, normalize, segment_ids, alibi_slopes, block_len) -> tuple[int, ...]:
    """One-line KernelConfigErrors for what the kernel cannot take; returns the ranks."""
    check_qkv(
        "mlr_attention", q, k, v, segment_ids=segment_ids, alibi_slopes=alibi_slopes,
        grouped=False,
    )  # fmt: skip
    ranks = tuple(ranks)
    if not ranks or any(not isinstance(r, int | np.integer) or r < 1 for r in ranks):
        raise KernelConfigError(
            f"mlr_attention: ranks={ranks} must be positive ints, level 0 first"
        )
    if sum(ranks) != q.shape[-1]:
        raise KernelConfigError(
            f"mlr_attention: ranks={ranks} sum to {sum(ranks)}, not the head dim M={q.shape[-1]}"
        )
    if normalize not in NORMALIZE:
        raise KernelConfigError(
            f"mlr_attention: normalize={normalize!r}; choose None, 'levels' or 'block_levels'"
        )
    T = q.shape[1]
    if block_len < 1 or T % block_len:
        raise KernelConfigError(
            f"mlr_attention: T={T} must be a multiple of block_len={block_len} (pad the sequence)"
        )
    if block_len % 2 ** (len(ranks) - 1):
        raise KernelConfigError(
            f"mlr_attention: {len(ranks)} levels need block_len={block_len} divisible by "
            f"2^{len(ranks) - 1}; use fewer levels or another length"
        )
    return ranks


def _tiles(
    block_sizes: BlockSizes, finest: int, style: Style, native: bool, levels: int, seg: bool
):
    """Tiles shrunk to the finest level's block, which each must divide."""
    tiles = {}
    for name in _TILES:
        size = min(getattr(block_sizes, name), finest)
        if finest % size or size < 8 or size & (size - 1):
            raise KernelConfigError(
                f"mlr_attention: the finest of {levels} levels has blocks of {finest} positions, "
                f"which {name}={size} must divide (tiles are powers of two >= 8); use fewer "
                "levels, a longer sequence or smaller blocks"
            )
        tiles[name] = size
    if native and style == "gpu" and min(*tiles.values(), block_sizes.block_d) < 16:
        raise KernelConfigError(
            f"mlr_attention: native GPU kernels need tiles and block_d >= 16 (tl.dot); got {tiles}"
        )
    # Key-side segment ids are (1, block_k) blocks: Mosaic needs their lane dim a multiple of 128.
    if native and style == "tpu" and seg and min(tiles[n] for n in _TILES if "_k" in n) < 128:
        raise KernelConfigError(
            f"mlr_attention: native TPU segment_ids need key tiles of 128; the finest block has "
            f"{finest} positions (tiles {tiles}); use fewer levels or a longer sequence"
        )
    return tiles


def mlr_attention(
    q: Float[Array, "B T H M"],
    k: Float[Array, "B T H M"],
    v: Float[Array, "B T H E"],
    *,
    ranks: Sequence[int],
    causal: bool = True,
    normalize: str | None = None,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    logit_scale: float = 1.0,
    block_len: int | None = None,
    block_sizes: BlockSizes | None = None,
    interpret: bool | None = None,
    backend: Style | None = None,
) -> Float[Array, "B T H E"]:
    """MLR attention (Kuang et al. 2025, Sec. 4) without materialising logits (module docstring).

    Differentiable in ``q, k, v`` through ``jax.custom_vjp`` with Pallas dK/dV and dQ kernels;
    ``segment_ids`` and ``alibi_slopes`` are constants.

    Args:
      q, k: queries and keys, ``M = sum(ranks)`` channels per head, level 0 (global) first.
      v: values (any head dim).
      ranks: ``r_l`` per level.
      causal: keys at positions ``<=`` the query's only.
      normalize: ``None``, ``"levels"`` (divide by L) or ``"block_levels"`` (by the number of
        levels covering the pair).
      segment_ids: document ids of packed rows; a query sees only keys of its own document.
      alibi_slopes: ALiBi slopes per head, ``-slope_h · |i - j|`` added after the MLR logits.
      logit_scale: extra multiplier of every MLR logit.
      block_len: the level-0 block (default ``T``); ``T`` must be a multiple of it, and pairs in
        different level-0 blocks are not scored (``jaxlab.nn.mlr_attention`` pads to it).
      block_sizes: kernel tiles; default :meth:`BlockSizes.for_backend`, on a native GPU shrunk
        until their shared-memory estimate fits the device (:mod:`pallas_kernels.fit`).
      interpret: run the Pallas interpreter; ``None`` means exactly when on CPU.
      backend: ``"gpu"`` (Triton) or ``"tpu"`` (Mosaic) kernel style; ``None`` follows the
        default backend (the GPU style on CPU).

    Raises:
      KernelConfigError: shapes or ranks that do not fit, tiles that do not divide the finest
        level's block, or a native kernel asked for on another platform.
    """
    B, T, H, M = q.shape if q.ndim == 4 else (0, 0, 0, 0)
    block_len = T if block_len is None else int(block_len)
    ranks = _check(q, k, v, ranks, normalize, segment_ids, alibi_slopes, block_len)
    style, interpret = resolve_backend(backend, interpret)
    if block_sizes is None:
        width = max(16, pow2_at_least(max(M, v.shape[-1])))
        native_gpu = style == "gpu" and not interpret
        block_sizes = (
            BlockSizes.fitted(width, q.dtype) if native_gpu else BlockSizes.for_backend(style)
        )
    if not isinstance(block_sizes, BlockSizes):
        raise KernelConfigError(f"block_sizes must be a BlockSizes, got {type(block_sizes)}")
    L, E = len(ranks), v.shape[-1]
    tiles = _tiles(
        block_sizes, block_len >> (L - 1), style, not interpret, L, segment_ids is not None
    )
    if style == "gpu":  # Triton tiles are powers of two >= 16: zero channels pad both head dims
        Mp, Ep = max(16, pow2_at_least(M)), max(16, pow2_at_least(E))
        chunk = min(block_sizes.block_d, Mp)
    else:  # a head of at most block_d channels is one chunk (the MXU contracts 128 at a time)
        chunk = min(block_sizes.block_d, M)
        Mp, Ep = round_up(M, chunk), E
    # Pre-scale level l's query channels by logit_scale / r_l (and 1/L for "levels"), in float32.
    per_level = np.concatenate([np.full(r, 1.0 / r) for r in ranks]) * logit_scale
    if normalize == "levels":
        per_level = per_level / L
    q = (q.astype(F32) * per_level.astype(np.float32)).astype(q.dtype)
    factors = tuple(1.0 / (c + 1) if normalize == "block_levels" else 1.0 for c in range(L))

    def to_bhtd(x, width):
        x = jnp.swapaxes(x, 1, 2)
        return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, width - x.shape[-1])))

    seg_q = seg_k = None
    if segment_ids is not None:
        seg = segment_ids.astype(jnp.int32)
        seg_q, seg_k = seg[:, :, None], seg[:, None, :]
    slopes = None if alibi_slopes is None else alibi_slopes.astype(F32)
    cfg = _Static(
        **tiles,
        chunk=chunk,
        widths=tuple(int(w) for w in np.cumsum(ranks)),
        factors=factors,
        block_len=block_len,
        causal=bool(causal),
        has_seg=seg_q is not None,
        has_alibi=slopes is not None,
        style=style,
        interpret=interpret,
        precision=f32_precision(style, interpret),
    )
    o = _mlr(to_bhtd(q, Mp), to_bhtd(k, Mp), to_bhtd(v, Ep), seg_q, seg_k, slopes, cfg)
    return jnp.swapaxes(o[..., :E], 1, 2)


def mlr_attention_reference(
    q: Float[Array, "B T H M"],
    k: Float[Array, "B T H M"],
    v: Float[Array, "B T H E"],
    *,
    ranks: Sequence[int],
    causal: bool = True,
    normalize: str | None = None,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    logit_scale: float = 1.0,
    block_len: int | None = None,
) -> Float[Array, "B T H E"]:
    """The dense construction in plain jnp: one masked ``(B, H, T, T)`` logit matrix per level in
    float32 (float64 for float64 inputs), summed, normalised, masked (pairs no level covers too)
    and soft-maxed."""
    T, L = q.shape[1], len(ranks)
    acc = jnp.promote_types(jnp.result_type(q, k, v), F32)
    block_len = T if block_len is None else block_len
    pos = jnp.arange(T)
    s = jnp.zeros((q.shape[0], q.shape[2], T, T), acc)
    count = jnp.zeros((T, T), acc)
    start = 0
    for level, r in enumerate(ranks):
        size = block_len >> level
        same = (pos[:, None] // size) == (pos[None, :] // size)
        s_l = jnp.einsum(
            "bthm,bshm->bhts", q[..., start : start + r], k[..., start : start + r],
            preferred_element_type=acc,
        )  # fmt: skip
        s, count, start = s + jnp.where(same, s_l / r, 0.0), count + same, start + r
    if normalize == "levels":
        s = s / L
    elif normalize == "block_levels":
        s = s / jnp.maximum(count, 1.0)
    s = s * logit_scale
    if alibi_slopes is not None:
        s = s - alibi_slopes.astype(acc)[None, :, None, None] * jnp.abs(pos[:, None] - pos)
    keep = (count > 0)[None, None]
    if causal:
        keep &= (pos[:, None] >= pos[None, :])[None, None]
    if segment_ids is not None:
        keep &= (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]
    p = jax.nn.softmax(jnp.where(keep, s, MASK_VALUE), axis=-1)
    return jnp.einsum("bhts,bshe->bthe", p.astype(v.dtype), v).astype(v.dtype)
