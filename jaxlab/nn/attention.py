"""The one attention dispatch that every jaxlab model calls.

``dot_product_attention(q, k, v, *, causal, segment_ids, alibi_slopes, scale, impl)`` takes
``(B, T, H, D)`` queries and ``(B, S, K, D)`` keys/values (``K`` divides ``H``: grouped-query and
multi-query attention) and picks an implementation from :class:`AttentionImpl`:

* ``xla`` — the reference: explicit logits in float32, masks, softmax (Vaswani et al. 2017, eq. 1).
* ``cudnn`` — ``jax.nn.dot_product_attention(implementation="cudnn")`` on NVIDIA GPUs.

``impl="auto"`` resolves through :func:`default_impl` (one place, one rule). The Pallas flash kernel
and the memory-efficient chunked XLA path are added to the enum by the kernels issue; until then the
XLA reference is the CPU/TPU default.

Masks: ``causal`` keeps keys at positions ``<=`` the query's; ``segment_ids`` (B, T) keeps only
pairs in the same document (packed rows); ``alibi_slopes`` (H,) adds ``-slope_h * |i - j|`` to the
logits (Press et al. 2022, "Train Short, Test Long", Sec. 3).
"""

from __future__ import annotations

import enum
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxlab.core.errors import ConfigError

__all__ = ["AttentionImpl", "alibi_slopes", "default_impl", "dot_product_attention"]

_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: fully masked rows stay NaN-free


class AttentionImpl(enum.StrEnum):
    """Attention implementations behind :func:`dot_product_attention`."""

    AUTO = "auto"
    XLA = "xla"
    CUDNN = "cudnn"


def default_impl(platform: str | None = None) -> AttentionImpl:
    """The implementation ``impl="auto"`` uses on ``platform`` (default: JAX's default backend).

    XLA on every platform for now: cuDNN's fused kernel takes neither ALiBi nor document masks that
    the models use. The kernels issue makes this Pallas on GPU/TPU and chunked XLA on CPU.
    """
    del platform  # The same answer everywhere until the kernels issue (see above).
    return AttentionImpl.XLA


def alibi_slopes(num_heads: int) -> Float[Array, " H"]:
    """ALiBi head slopes: the geometric sequence 2^(-8h/H), h = 1..H (Press et al. 2022, Sec. 3).

    For a head count that is not a power of two, the paper's recipe interleaves the slopes of the
    next power of two; this follows it.
    """

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest)
    if closest < num_heads:
        slopes += power_of_two(2 * closest)[0::2][: num_heads - closest]
    return np.asarray(slopes, np.float32)


def _check_shapes(q, k, v, segment_ids, alibi) -> None:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ConfigError(
            f"attention expects (B, T, H, D) arrays, got q{q.shape} k{k.shape} v{v.shape}"
        )
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ConfigError(f"attention: q{q.shape}, k{k.shape}, v{v.shape} do not fit together")
    if q.shape[2] % k.shape[2]:
        raise ConfigError(
            f"attention: {q.shape[2]} query heads are not a multiple of {k.shape[2]} kv heads"
        )
    if segment_ids is not None and segment_ids.shape != q.shape[:2]:
        raise ConfigError(f"attention: segment_ids{segment_ids.shape} must be (B, T)={q.shape[:2]}")
    if alibi is not None and alibi.shape != (q.shape[2],):
        raise ConfigError(f"attention: alibi_slopes{alibi.shape} must be (H,)=({q.shape[2]},)")


def xla_attention(
    q_BTHD: Float[Array, "B T H D"],
    k_BSKD: Float[Array, "B S K D"],
    v_BSKD: Float[Array, "B S K D"],
    *,
    causal: bool,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    scale: float | None = None,
) -> Float[Array, "B T H D"]:
    """Reference attention: float32 logits and softmax, output in q's dtype."""
    B, T, H, D = q_BTHD.shape
    S, K = k_BSKD.shape[1], k_BSKD.shape[2]
    scale = D**-0.5 if scale is None else scale
    q_BTKGD = q_BTHD.reshape(B, T, K, H // K, D)  # query heads grouped per kv head (GQA)
    logits_BKGTS = (
        jnp.einsum("btkgd,bskd->bkgts", q_BTKGD, k_BSKD, preferred_element_type=jnp.float32) * scale
    )
    logits_BHTS = logits_BKGTS.reshape(B, H, T, S)
    q_pos, k_pos = jnp.arange(T)[:, None] + (S - T), jnp.arange(S)[None, :]
    if alibi_slopes is not None:
        distance_TS = jnp.abs(q_pos - k_pos).astype(jnp.float32)
        logits_BHTS -= alibi_slopes.astype(jnp.float32)[None, :, None, None] * distance_TS
    mask = jnp.ones((1, 1, T, S), bool)
    if causal:
        mask &= (q_pos >= k_pos)[None, None]
    if segment_ids is not None:
        if S != T:
            raise ConfigError("attention: segment_ids need equal query and key lengths")
        mask &= (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]
    logits_BHTS = jnp.where(mask, logits_BHTS, _MASK_VALUE)
    probs_BHTS = jax.nn.softmax(logits_BHTS, axis=-1).astype(v_BSKD.dtype)
    probs_BKGTS = probs_BHTS.reshape(B, K, H // K, T, S)
    out_BTKGD = jnp.einsum("bkgts,bskd->btkgd", probs_BKGTS, v_BSKD)
    return out_BTKGD.reshape(B, T, H, D)


def _cudnn_attention(q, k, v, *, causal, segment_ids, alibi_slopes, scale):
    if alibi_slopes is not None:
        raise ConfigError("attention impl 'cudnn' has no ALiBi; use impl='xla' or 'auto'")
    if segment_ids is not None:
        raise ConfigError("attention impl 'cudnn' here takes no segment_ids; use impl='xla'")
    return jax.nn.dot_product_attention(
        q, k, v, scale=scale, is_causal=causal, implementation="cudnn"
    )


def dot_product_attention(
    q: Float[Array, "B T H D"],
    k: Float[Array, "B S K D"],
    v: Float[Array, "B S K D"],
    *,
    causal: bool,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    scale: float | None = None,
    impl: str | AttentionImpl = "auto",
) -> Float[Array, "B T H D"]:
    """Scaled dot-product attention through the implementation ``impl`` (see the module doc).

    Raises:
      ConfigError: for shapes that do not fit, or an unknown or unavailable ``impl``.
    """
    _check_shapes(q, k, v, segment_ids, alibi_slopes)
    try:
        impl = AttentionImpl(impl)
    except ValueError:
        options = ", ".join(i.value for i in AttentionImpl)
        raise ConfigError(f"unknown attention impl {impl!r}; choose one of {options}") from None
    if impl is AttentionImpl.AUTO:
        impl = default_impl()
    kwargs = dict(causal=causal, segment_ids=segment_ids, alibi_slopes=alibi_slopes, scale=scale)
    if impl is AttentionImpl.CUDNN:
        return _cudnn_attention(q, k, v, **kwargs)
    return xla_attention(q, k, v, **kwargs)
