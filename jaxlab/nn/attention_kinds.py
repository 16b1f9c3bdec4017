"""Which pairs a model's attention scores and how: the attention *kind*, one config choice.

Kinds (:class:`AttentionKind`, chosen by ``LMConfig.attention`` for the baseline Transformer and
the RMT; the baselines of Kuang et al., "Customizing the Inductive Biases of Softmax Attention
using Structured Matrices", ICML 2025, Sec. 4 and the authors' code):

* ``mha`` — standard causal softmax attention through
  :func:`jaxlab.nn.attention.dot_product_attention` (the call is the one the models made before
  kinds existed, so the default is unchanged bit for bit).
* ``swa`` — sliding-window attention: query ``i`` sees keys ``i - window .. i`` (the authors'
  ``sliding_block_size`` convention: ``window`` earlier positions and itself).
* ``gswa`` — Global + SWA: the head's channels split into two halves; the first half scores every
  causal pair, the second only the window; each half has its own softmax (logit scale ``1/sqrt``
  of its width) and the two probability matrices are *added* before the value sum, as in the
  authors' ``CausalSelfGlobalSlidingWindowAttention`` (rows then sum to 2; the output projection
  absorbs the factor).
* ``mlr`` — multi-level low-rank attention, :func:`jaxlab.nn.mlr_attention.mlr_attention`, with
  ``ranks`` (summing to the head dim) and ``normalize``; the model's ``attention_impl`` picks the
  blockwise XLA path or the Pallas MLR kernel (``"pallas"``, or ``"auto"`` on GPU/TPU behind the
  same switch as the other kernels).

The authors pair the structured kinds with QK LayerNorm and µP logit scales (``8/d``); here every
kind keeps the host model's recipe so that a comparison changes the scoring only: by default no QK
norm and ``1/sqrt`` scales, and the authors' recipe behind ``LMConfig.qk_norm`` and
``LMConfig.logit_scale="mup"`` (:func:`logit_scale`). The scale passed in is the model's ``mha``
scale for the full head dim (``E^-1/2``, times an RMT's ``1/(layer + 1)``); the other kinds take
its factor beyond ``E^-1/2`` (``scale * sqrt(E)``) and apply it to their own per-part scales. SWA
and GSWA are written as masked dense attention (``O(T^2)`` work, like the authors' default path):
they are baselines of quality, not of speed.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxlab.core.errors import ConfigError
from jaxlab.nn.attention import accumulation_dtype, dot_product_attention
from jaxlab.nn.mlr_attention import check_mlr, mlr_attention, mlr_covering_levels

__all__ = [
    "AttentionKind",
    "AttentionKindName",
    "LogitScaleName",
    "MLRNormalizeName",
    "attend",
    "attention_mix_flops",
    "check_attention_kind",
    "global_sliding_window_attention",
    "logit_scale",
    "sliding_window_attention",
]

_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


class AttentionKind(enum.StrEnum):
    """The attention kinds behind :func:`attend` (see the module docstring)."""

    MHA = "mha"
    SWA = "swa"
    GSWA = "gswa"
    MLR = "mlr"


AttentionKindName = Literal[tuple(k.value for k in AttentionKind)]  # type: ignore[valid-type]
# Config spelling of mlr_attention's normalize (None is "none" on the command line).
MLRNormalizeName = Literal["none", "levels", "block_levels"]
# How logits are scaled: 1/sqrt(d) (Vaswani et al.) or the authors' µP 8/d.
LogitScaleName = Literal["sqrt", "mup"]


def logit_scale(kind: str, head_dim: int, rule: str = "sqrt") -> float:
    """The ``scale`` a model passes to :func:`attend` for its ``kind`` under ``rule``.

    ``"sqrt"``: ``1/sqrt(head_dim)`` (every kind then uses its own ``1/sqrt`` per-part scale).
    ``"mup"``: the µP scales of Kuang et al.'s code (``src/model.py``): ``k *= 8/sqrt(d)`` before
    the ``1/sqrt(d)`` of ``scaled_dot_product_attention``, so ``8/d`` for ``mha`` and ``swa``;
    ``8/(d/2)`` on each half for ``gswa``; ``mlr`` keeps its per-level ``1/r_l``, which the authors'
    sequence-axis MLR uses with no µP switch. The value returned is what makes :func:`attend`'s
    factor beyond ``1/sqrt(d)`` give those scales.
    """
    if rule not in ("sqrt", "mup"):
        raise ConfigError(f"logit_scale={rule!r}: choose 'sqrt' or 'mup'")
    if rule == "sqrt" or kind == AttentionKind.MLR:
        return head_dim**-0.5
    if kind == AttentionKind.GSWA:  # factor / sqrt(d/2) = 8 / (d/2)
        return 8.0 / math.sqrt(head_dim / 2) / math.sqrt(head_dim)
    return 8.0 / head_dim


def check_attention_kind(
    kind: str,
    *,
    window: int,
    ranks: Sequence[int],
    normalize: str,
    head_dim: int,
    num_heads: int,
    kv_heads: int,
    seq_len: int,
    prefix: str = "model.",
) -> None:
    """Raises a one-line :class:`ConfigError` unless the kind's options fit the model's heads."""
    if kind == AttentionKind.MHA:
        return
    if kv_heads != num_heads:
        raise ConfigError(
            f"{prefix}attention={kind!r} needs as many kv heads as query heads "
            f"(got {kv_heads} and {num_heads}); set {prefix}num_kv_heads=0 or attention='mha'"
        )
    if kind in (AttentionKind.SWA, AttentionKind.GSWA) and window < 1:
        raise ConfigError(f"{prefix}attention_window={window} must be >= 1 for {kind!r}")
    if kind == AttentionKind.GSWA and head_dim % 2:
        raise ConfigError(f"{prefix}attention='gswa' splits the head in halves: head dim "
                          f"{head_dim} must be even")  # fmt: skip
    if kind == AttentionKind.MLR:
        try:
            check_mlr(ranks, head_dim, seq_len, None if normalize == "none" else normalize)
        except ConfigError as err:
            raise ConfigError(f"{prefix}attention_ranks: {err}") from None


def _masked_softmax(q, k, scale, keep, slopes):
    """Causal-masked probabilities ``(B, H, T, S)`` in :func:`accumulation_dtype` (float32, or
    float64 for float64 inputs) with an extra ``keep`` mask."""
    acc = accumulation_dtype(q, k)
    s = jnp.einsum("bthe,bshe->bhts", q, k, preferred_element_type=acc) * scale
    T = q.shape[1]
    pos = jnp.arange(T)
    if slopes is not None:
        s = s - slopes.astype(acc)[None, :, None, None] * jnp.abs(pos[:, None] - pos)
    return jax.nn.softmax(jnp.where(keep, s, _MASK_VALUE), axis=-1)


def _keep(T, window, segment_ids):
    pos = jnp.arange(T)
    keep = (pos[:, None] >= pos[None, :])[None, None]
    if window is not None:
        keep &= (pos[:, None] - pos[None, :] <= window)[None, None]
    if segment_ids is not None:
        keep &= (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]
    return keep


def sliding_window_attention(
    q: Float[Array, "B T H E"],
    k: Float[Array, "B T H E"],
    v: Float[Array, "B T H E"],
    *,
    window: int,
    scale: float | None = None,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
) -> Float[Array, "B T H E"]:
    """Causal attention in which query ``i`` sees keys ``i - window .. i`` only."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    p = _masked_softmax(q, k, scale, _keep(q.shape[1], window, segment_ids), alibi_slopes)
    return jnp.einsum("bhts,bshe->bthe", p.astype(v.dtype), v)


