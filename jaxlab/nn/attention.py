"""The one attention dispatch that every jaxlab model calls.

``dot_product_attention(q, k, v, *, causal, segment_ids, alibi_slopes, scale, impl)`` takes
``(B, T, H, E)`` queries and ``(B, S, K, E)`` keys/values (``K`` divides ``H``: grouped-query and
multi-query attention) and picks an implementation from :class:`AttentionImpl`:

* ``xla`` — the reference: explicit logits in the accumulation dtype (:func:`accumulation_dtype`:
  float32, or float64 for float64 inputs), masks, softmax (Vaswani et al. 2017, eq. 1).
* ``xla_chunked`` — keys in chunks under ``lax.scan`` with an online softmax (Rabe & Staats 2021,
  "Self-attention does not need O(n^2) memory"; the running max/sum of FlashAttention-2, Dao 2023,
  Alg. 1) and a ``custom_vjp`` that recomputes each chunk from the saved log-sum-exp (Alg. 2), so
  memory grows linearly with T in the forward and the backward pass.
* ``pallas`` — :func:`pallas_kernels.flash_attention` (Triton on GPU, Mosaic on TPU, the Pallas
  interpreter on CPU: correct there, but slow).
* ``cudnn`` — ``jax.nn.dot_product_attention(implementation="cudnn")`` on NVIDIA GPUs.

``impl="auto"`` resolves through :func:`default_impl` (one place, one rule): the XLA reference below
:data:`CHUNKED_MIN_SEQ_LEN` keys and the chunked path from there; Pallas on GPU and TPU once
the repo-wide switch :func:`jaxlab.nn.pallas_switch.pallas_ready` says so (``JAXLAB_PALLAS``). The
CPU never picks Pallas (it only interprets).

Masks: ``causal`` keeps keys at positions ``<=`` the query's; ``segment_ids`` (B, T) keeps only
pairs in the same document (packed rows); ``alibi_slopes`` (H,) adds ``-slope_h * |i - j|`` to the
logits (Press et al. 2022, "Train Short, Test Long", Sec. 3). Queries sit at the end of the keys
(query ``i`` at position ``i + S - T``), so causal attention needs ``T <= S``: with more queries
than keys the first ``T - S`` queries would see no key at all, and every implementation refuses
that with a :class:`~jaxlab.core.errors.ConfigError`. Shapes are checked once, by
:func:`check_qkv` (the q/k/v check the Pallas kernels use too, :func:`pallas_kernels.check_qkv`).
"""

from __future__ import annotations

import enum
import functools
import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

import pallas_kernels
from jaxlab.core.errors import ConfigError
from jaxlab.nn.pallas_switch import pallas_ready

__all__ = [
    "CHUNKED_MIN_SEQ_LEN",
    "AttentionImpl",
    "alibi_slopes",
    "accumulation_dtype",
    "check_qkv",
    "default_impl",
    "dot_product_attention",
    "xla_attention",
    "xla_chunked_attention",
]

# From this many keys on, "auto" on CPU takes the chunked path: the reference's float32 logits are
# B·H·T·S·4 bytes, 16 MiB per (batch, head) at 2048 — past the caches, and 1 GiB for B·H = 64.
CHUNKED_MIN_SEQ_LEN = 2048
# Keys per chunk of the chunked path: (B, H, T, 512) float32 logits live at a time.
CHUNK_SIZE = 512

_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: fully masked rows stay NaN-free


def accumulation_dtype(*xs) -> jnp.dtype:
    """The dtype attention accumulates logits, softmax and sums in: float32 for bfloat16 and
    float32 inputs, float64 for float64 ones (x64), as the OT solvers do, so a float64 input gets
    a float64-accurate result instead of one rounded through float32."""
    return jnp.promote_types(jnp.result_type(*xs), jnp.float32)


class AttentionImpl(enum.StrEnum):
    """Attention implementations behind :func:`dot_product_attention`."""

    AUTO = "auto"
    XLA = "xla"
    XLA_CHUNKED = "xla_chunked"
    PALLAS = "pallas"
    CUDNN = "cudnn"


