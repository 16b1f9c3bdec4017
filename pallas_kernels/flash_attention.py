"""Flash attention in Pallas: tiled online-softmax forward and dQ / dK-dV backward kernels.

Implements FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism
and Work Partitioning"): the forward pass (Alg. 1) keeps a running row maximum ``m`` and sum ``l``
per query block while it streams key/value blocks, and saves the log-sum-exp ``L = m + log l``; the
backward pass (Alg. 2) recomputes the probabilities from ``L`` and is split, as the paper suggests
(Sec. 3.1.2), into a kernel that owns a key block and accumulates ``dK, dV`` over query blocks and
one that owns a query block and accumulates ``dQ`` over key blocks, so neither needs atomics.
Options: causal masking (skipped blocks are not computed), document masking by segment ids, ALiBi
(Press et al. 2022, Sec. 3: ``-slope_h * |i - j|`` added to the logits), and grouped/multi-query
attention (Ainslie et al. 2023: query head ``h`` reads kv head ``h // (H // K)``). Lengths that are
not a multiple of the block are padded and the padded keys masked exactly. Queries are aligned to
the end of the keys (query ``i`` sits at position ``i + S - T``), like ``jaxlab.nn.attention``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
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

__all__ = ["BlockSizes", "flash_attention", "flash_attention_reference"]
TILES = ("block_q", "block_k", "block_q_dkv", "block_k_dkv", "block_q_dq", "block_k_dq")
# float32 dots of the native GPU kernels by default: three TF32 passes on the tensor cores, as
# accurate as plain float32 FMAs (HIGHEST, Triton's "ieee") and far faster on the H200 run of
# pallas_kernels/README.md, where the FMA path was the float32 pathology of issue 46.
GPU_F32_DOT = lax.DotAlgorithmPreset.TF32_TF32_F32_X3


def _gpu_default(style: Style):
    return GPU_F32_DOT if style == "gpu" else None


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes (powers of two) of the forward, dK/dV and dQ kernels.

    ``block_q*`` tile the queries, ``block_k*`` the keys. Inputs shorter than a block shrink it to
    the next power of two that covers them. The defaults suit an H100/H200 with head dim <= 128;
    :meth:`for_backend` gives TPU tiles whose key axis fills the 128 vector lanes.
    """

    block_q: int = 128
    block_k: int = 64
    block_q_dkv: int = 64
    block_k_dkv: int = 64
    block_q_dq: int = 64
    block_k_dq: int = 64
    # GPU only: warps per program (None: 4 for head dims <= 64, else 8) and software-pipelining
    # depth of the streamed tiles.
    num_warps: int | None = None
    num_stages: int = 2

    def __post_init__(self) -> None:
        for name in TILES:
            check_power_of_two("BlockSizes", name, getattr(self, name))
        if self.num_warps is not None:
            check_power_of_two("BlockSizes", "num_warps", self.num_warps, minimum=1)
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise KernelConfigError(f"BlockSizes.num_stages={self.num_stages!r} must be >= 1")

    @classmethod
    def for_backend(cls, backend: Style) -> BlockSizes:
        return cls() if backend == "gpu" else cls(128, 128, 128, 128, 128, 128)

    @classmethod
    def for_gpu(cls, head_dim: int, dtype) -> BlockSizes:
        """The shipped GPU tiles, by what the H200 run of pallas_kernels/README.md measured: at
        head dims above 64 (bf16) 64-row tiles everywhere with 4 warps were faster, forward and
        backward, than the 128-row forward with 8 warps; float32 queries in blocks of 64."""
        if jnp.dtype(dtype) == jnp.float32:
            return cls(block_q=64)
        return cls(64, 64, 64, 64, 64, 64, num_warps=4) if head_dim > 64 else cls()

    @classmethod
    def fitted(cls, head_dim: int, dtype) -> BlockSizes:
        """The GPU defaults (:meth:`for_gpu`), tiles halved until every program's shared-memory
        estimate at this (padded) head dim and dtype fits the device (:mod:`pallas_kernels.fit`)."""
        return fit.fit_attention(
            cls.for_gpu(head_dim, dtype),
            lambda b: fit.flash_attention_bytes(b, head_dim, dtype, b.num_stages),
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
    causal: bool
    scale: float
    offset: int  # S - T: query i sits at key position i + offset
    kv_len: int  # valid keys; positions >= kv_len are padding
    kv_padded: bool
    has_seg: bool
    has_alibi: bool
    groups: int  # query heads per kv head
    style: Style
    interpret: bool
    precision: object  # of the float32 dots (_common.f32_precision)
    num_warps: int | None
    num_stages: int


# ------------------------------------------------------------------------------------ tile maths


def _scores(q, k, q_start, k_start, seg_q, seg_k, slope, cfg: _Static):
    """Masked logits ``scale · q kᵀ (+ ALiBi)`` of one (query block, key block) tile, and the
    mask of real (non-padding) keys, or None when nothing is padded."""
    s = dot(q, k, (1, 1), cfg.precision) * cfg.scale
    q_pos = q_start + cfg.offset + lax.broadcasted_iota(jnp.int32, s.shape, 0)
    k_pos = k_start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    if slope is not None:
        s = s - slope * jnp.abs(q_pos - k_pos).astype(F32)
    mask = q_pos >= k_pos if cfg.causal else None
    if seg_q is not None:
        same = seg_q == seg_k  # (bq, 1) == (1, bk)
        mask = same if mask is None else jnp.logical_and(mask, same)
    key_valid = None
    if cfg.kv_padded:  # padding keys are masked (they must not raise the running max) and their
        key_valid = k_pos < cfg.kv_len  # probabilities zeroed (padded query rows stay finite)
        mask = key_valid if mask is None else jnp.logical_and(mask, key_valid)
    if mask is not None:
        s = jnp.where(mask, s, MASK_VALUE)
    return s, key_valid


def _probs(s_minus_max, key_valid):
    p = jnp.exp(s_minus_max)
    return p if key_valid is None else jnp.where(key_valid, p, 0.0)


def _kv_hi(cfg: _Static, i, bq: int, bk: int, nk: int):
    """Number of key blocks query block ``i`` needs (causal: up to its last query's position)."""
    if not cfg.causal:
        return nk
    # offset = S - T >= 0 (causal needs T <= S), so the dividend is non-negative.
    return jnp.minimum(div((i + 1) * bq - 1 + cfg.offset, bk) + 1, nk)


def _q_lo(cfg: _Static, j, bq: int, bk: int):
    """First query block that sees key block ``j`` (causal), else 0."""
    if not cfg.causal:
        return 0
    return div(jnp.maximum(j * bk - cfg.offset, 0), bq)


# --------------------------------------------------------------------------------------- kernels


def _fwd_kernel(*refs, cfg: _Static):
    """FlashAttention-2 Alg. 1 for one (batch, head, query block)."""
    (q_ref, k_ref, v_ref), seg_q_ref, seg_k_ref, slopes_ref, rest = split_refs(refs, 3, cfg)
    o_ref, lse_ref, *scratch = rest
    h, i = pl.program_id(1), pl.program_id(2)
    bq, bk = cfg.block_q, cfg.block_k
    q_TE = q_ref[...]
    seg_q = None if seg_q_ref is None else seg_q_ref[...]
    slope = None if slopes_ref is None else slopes_ref[h]

    def step(j, carry):
        m_T1, l_T1, acc_TE = carry
        k_SE = load_tile(k_ref, j, bk, cfg.style)
        v_SE = load_tile(v_ref, j, bk, cfg.style)
        seg_k = None if seg_k_ref is None else load_tile(seg_k_ref, j, bk, cfg.style, axis=1)
        s_TS, key_valid = _scores(q_TE, k_SE, i * bq, j * bk, seg_q, seg_k, slope, cfg)
        m_new = jnp.maximum(m_T1, jnp.max(s_TS, axis=1, keepdims=True))
        p_TS = _probs(s_TS - m_new, key_valid)
        correction = jnp.exp(m_T1 - m_new)  # rescales what was summed under the old maximum
        l_new = correction * l_T1 + jnp.sum(p_TS, axis=1, keepdims=True)
        acc_new = correction * acc_TE + dot(p_TS.astype(v_SE.dtype), v_SE, (1, 0), cfg.precision)
        return m_new, l_new, acc_new

    def init():
        return (
            jnp.full((bq, 1), -jnp.inf, F32),
            jnp.zeros((bq, 1), F32),
            jnp.zeros(q_TE.shape, F32),
        )

    def finalize(carry):
        m_T1, l_T1, acc_TE = carry
        o_ref[...] = (acc_TE / l_T1).astype(o_ref.dtype)  # one division at the end (FA-2 Sec. 3.1)
        lse_ref[...] = m_T1 + jnp.log(l_T1)

    nk = k_ref.shape[0] // bk if cfg.style == "gpu" else pl.num_programs(3)
    hi = _kv_hi(cfg, i, bq, bk, nk)
    reduce_blocks(step, init, finalize, lo=0, hi=hi, style=cfg.style, scratch=scratch, axis=3)


def _dkv_kernel(*refs, cfg: _Static):
    """FlashAttention-2 Alg. 2, loop over query blocks: dK, dV of one (batch, q head, key block)."""
    main, seg_q_ref, seg_k_ref, slopes_ref, rest = split_refs(refs, 6, cfg)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = main
    dk_ref, dv_ref, *scratch = rest
    h, j = pl.program_id(1), pl.program_id(2)
    bq, bk = cfg.block_q_dkv, cfg.block_k_dkv
    k_SE, v_SE = k_ref[...], v_ref[...]
    seg_k = None if seg_k_ref is None else seg_k_ref[...]
    slope = None if slopes_ref is None else slopes_ref[h]

    def step(i, carry):
        dk_SE, dv_SE = carry
        q_TE = load_tile(q_ref, i, bq, cfg.style)
        do_TE = load_tile(do_ref, i, bq, cfg.style)
        lse_T1 = load_tile(lse_ref, i, bq, cfg.style)
        delta_T1 = load_tile(delta_ref, i, bq, cfg.style)
        seg_q = None if seg_q_ref is None else load_tile(seg_q_ref, i, bq, cfg.style)
        s_TS, key_valid = _scores(q_TE, k_SE, i * bq, j * bk, seg_q, seg_k, slope, cfg)
        p_TS = _probs(s_TS - lse_T1, key_valid)  # the forward's probabilities, recomputed
        # Pᵀ dO (explicit .T: Mosaic)
        dv_SE = dv_SE + dot(p_TS.T.astype(do_TE.dtype), do_TE, (1, 0), cfg.precision)
        dp_TS = dot(do_TE, v_SE, (1, 1), cfg.precision)
        ds_TS = p_TS * (dp_TS - delta_T1)  # softmax backward: dS = P ∘ (dP - rowsum(dO ∘ O))
        dk_SE = dk_SE + dot(ds_TS.T.astype(q_TE.dtype), q_TE, (1, 0), cfg.precision)
        return dk_SE, dv_SE

    def init():
        return jnp.zeros(k_SE.shape, F32), jnp.zeros(v_SE.shape, F32)

    def finalize(carry):
        dk_ref[...] = (carry[0] * cfg.scale).astype(dk_ref.dtype)
        dv_ref[...] = carry[1].astype(dv_ref.dtype)

    nq = q_ref.shape[0] // bq if cfg.style == "gpu" else pl.num_programs(3)
    lo = _q_lo(cfg, j, bq, bk)
    reduce_blocks(step, init, finalize, lo=lo, hi=nq, style=cfg.style, scratch=scratch, axis=3)


def _dq_kernel(*refs, cfg: _Static):
    """FlashAttention-2 Alg. 2, dQ part, owned by one (batch, head, query block): no atomics."""
    main, seg_q_ref, seg_k_ref, slopes_ref, rest = split_refs(refs, 6, cfg)
    q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = main
    dq_ref, *scratch = rest
    h, i = pl.program_id(1), pl.program_id(2)
    bq, bk = cfg.block_q_dq, cfg.block_k_dq
    q_TE, do_TE, lse_T1, delta_T1 = q_ref[...], do_ref[...], lse_ref[...], delta_ref[...]
    seg_q = None if seg_q_ref is None else seg_q_ref[...]
    slope = None if slopes_ref is None else slopes_ref[h]

    def step(j, carry):
        (dq_TE,) = carry
        k_SE = load_tile(k_ref, j, bk, cfg.style)
        v_SE = load_tile(v_ref, j, bk, cfg.style)
        seg_k = None if seg_k_ref is None else load_tile(seg_k_ref, j, bk, cfg.style, axis=1)
        s_TS, key_valid = _scores(q_TE, k_SE, i * bq, j * bk, seg_q, seg_k, slope, cfg)
        p_TS = _probs(s_TS - lse_T1, key_valid)
        ds_TS = p_TS * (dot(do_TE, v_SE, (1, 1), cfg.precision) - delta_T1)
        return (dq_TE + dot(ds_TS.astype(k_SE.dtype), k_SE, (1, 0), cfg.precision),)

    def finalize(carry):
        dq_ref[...] = (carry[0] * cfg.scale).astype(dq_ref.dtype)

    nk = k_ref.shape[0] // bk if cfg.style == "gpu" else pl.num_programs(3)
    hi = _kv_hi(cfg, i, bq, bk, nk)
    init = lambda: (jnp.zeros(q_TE.shape, F32),)
    reduce_blocks(step, init, finalize, lo=0, hi=hi, style=cfg.style, scratch=scratch, axis=3)


# ------------------------------------------------------------------------------- pallas_calls


def _call(kernel, cfg: _Static, *, rows, stream, q_side: bool, **kwargs):
    """One kernel through :func:`~pallas_kernels._common.attention_call`, kv heads grouped
    (GQA). ``q_side`` says whether the streamed blocks are query blocks; on TPU a causal mask's
    skipped blocks are not fetched (the streamed index is clamped, so the last one repeats)."""
    row_block, (stream_block, n_stream) = rows[0], stream

    def clamp(r, s):
        if not cfg.causal:
            return s
        if q_side:
            return jnp.maximum(s, _q_lo(cfg, r, stream_block, row_block))
        return jnp.minimum(s, _kv_hi(cfg, r, row_block, stream_block, n_stream) - 1)

    return attention_call(
        kernel, cfg, rows=rows, stream=stream, clamp=clamp, groups=cfg.groups, **kwargs
    )


def _forward(q, k, v, seg_q, seg_k, slopes, cfg: _Static):
    B, H, Tp, E = q.shape
    bq, bk = cfg.block_q, cfg.block_k
    extra, extra_roles = extra_inputs(seg_q, seg_k, slopes, row_is_q=True)
    out_shape = [
        jax.ShapeDtypeStruct(q.shape, q.dtype),
        jax.ShapeDtypeStruct((B, H, Tp, 1), F32),
    ]
    return _call(
        _fwd_kernel, cfg, rows=(bq, Tp // bq), stream=(bk, k.shape[2] // bk), q_side=False,
        arrays=[q, k, v, *extra], roles=["row", "stream_kv", "stream_kv", *extra_roles],
        out_shape=out_shape, out_roles=["row", "row"],
        scratch=[(bq, 1), (bq, 1), (bq, E)], name="flash_attention_fwd",
    )  # fmt: skip


def _backward(cfg: _Static, arrays, seg_q, seg_k, slopes):
    """dQ, dK, dV from the kernels' inputs ``[q, k, v, dO, L, delta]`` (FA-2 Alg. 2)."""
    q, k, v = arrays[:3]
    B, H, Tp, E = q.shape
    K, Sp = k.shape[1], k.shape[2]
    extra, extra_roles = extra_inputs(seg_q, seg_k, slopes, row_is_q=False)
    bq, bk = cfg.block_q_dkv, cfg.block_k_dkv
    # dK, dV per *query* head (f32), summed over each kv head's group below (GQA).
    dk, dv = _call(
        _dkv_kernel, cfg, rows=(bk, Sp // bk), stream=(bq, Tp // bq), q_side=True,
        arrays=arrays + extra,
        roles=["stream", "row_kv", "row_kv", "stream", "stream", "stream", *extra_roles],
        out_shape=[jax.ShapeDtypeStruct((B, H, Sp, E), F32)] * 2, out_roles=["row", "row"],
        scratch=[(bk, E), (bk, E)], name="flash_attention_dkv",
    )  # fmt: skip
    extra, extra_roles = extra_inputs(seg_q, seg_k, slopes, row_is_q=True)
    bq, bk = cfg.block_q_dq, cfg.block_k_dq
    (dq,) = _call(
        _dq_kernel, cfg, rows=(bq, Tp // bq), stream=(bk, Sp // bk), q_side=False,
        arrays=arrays + extra,
        roles=["row", "stream_kv", "stream_kv", "row", "row", "row", *extra_roles],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype)], out_roles=["row"],
        scratch=[(bq, E)], name="flash_attention_dq",
    )  # fmt: skip
    dk = dk.reshape(B, K, H // K, Sp, E).sum(axis=2).astype(k.dtype)
    dv = dv.reshape(B, K, H // K, Sp, E).sum(axis=2).astype(v.dtype)
    return dq, dk, dv


_flash = attention_vjp(_forward, _backward)


# ------------------------------------------------------------------------------ public wrapper


def flash_attention(
    q: Float[Array, "B T H E"],
    k: Float[Array, "B S K E"],
    v: Float[Array, "B S K E"],
    *,
    causal: bool = False,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    scale: float | None = None,
    block_sizes: BlockSizes | None = None,
    interpret: bool | None = None,
    backend: Style | None = None,
    precision=None,
) -> Float[Array, "B T H E"]:
    """Softmax attention ``softmax(scale · q kᵀ + bias + mask) v`` without materialising logits.

    Differentiable in ``q, k, v`` through ``jax.custom_vjp`` with the FlashAttention-2 backward
    kernels (Dao 2023, Alg. 2); ``segment_ids`` and ``alibi_slopes`` are constants (no gradient).

    Args:
      q: queries; ``k``, ``v``: keys and values with ``K`` heads, ``K`` dividing ``H``.
      causal: query ``i`` sees keys at positions ``<= i + S - T``.
      segment_ids: document ids of packed rows; a query sees only keys of its own document.
      alibi_slopes: per-head ALiBi slopes, bias ``-slope_h · |i - j|`` (Press et al. 2022).
      scale: logit scale, default ``E ** -0.5``.
      block_sizes: kernel tiles; default :meth:`BlockSizes.for_backend`, on a native GPU shrunk
        until their shared-memory estimate fits the device (:mod:`pallas_kernels.fit`).
      interpret: run the Pallas interpreter; ``None`` means exactly when on CPU.
      backend: ``"gpu"`` (Triton) or ``"tpu"`` (Mosaic) kernel style; ``None`` follows the
        default backend (the GPU style on CPU).
      precision: of the float32 inputs' dots in a native kernel, any value ``lax.dot_general``
        takes (e.g. ``lax.DotAlgorithmPreset.TF32_TF32_F32``, a single TF32 pass as XLA's default
        float32 dot on GPUs); ``None`` means float32 accuracy: :data:`GPU_F32_DOT` (three TF32
        passes) on native GPUs, ``HIGHEST`` elsewhere. The interpreter computes float32 dots
        exactly.

    Raises:
      KernelConfigError: for shapes that do not fit, bad block sizes, or a native kernel asked for
        on another platform.
    """
    check_qkv(
        "flash_attention", q, k, v, causal=causal, segment_ids=segment_ids,
        alibi_slopes=alibi_slopes,
    )  # fmt: skip
    style, interpret = resolve_backend(backend, interpret)
    B, T, H, E = q.shape
    S, K = k.shape[1], k.shape[2]
    # Triton loads need power-of-two tiles of at least 16: pad the head dim with zeros.
    Ep = max(16, pow2_at_least(E)) if style == "gpu" else E
    if block_sizes is None:
        native_gpu = style == "gpu" and not interpret
        block_sizes = (
            BlockSizes.fitted(Ep, q.dtype) if native_gpu else BlockSizes.for_backend(style)
        )
    if not isinstance(block_sizes, BlockSizes):
        raise KernelConfigError(f"block_sizes must be a BlockSizes, got {type(block_sizes)}")
    blocks = {name: getattr(block_sizes, name) for name in TILES}
    if style == "gpu" and not interpret and min(blocks.values()) < 16:
        raise KernelConfigError(f"native GPU kernels need blocks >= 16 (tl.dot); got {blocks}")
    # Shrink blocks to short inputs, then pad the lengths to a multiple of every block.
    for name, size in blocks.items():
        blocks[name] = min(size, pow2_at_least(T if name.startswith("block_q") else S))
    if style == "tpu" and not interpret:
        for name, size in blocks.items():
            full = pow2_at_least(T if name.startswith("block_q") else S)
            if name.startswith("block_k") and size < min(128, full):
                raise KernelConfigError(f"native TPU kernels need {name} >= 128; got {size}")
    Tp = round_up(T, max(v for n, v in blocks.items() if n.startswith("block_q")))
    Sp = round_up(S, max(v for n, v in blocks.items() if n.startswith("block_k")))

    def to_bhld(x, length):
        x = jnp.swapaxes(x, 1, 2)
        return jnp.pad(x, ((0, 0), (0, 0), (0, length - x.shape[2]), (0, Ep - E)))

    seg_q = seg_k = None
    if segment_ids is not None:  # T == S, but each side pads to its own length (Tp, Sp differ)
        seg = segment_ids.astype(jnp.int32)
        pad = lambda length: jnp.pad(seg, ((0, 0), (0, length - T)), constant_values=-1)  # noqa: E731
        seg_q, seg_k = pad(Tp)[:, :, None], pad(Sp)[:, None, :]
    slopes = None if alibi_slopes is None else alibi_slopes.astype(F32)
    cfg = _Static(
        **blocks,
        causal=bool(causal),
        scale=float(E**-0.5 if scale is None else scale),
        offset=S - T,
        kv_len=S,
        kv_padded=Sp != S,
        has_seg=seg_q is not None,
        has_alibi=slopes is not None,
        groups=H // K,
        style=style,
        interpret=interpret,
        precision=f32_precision(
            style, interpret, _gpu_default(style) if precision is None else precision
        ),
        num_warps=block_sizes.num_warps,
        num_stages=block_sizes.num_stages,
    )
    o = _flash(to_bhld(q, Tp), to_bhld(k, Sp), to_bhld(v, Sp), seg_q, seg_k, slopes, cfg)
    return jnp.swapaxes(o[:, :, :T, :E], 1, 2)


def flash_attention_reference(
    q: Float[Array, "B T H E"],
    k: Float[Array, "B S K E"],
    v: Float[Array, "B S K E"],
    *,
    causal: bool = False,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    scale: float | None = None,
) -> Float[Array, "B T H E"]:
    """The same attention in plain jnp with explicit ``(B, H, T, S)`` logits in float32 (float64
    for float64 inputs: the reference is as accurate as its inputs; the kernel is float32)."""
    B, T, H, E = q.shape
    acc = jnp.promote_types(jnp.result_type(q, k, v), F32)
    S, K = k.shape[1], k.shape[2]
    scale = E**-0.5 if scale is None else scale
    k_BSHE = jnp.repeat(k, H // K, axis=2)
    v_BSHE = jnp.repeat(v, H // K, axis=2)
    s_BHTS = jnp.einsum("bthe,bshe->bhts", q, k_BSHE, preferred_element_type=acc) * scale
    i, j = jnp.arange(T)[:, None] + S - T, jnp.arange(S)[None, :]
    if alibi_slopes is not None:
        s_BHTS -= alibi_slopes.astype(acc)[:, None, None] * jnp.abs(i - j).astype(acc)
    keep = jnp.ones((B, 1, T, S), bool)
    if causal:
        keep &= i >= j
    if segment_ids is not None:
        keep &= (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]
    p_BHTS = jax.nn.softmax(jnp.where(keep, s_BHTS, MASK_VALUE), axis=-1)
    return jnp.einsum("bhts,bshe->bthe", p_BHTS.astype(v.dtype), v_BSHE).astype(q.dtype)