def global_sliding_window_attention(
    q: Float[Array, "B T H E"],
    k: Float[Array, "B T H E"],
    v: Float[Array, "B T H E"],
    *,
    window: int,
    logit_factor: float = 1.0,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
) -> Float[Array, "B T H E"]:
    """Global + SWA (the authors' GSWA): first-half channels over all causal pairs, second half
    over the window, each soft-maxed at scale ``logit_factor / sqrt(E / 2)``, probabilities added.
    """
    half = q.shape[-1] // 2
    scale = logit_factor / math.sqrt(half)
    T = q.shape[1]
    p_global = _masked_softmax(
        q[..., :half], k[..., :half], scale, _keep(T, None, segment_ids), alibi_slopes
    )
    p_local = _masked_softmax(
        q[..., half:], k[..., half:], scale, _keep(T, window, segment_ids), alibi_slopes
    )
    return jnp.einsum("bhts,bshe->bthe", (p_global + p_local).astype(v.dtype), v)


def attend(
    q: Float[Array, "B T H E"],
    k: Float[Array, "B S K E"],
    v: Float[Array, "B S K E"],
    *,
    kind: str = "mha",
    scale: float,
    segment_ids: Int[Array, "B T"] | None = None,
    alibi_slopes: Float[Array, " H"] | None = None,
    impl: str = "auto",
    window: int = 0,
    ranks: Sequence[int] = (),
    normalize: str = "block_levels",
    seq_len: int | None = None,
) -> Float[Array, "B T H E"]:
    """Causal self-attention of the given kind (see the module docstring); ``scale`` is the
    model's ``mha`` logit scale, ``impl`` the :class:`~jaxlab.nn.attention.AttentionImpl` of
    ``mha`` and ``mlr`` (``"pallas"``/``"auto"`` reach the Pallas MLR kernel; SWA and GSWA run
    their XLA forms), ``seq_len`` the model's context length, on
    which the MLR levels are laid (inputs of other lengths keep the blocks of a full row)."""
    masks = dict(segment_ids=segment_ids, alibi_slopes=alibi_slopes)
    if kind == AttentionKind.MHA:
        return dot_product_attention(q, k, v, causal=True, scale=scale, impl=impl, **masks)
    factor = scale * math.sqrt(q.shape[-1])  # the model's factor beyond 1/sqrt(E)
    if kind == AttentionKind.SWA:
        return sliding_window_attention(q, k, v, window=window, scale=scale, **masks)
    if kind == AttentionKind.GSWA:
        return global_sliding_window_attention(q, k, v, window=window, logit_factor=factor, **masks)
    if kind == AttentionKind.MLR:
        norm = None if normalize == "none" else normalize
        return mlr_attention(
            q, k, v, ranks=ranks, normalize=norm, logit_scale=factor, block_len=seq_len,
            impl=impl, **masks,
        )  # fmt: skip
    raise ConfigError(f"unknown attention kind {kind!r}; choose one of {list(AttentionKind)}")