def default_impl(platform: str | None = None, seq_len: int | None = None) -> AttentionImpl:
    """The implementation ``impl="auto"`` uses on ``platform`` for ``seq_len`` keys.

    The design is Pallas flash attention on GPU and TPU (it takes ALiBi and document masks, which
    cuDNN's fused kernel does not), once the repo-wide switch
    (:func:`jaxlab.nn.pallas_switch.pallas_ready`) allows it: until the native kernels are verified
    on hardware (``PALLAS_VERIFIED_ON_HARDWARE``; ``scripts/gpu_bench.sh`` runs the checks) the
    accelerators use the XLA path: the chunked one for long sequences, the reference otherwise; pass
    ``impl="pallas"``, or set ``JAXLAB_PALLAS=on``, to opt in. On CPU,
    where Pallas only interprets, the XLA reference for short sequences and the chunked XLA path
    from :data:`CHUNKED_MIN_SEQ_LEN` keys on (memory linear in T).

    Args:
      platform: ``"cpu"``, ``"gpu"``, ``"tpu"``; default ``jax.default_backend()``.
      seq_len: number of keys; ``None`` counts as short.
    """
    if pallas_ready(platform, "flash_attention"):
        return AttentionImpl.PALLAS
    if seq_len is not None and seq_len >= CHUNKED_MIN_SEQ_LEN:
        return AttentionImpl.XLA_CHUNKED
    return AttentionImpl.XLA


def alibi_slopes(
    num_heads: int, kind: Literal["press", "geometric"] = "press"
) -> Float[Array, " H"]:
    """ALiBi head slopes (Press et al. 2022, "Train Short, Test Long", Sec. 3).

    Both kinds give the geometric sequence ``2^(-8h/H)``, h = 1..H, when H is a power of two; they
    differ for other head counts:

    * ``"press"`` — the paper's recipe: the sequence of the largest power of two ``P <= H``, then
      every other slope of the sequence for ``2P`` until there are H (the reference code's
      interleaving);
    * ``"geometric"`` — one geometric sequence from ``2^(-8/H)`` down to ``2^(-8)`` over the H
      heads (``geomspace``), the choice of the RMT authors' code for both of their models
      (github.com/bmac3/residual-matrix-transformer, ``make_attn_bias``).

    Raises:
      ConfigError: ``num_heads < 1`` or an unknown ``kind``.
    """
    if num_heads < 1:
        raise ConfigError(f"ALiBi needs at least one head, got {num_heads}")
    if kind == "geometric":
        return np.geomspace(2.0 ** (-8.0 / num_heads), 2.0**-8, num_heads).astype(np.float32)
    if kind != "press":
        raise ConfigError(f"unknown ALiBi slopes {kind!r}; choose 'press' or 'geometric'")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest)
    if closest < num_heads:
        slopes += power_of_two(2 * closest)[0::2][: num_heads - closest]
    return np.asarray(slopes, np.float32)


def check_qkv(
    q, k, v, *, owner: str = "attention", causal=False, segment_ids=None, alibi_slopes=None,
    grouped: bool = True,
) -> None:  # fmt: skip
    """:func:`pallas_kernels.check_qkv` (the one q/k/v check of every attention entry point, the
    kernels' included) raising :class:`ConfigError`; ``grouped=False`` for MLR attention."""
    try:
        pallas_kernels.check_qkv(
            owner, q, k, v, causal=causal, segment_ids=segment_ids, alibi_slopes=alibi_slopes,
            grouped=grouped,
        )  # fmt: skip
    except pallas_kernels.KernelConfigError as err:
        raise ConfigError(str(err)) from None