# ---------------------------------------------------------------------------- FLOP accounting


def _mean_keys(T: int, window: int | None, causal: bool) -> float | int:
    """Keys per query: the mean over the ``T`` causal queries, or ``T`` (the last query's, for
    every query) in the full-context convention; capped at ``window + 1`` for a window."""
    if not causal:
        return T if window is None else min(T, window + 1)
    keys = np.arange(1, T + 1, dtype=np.float64)
    return float(np.minimum(keys, window + 1).mean() if window is not None else keys.mean())


def attention_mix_flops(
    kind: str,
    *,
    seq_len: int,
    num_heads: int,
    head_dim: int,
    causal: bool,
    window: int = 0,
    ranks: Sequence[int] = (),
) -> float:
    """Forward FLOPs per token of one layer's token mixing (logits and value sum), all heads.

    A multiply-add is 2 FLOPs. Query ``i`` scores ``P_i`` keys (``i + 1`` for causal MHA,
    ``min(i + 1, window + 1)`` for SWA); the logits cost ``2 P_i d`` and the value sum ``2 P_i d_v``
    for ``d`` contracted channels. For MLR (Kuang et al. 2025, Sec. 4) level ``l`` contracts its
    ``r_l`` channels over the pairs of its blocks, so the logits cost ``2 sum_l r_l P_i^(l)`` and
    the value sum stays full; for Global+SWA the global half scores every pair and the local half
    the window, and the summed probability matrix multiplies the values over every pair.

    ``causal=True`` averages over the ``T`` causal queries of a row: the exact count of the causal
    work. ``causal=False`` is Kaplan et al.'s convention (2020, Table 1): every query is counted
    with the keys of the full context, i.e. as the row's last query (``P = T`` for MHA:
    ``4 T d`` per head), which is what a dense masked program computes for MHA.
    """
    T, H, E = seq_len, num_heads, head_dim
    full = _mean_keys(T, None, causal)
    if kind == "mha":
        qk = 2 * full * E
    elif kind == "swa":
        local = _mean_keys(T, window, causal)
        return H * 4 * local * E
    elif kind == "gswa":
        qk = 2 * full * E / 2 + 2 * _mean_keys(T, window, causal) * E / 2
    elif kind == "mlr":
        count = mlr_covering_levels(T, len(ranks))
        if causal:  # pairs covered by level l: covering count > l, below the diagonal
            pairs = np.tril(np.ones((T, T), bool))
            qk = 2 * sum(r * ((count > lv) & pairs).sum() for lv, r in enumerate(ranks)) / T
        else:  # the last query's pairs, for every query
            qk = 2 * sum(r * int((count[-1] > lv).sum()) for lv, r in enumerate(ranks))
    else:
        raise ValueError(f"unknown attention kind {kind!r}")
    return H * (qk + 2 * full * E)