def xla_attention(
    q_BTHE: Float[Array, "B T H E"],
    k_BSKE: Float[Array, "B S K E"],
    v_BSKE: Float[Array, "B S K E"],
    *,
    causal: bool,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    scale: float | None = None,
) -> Float[Array, "B T H E"]:
    """Reference attention: logits and softmax in :func:`accumulation_dtype` (float32 at least),
    output in v's dtype."""
    B, T, H, E = q_BTHE.shape
    acc = accumulation_dtype(q_BTHE, k_BSKE, v_BSKE)
    S, K = k_BSKE.shape[1], k_BSKE.shape[2]
    scale = E**-0.5 if scale is None else scale
    q_BTKGE = q_BTHE.reshape(B, T, K, H // K, E)  # query heads grouped per kv head (GQA)
    logits_BKGTS = (
        jnp.einsum("btkge,bske->bkgts", q_BTKGE, k_BSKE, preferred_element_type=acc) * scale
    )
    logits_BHTS = logits_BKGTS.reshape(B, H, T, S)
    q_pos, k_pos = jnp.arange(T)[:, None] + (S - T), jnp.arange(S)[None, :]
    if alibi_slopes is not None:
        distance_TS = jnp.abs(q_pos - k_pos).astype(acc)
        logits_BHTS -= alibi_slopes.astype(acc)[None, :, None, None] * distance_TS
    mask = jnp.ones((1, 1, T, S), bool)
    if causal:
        mask &= (q_pos >= k_pos)[None, None]
    if segment_ids is not None:
        if S != T:
            raise ConfigError("attention: segment_ids need equal query and key lengths")
        mask &= (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]
    logits_BHTS = jnp.where(mask, logits_BHTS, _MASK_VALUE)
    probs_BHTS = jax.nn.softmax(logits_BHTS, axis=-1).astype(v_BSKE.dtype)
    probs_BKGTS = probs_BHTS.reshape(B, K, H // K, T, S)
    out_BTKGE = jnp.einsum("bkgts,bske->btkge", probs_BKGTS, v_BSKE)
    return out_BTKGE.reshape(B, T, H, E)


def _chunk_logits(q_BKGTE, k_BCKE, start, seg_BT, seg_BC, slopes_KG, cfg):
    """Masked logits ``(B, K, G, T, C)`` of all queries against one key chunk; padding keys are
    masked and reported in ``valid_C`` so their probabilities can be zeroed."""
    causal, scale, offset, kv_len, _ = cfg
    T, C = q_BKGTE.shape[3], k_BCKE.shape[1]
    acc = accumulation_dtype(q_BKGTE, k_BCKE)
    s = jnp.einsum("bkgte,bcke->bkgtc", q_BKGTE, k_BCKE, preferred_element_type=acc)
    s = s * scale
    q_pos, k_pos = jnp.arange(T)[:, None] + offset, start + jnp.arange(C)[None, :]
    if slopes_KG is not None:
        distance_TC = jnp.abs(q_pos - k_pos).astype(acc)
        s -= slopes_KG.astype(acc)[None, :, :, None, None] * distance_TC
    valid_C = k_pos[0] < kv_len
    keep = valid_C[None, :] & (q_pos >= k_pos) if causal else valid_C[None, :]
    keep = keep[None, None, None]
    if seg_BT is not None:
        keep = keep & (seg_BT[:, :, None] == seg_BC[:, None, :])[:, None, None]
    return jnp.where(keep, s, _MASK_VALUE), valid_C


def _chunked_layout(q, k, v, seg_BS, chunk):
    """Groups query heads by kv head and splits the keys into ``N`` chunks (scan axis first)."""
    B, T, H, E = q.shape
    S, K = k.shape[1], k.shape[2]
    n = S // chunk
    q_BKGTE = q.reshape(B, T, K, H // K, E).transpose(0, 2, 3, 1, 4)
    split = lambda x: x.reshape(B, n, chunk, *x.shape[2:]).swapaxes(0, 1)
    seg_NBC = None if seg_BS is None else split(seg_BS)
    return q_BKGTE, (jnp.arange(n) * chunk, split(k), split(v), seg_NBC)


def _chunked_forward(q, k, v, seg_BT, seg_BS, slopes, cfg):
    B, T, H, E = q.shape
    K = k.shape[2]
    q_BKGTE, xs = _chunked_layout(q, k, v, seg_BS, cfg[-1])
    slopes_KG = None if slopes is None else slopes.reshape(K, H // K)
    acc_dtype = accumulation_dtype(q, k, v)

    def body(carry, x):  # FlashAttention-2 Alg. 1, one key chunk against all queries
        m, denom, acc = carry
        start, k_BCKE, v_BCKE, seg_BC = x
        s, valid_C = _chunk_logits(q_BKGTE, k_BCKE, start, seg_BT, seg_BC, slopes_KG, cfg)
        m_new = jnp.maximum(m, s.max(-1))
        p = jnp.where(valid_C, jnp.exp(s - m_new[..., None]), 0.0)
        correction = jnp.exp(m - m_new)
        pv = jnp.einsum(
            "bkgtc,bcke->bkgte", p.astype(v.dtype), v_BCKE, preferred_element_type=acc_dtype
        )
        return (m_new, correction * denom + p.sum(-1), correction[..., None] * acc + pv), None

    shape = q_BKGTE.shape[:-1]
    init = (jnp.full(shape, -jnp.inf, acc_dtype), jnp.zeros(shape, acc_dtype),
            jnp.zeros(q_BKGTE.shape, acc_dtype))  # fmt: skip
    (m, denom, acc), _ = jax.lax.scan(body, init, xs)
    o_BTHE = (acc / denom[..., None]).transpose(0, 3, 1, 2, 4).reshape(B, T, H, E).astype(q.dtype)
    return o_BTHE, m + jnp.log(denom)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _chunked(q, k, v, seg_BT, seg_BS, slopes, cfg):
    return _chunked_forward(q, k, v, seg_BT, seg_BS, slopes, cfg)[0]


def _chunked_fwd(q, k, v, seg_BT, seg_BS, slopes, cfg):
    o, lse = _chunked_forward(q, k, v, seg_BT, seg_BS, slopes, cfg)
    return o, (q, k, v, seg_BT, seg_BS, slopes, o, lse)


def _chunked_bwd(cfg, residuals, do_BTHE):
    """FlashAttention-2 Alg. 2 chunk by chunk: dK, dV per chunk, dQ accumulated in the carry."""
    q, k, v, seg_BT, seg_BS, slopes, o, lse = residuals
    B, T, H, E = q.shape
    K, scale = k.shape[2], cfg[1]
    q_BKGTE, xs = _chunked_layout(q, k, v, seg_BS, cfg[-1])
    slopes_KG = None if slopes is None else slopes.reshape(K, H // K)
    group = lambda x: x.reshape(B, T, K, H // K, -1).transpose(0, 2, 3, 1, 4)
    do_BKGTE = group(do_BTHE)
    acc = accumulation_dtype(q, k, v)
    delta = jnp.sum(group(o).astype(acc) * do_BKGTE.astype(acc), axis=-1)
    acc_kw = dict(preferred_element_type=acc)

    def body(dq, x):
        start, k_BCKE, v_BCKE, seg_BC = x
        s, valid_C = _chunk_logits(q_BKGTE, k_BCKE, start, seg_BT, seg_BC, slopes_KG, cfg)
        p = jnp.where(valid_C, jnp.exp(s - lse[..., None]), 0.0)
        dv = jnp.einsum("bkgtc,bkgte->bcke", p.astype(do_BKGTE.dtype), do_BKGTE, **acc_kw)
        dp = jnp.einsum("bkgte,bcke->bkgtc", do_BKGTE, v_BCKE, **acc_kw)
        ds = p * (dp - delta[..., None])
        dk = jnp.einsum("bkgtc,bkgte->bcke", ds.astype(q.dtype), q_BKGTE, **acc_kw) * scale
        dq += jnp.einsum("bkgtc,bcke->bkgte", ds.astype(k.dtype), k_BCKE, **acc_kw) * scale
        return dq, (dk, dv)

    dq, (dk_NBCKE, dv_NBCKE) = jax.lax.scan(body, jnp.zeros(q_BKGTE.shape, acc), xs)
    unsplit = lambda x, like: x.swapaxes(0, 1).reshape(like.shape).astype(like.dtype)
    dq_BTHE = dq.transpose(0, 3, 1, 2, 4).reshape(B, T, H, E).astype(q.dtype)
    return dq_BTHE, unsplit(dk_NBCKE, k), unsplit(dv_NBCKE, v), None, None, None


_chunked.defvjp(_chunked_fwd, _chunked_bwd)
# One program per shape: called outside jit, the key-chunk scan would otherwise be traced and
# compiled again on every call; inside a caller's jit this is an inner call that XLA inlines.
_chunked_jit = jax.jit(_chunked, static_argnums=(6,))


def xla_chunked_attention(
    q_BTHE: Float[Array, "B T H E"],
    k_BSKE: Float[Array, "B S K E"],
    v_BSKE: Float[Array, "B S K E"],
    *,
    causal: bool,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    scale: float | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> Float[Array, "B T H E"]:
    """Memory-efficient attention in plain XLA: keys in chunks of ``chunk_size`` (see module doc).

    Peak memory holds a few ``(B, H, T, chunk)`` blocks of logits, not ``(B, H, T, S)``; keys are
    padded to a multiple of the chunk and the padding masked. Gradients flow to q, k, v only.
    An empty batch, query or key axis has nothing to chunk: the reference's (empty or zero)
    result, as :func:`jax.nn.dot_product_attention` gives.
    """
    B, T, _, E = q_BTHE.shape
    S = k_BSKE.shape[1]
    if 0 in (B, T, S):
        return xla_attention(q_BTHE, k_BSKE, v_BSKE, causal=causal, segment_ids=segment_ids,
                             alibi_slopes=alibi_slopes, scale=scale)  # fmt: skip
    if segment_ids is not None and S != T:
        raise ConfigError("attention: segment_ids need equal query and key lengths")
    if chunk_size <= 0:
        raise ConfigError(f"attention: chunk_size={chunk_size} must be positive")
    chunk = min(chunk_size, S)
    Sp = -(-S // chunk) * chunk
    pad = lambda x: jnp.pad(x, ((0, 0), (0, Sp - S)) + ((0, 0),) * (x.ndim - 2))
    seg_BS = None if segment_ids is None else pad(segment_ids)
    cfg = (bool(causal), float(E**-0.5 if scale is None else scale), S - T, S, chunk)
    return _chunked_jit(q_BTHE, pad(k_BSKE), pad(v_BSKE), segment_ids, seg_BS, alibi_slopes, cfg)


def _pallas_attention(q, k, v, *, causal, segment_ids, alibi_slopes, scale):
    try:
        return pallas_kernels.flash_attention(
            q, k, v, causal=causal, segment_ids=segment_ids, alibi_slopes=alibi_slopes, scale=scale
        )
    except pallas_kernels.KernelConfigError as err:
        raise ConfigError(f"attention impl 'pallas': {err}") from None


def _cudnn_attention(q, k, v, *, causal, segment_ids, alibi_slopes, scale):
    if alibi_slopes is not None:
        raise ConfigError("attention impl 'cudnn' has no ALiBi; use impl='xla' or 'auto'")
    if segment_ids is not None:
        raise ConfigError("attention impl 'cudnn' here takes no segment_ids; use impl='xla'")
    return jax.nn.dot_product_attention(
        q, k, v, scale=scale, is_causal=causal, implementation="cudnn"
    )


_IMPLS = {
    AttentionImpl.XLA: xla_attention,
    AttentionImpl.XLA_CHUNKED: xla_chunked_attention,
    AttentionImpl.PALLAS: _pallas_attention,
    AttentionImpl.CUDNN: _cudnn_attention,
}


def dot_product_attention(
    q: Float[Array, "B T H E"],
    k: Float[Array, "B S K E"],
    v: Float[Array, "B S K E"],
    *,
    causal: bool,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    scale: float | None = None,
    impl: str | AttentionImpl = "auto",
) -> Float[Array, "B T H E"]:
    """Scaled dot-product attention through the implementation ``impl`` (see the module doc).

    An empty batch, query or key axis gives the reference's result whatever ``impl`` (an empty
    array, or zeros for queries without keys), as :func:`jax.nn.dot_product_attention` does.

    Raises:
      ConfigError: for shapes that do not fit, or an unknown or unavailable ``impl``.
    """
    check_qkv(q, k, v, causal=causal, segment_ids=segment_ids, alibi_slopes=alibi_slopes)
    try:
        impl = AttentionImpl(impl)
    except ValueError:
        options = ", ".join(i.value for i in AttentionImpl)
        raise ConfigError(f"unknown attention impl {impl!r}; choose one of {options}") from None
    kwargs = dict(causal=causal, segment_ids=segment_ids, alibi_slopes=alibi_slopes, scale=scale)
    if 0 in (q.shape[0], q.shape[1], k.shape[1]):  # nothing to tile: the reference's empty result
        return xla_attention(q, k, v, **kwargs)
    if impl is AttentionImpl.AUTO:
        impl = default_impl(seq_len=k.shape[1])
    return _IMPLS[impl](q, k, v, **kwargs)
