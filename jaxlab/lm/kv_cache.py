"""The baseline Transformer's key/value cache: preallocated to a maximum length, written in place,
for every attention kind (:mod:`jaxlab.nn.attention_kinds`).

:func:`init_cache` allocates, per layer, keys and values ``(B, max_len, K, E)`` (zeros) and a write
position; :func:`extend` runs ``T`` new tokens through the model's own submodules (embedding,
norms, projections, MLP, unembedding), writes their keys and values at ``[pos, pos + T)`` with
``lax.dynamic_update_slice`` (in place under ``jit`` with donation) and attends each new query to
the cached keys its kind lets it see, with the model's scale and ALiBi slopes:

* ``mha`` — every key at or before the query (:func:`cached_attention`);
* ``swa`` — the last ``window + 1`` positions (:func:`cached_sliding_window_attention`);
* ``gswa`` — the first half of the channels over every earlier key, the second half over the
  window, two softmaxes whose probabilities are added
  (:func:`cached_global_sliding_window_attention`);
* ``mlr`` — level ``l`` scores only keys in the query's level-``l`` block
  (:func:`cached_mlr_attention`).

Cache slot ``s`` holds position ``s`` (absolute coordinates). A one-token step (``T = 1``, every
step of :func:`jaxlab.lm.generate.generate`) reads only the keys its kind needs, with
``lax.dynamic_slice``: the last ``window + 1`` slots for a window, the current block of each MLR
level; a multi-token extend (the prefill) scores the whole cache under masks. Either way the
logits equal :class:`~jaxlab.lm.transformer.Transformer`'s full forward on the same tokens (tested
in ``tests/lm/test_generate.py``); a cache holds one document per row (no segment ids). The memory
of a decode step grows with ``max_len``: this is what the xLSTM's constant-size state is compared
with.

MLR's block grid. The forward lays the levels on the model's ``seq_len`` (``block_len`` of
:func:`jaxlab.nn.mlr_attention.mlr_attention`): level ``l``'s blocks have length ``seq_len / 2^l``
and start at multiples of it, in absolute positions, so a prompt shorter than ``seq_len`` has the
blocks it would have inside a full row, and past ``seq_len`` the level-0 blocks repeat (a query
sees no key of an earlier level-0 block). The cache uses the same grid: position ``p`` is in
level-``l`` block ``p // (seq_len / 2^l)``, so teacher-forced decoding reproduces the full forward
for any ``max_len`` (also ``max_len > seq_len``).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxlab.core.errors import ConfigError
from jaxlab.nn.attention import accumulation_dtype

__all__ = [
    "KVCache",
    "cached_attention",
    "cached_global_sliding_window_attention",
    "cached_mlr_attention",
    "cached_sliding_window_attention",
    "extend",
    "init_cache",
]

_MASK_VALUE = -1e30  # as the reference attention's masked logits: exp() underflows to exactly 0


class KVCache(NamedTuple):
    """The Transformer's generation cache: keys ``k`` and values ``v``, a ``(B, max_len, K, E)``
    array per layer, and ``pos`` (int32 scalar), the number of positions written."""

    k: tuple[Array, ...]
    v: tuple[Array, ...]
    pos: Int[Array, ""]


def init_cache(model, batch_size: int, max_len: int) -> KVCache:
    """Zero keys/values of ``max_len`` positions for every layer of ``model`` and position 0."""
    cfg = model.cfg
    if cfg.positions == "learned" and max_len > cfg.seq_len:
        raise ConfigError(
            f"max_len={max_len} exceeds model.seq_len={cfg.seq_len} (learned positions); "
            "generate fewer tokens or use positions=alibi"
        )
    shape = (batch_size, max_len, cfg.kv_heads, cfg.head_dim)
    # A fresh buffer per leaf: a donated cache must not hold one buffer twice.
    zeros = lambda: tuple(jnp.zeros(shape, cfg.dtype) for _ in range(cfg.num_layers))  # noqa: E731
    return KVCache(zeros(), zeros(), jnp.zeros((), jnp.int32))


def cached_attention(
    q_BTHE: Float[Array, "B T H E"],
    k_BSKE: Float[Array, "B S K E"],
    v_BSKE: Float[Array, "B S K E"],
    pos: Int[Array, ""],
    *,
    scale: float,
    alibi_slopes: Float[Array, " H"] | None,
) -> Float[Array, "B T H E"]:
    """Queries at positions ``pos + t`` against a cache of ``S`` slots (slot s = position s):
    logits in :func:`~jaxlab.nn.attention.accumulation_dtype` (float32, or float64 for float64
    inputs), keys after the query (and the unwritten slots) masked."""
    B, T, H, E = q_BTHE.shape
    acc = accumulation_dtype(q_BTHE, k_BSKE, v_BSKE)
    S, K = k_BSKE.shape[1:3]
    q_BTKGE = q_BTHE.reshape(B, T, K, H // K, E)
    logits = jnp.einsum("btkge,bske->bkgts", q_BTKGE, k_BSKE, preferred_element_type=acc)
    logits_BHTS = logits.reshape(B, H, T, S) * scale
    q_pos, k_pos = pos + jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    if alibi_slopes is not None:
        distance_TS = jnp.abs(q_pos - k_pos).astype(acc)
        logits_BHTS -= alibi_slopes.astype(acc)[None, :, None, None] * distance_TS
    logits_BHTS = jnp.where((q_pos >= k_pos)[None, None], logits_BHTS, _MASK_VALUE)
    probs_BKGTS = (
        jax.nn.softmax(logits_BHTS, axis=-1).astype(v_BSKE.dtype).reshape(B, K, H // K, T, S)
    )
    return jnp.einsum("bkgts,bske->btkge", probs_BKGTS, v_BSKE).reshape(B, T, H, E)


# ---------------------------------------------------------------- the other kinds (K == H)


def _slots(x_BS, start, n: int):
    """``n`` cache slots from ``start`` (clamped into the cache, as ``dynamic_slice`` does) and
    the positions they hold ``(n,)``."""
    start = jnp.clip(start, 0, x_BS.shape[1] - n)
    return jax.lax.dynamic_slice_in_dim(x_BS, start, n, axis=1), start + jnp.arange(n)


def _window(k_BSHE, v_BSHE, pos, T: int, n: int):
    """Keys, values and their positions that queries ``pos .. pos + T - 1`` may need when each
    sees at most the ``n`` positions up to itself: the ``n`` slots ending at ``pos`` for one
    query, the whole cache otherwise."""
    if T == 1 and n < k_BSHE.shape[1]:
        k_win_BSHE, k_pos = _slots(k_BSHE, pos - n + 1, n)
        return k_win_BSHE, _slots(v_BSHE, pos - n + 1, n)[0], k_pos
    return k_BSHE, v_BSHE, jnp.arange(k_BSHE.shape[1])


def _probs(q_BTHE, k_BSHE, q_pos, k_pos, keep_TS, scale, alibi_slopes):
    """Masked softmax ``(B, H, T, S)`` in float32 (float64 for float64 inputs) of ``scale * q.k``
    minus the ALiBi bias."""
    acc = accumulation_dtype(q_BTHE, k_BSHE)
    s = jnp.einsum("bthe,bshe->bhts", q_BTHE, k_BSHE, preferred_element_type=acc) * scale
    if alibi_slopes is not None:
        distance_TS = jnp.abs(q_pos[:, None] - k_pos[None, :]).astype(acc)
        s = s - alibi_slopes.astype(acc)[None, :, None, None] * distance_TS
    return jax.nn.softmax(jnp.where(keep_TS[None, None], s, _MASK_VALUE), axis=-1)


def _window_keep(q_pos, k_pos, window: int | None):
    keep = q_pos[:, None] >= k_pos[None, :]
    if window is not None:
        keep &= q_pos[:, None] - k_pos[None, :] <= window
    return keep


def _pv(p_BHTS, v_BSHE):
    return jnp.einsum("bhts,bshe->bthe", p_BHTS.astype(v_BSHE.dtype), v_BSHE)


def cached_sliding_window_attention(
    q_BTHE: Float[Array, "B T H E"],
    k_BSHE: Float[Array, "B S H E"],
    v_BSHE: Float[Array, "B S H E"],
    pos: Int[Array, ""],
    *,
    window: int,
    scale: float,
    alibi_slopes: Float[Array, " H"] | None,
) -> Float[Array, "B T H E"]:
    """:func:`jaxlab.nn.attention_kinds.sliding_window_attention` of queries at ``pos + t``
    against the cache: query ``i`` sees positions ``i - window .. i``; a one-token step reads only
    those ``window + 1`` slots."""
    T = q_BTHE.shape[1]
    k, v, k_pos = _window(k_BSHE, v_BSHE, pos, T, window + 1)
    q_pos = pos + jnp.arange(T)
    p = _probs(q_BTHE, k, q_pos, k_pos, _window_keep(q_pos, k_pos, window), scale, alibi_slopes)
    return _pv(p, v)


def cached_global_sliding_window_attention(
    q_BTHE: Float[Array, "B T H E"],
    k_BSHE: Float[Array, "B S H E"],
    v_BSHE: Float[Array, "B S H E"],
    pos: Int[Array, ""],
    *,
    window: int,
    logit_factor: float,
    alibi_slopes: Float[Array, " H"] | None,
) -> Float[Array, "B T H E"]:
    """:func:`jaxlab.nn.attention_kinds.global_sliding_window_attention` against the cache: the
    first half of the channels over every cached key up to the query, the second half over the
    window (a one-token step reads only its ``window + 1`` slots), each soft-maxed at scale
    ``logit_factor / sqrt(E / 2)``, the two probability matrices added (the authors' GSWA)."""
    T, half = q_BTHE.shape[1], q_BTHE.shape[-1] // 2
    scale = logit_factor / math.sqrt(half)
    q_pos, all_pos = pos + jnp.arange(T), jnp.arange(k_BSHE.shape[1])
    p_global = _probs(q_BTHE[..., :half], k_BSHE[..., :half], q_pos, all_pos,
                      _window_keep(q_pos, all_pos, None), scale, alibi_slopes)  # fmt: skip
    k, v, k_pos = _window(k_BSHE, v_BSHE, pos, T, window + 1)
    p_local = _probs(q_BTHE[..., half:], k[..., half:], q_pos, k_pos,
                     _window_keep(q_pos, k_pos, window), scale, alibi_slopes)  # fmt: skip
    if k.shape[1] == k_BSHE.shape[1]:  # one key axis: add the probabilities, as the forward does
        return _pv(p_global + p_local, v_BSHE)
    return _pv(p_global, v_BSHE) + _pv(p_local, v)


def cached_mlr_attention(
    q_BTHE: Float[Array, "B T H E"],
    k_BSHE: Float[Array, "B S H E"],
    v_BSHE: Float[Array, "B S H E"],
    pos: Int[Array, ""],
    *,
    ranks: tuple[int, ...],
    normalize: str | None,
    seq_len: int,
    logit_scale: float,
    alibi_slopes: Float[Array, " H"] | None,
) -> Float[Array, "B T H E"]:
    """:func:`jaxlab.nn.mlr_attention.mlr_attention` (Kuang et al. 2025, Sec. 4) of queries at
    ``pos + t`` against the cache, on the block grid of ``seq_len`` (module docstring).

    The logit of a pair is ``logit_scale * f * sum_l q_l . k_l / r_l`` over the levels ``l`` whose
    block (length ``seq_len / 2^l``) holds both positions, ``f`` being 1, ``1/L`` or one over the
    number of those levels (``normalize`` None, ``"levels"``, ``"block_levels"``); pairs in
    different level-0 blocks, and keys after the query, are masked. A one-token step slices, per
    level, only the slots of the query's current block at that level (``min(seq_len / 2^l, S)``
    slots, clamped into the cache), so level ``l`` contracts its ``r_l`` channels over its own
    block; the finer levels' logits are added into the level-0 slice at their offset (a finer
    block lies inside the coarser one). A multi-token extend scores the whole cache with one
    same-block mask per level.
    """
    B, T, H, _ = q_BTHE.shape
    S, L = k_BSHE.shape[1], len(ranks)
    acc = accumulation_dtype(q_BTHE, k_BSHE, v_BSHE)  # float32, or float64 for float64 inputs
    q_pos = pos + jnp.arange(T)
    blocks = [seq_len // 2**level for level in range(L)]
    bounds = [0, *itertools.accumulate(ranks)]
    if T == 1:
        n = [min(b, S) for b in blocks]
        # The slot where each level's current block starts (clamped like dynamic_slice).
        starts = [jnp.clip((pos // b) * b, 0, S - m) for b, m in zip(blocks, n, strict=True)]
        k_pos = starts[0] + jnp.arange(n[0])
        v = jax.lax.dynamic_slice_in_dim(v_BSHE, starts[0], n[0], axis=1)
        s = jnp.zeros((B, H, 1, n[0]), acc)
        for level, (b, m, start) in enumerate(zip(blocks, n, starts, strict=True)):
            lo, hi = bounds[level], bounds[level + 1]
            k_l = jax.lax.dynamic_slice_in_dim(k_BSHE[..., lo:hi], start, m, axis=1)
            s_l = jnp.einsum("bthe,bshe->bhts", q_BTHE[..., lo:hi], k_l,
                             preferred_element_type=acc) / (hi - lo)  # fmt: skip
            same = (start + jnp.arange(m)) // b == pos // b
            off = start - starts[0]
            into = jax.lax.dynamic_slice_in_dim(s, off, m, axis=3)
            s = jax.lax.dynamic_update_slice_in_dim(s, into + jnp.where(same, s_l, 0.0), off, 3)
    else:
        k_pos, v = jnp.arange(S), v_BSHE
        s = jnp.zeros((B, H, T, S), acc)
        for level, b in enumerate(blocks):
            lo, hi = bounds[level], bounds[level + 1]
            s_l = jnp.einsum("bthe,bshe->bhts", q_BTHE[..., lo:hi], k_BSHE[..., lo:hi],
                             preferred_element_type=acc) / (hi - lo)  # fmt: skip
            same = q_pos[:, None] // b == k_pos[None, :] // b
            s = s + jnp.where(same[None, None], s_l, 0.0)
    # How many levels cover each pair (0: different level-0 blocks).
    count_TS = sum((q_pos[:, None] // b == k_pos[None, :] // b).astype(jnp.int32) for b in blocks)
    if normalize == "levels":
        s = s / L
    elif normalize == "block_levels":
        s = s / jnp.maximum(count_TS, 1).astype(acc)
    s = s * logit_scale
    if alibi_slopes is not None:
        distance_TS = jnp.abs(q_pos[:, None] - k_pos[None, :]).astype(acc)
        s = s - alibi_slopes.astype(acc)[None, :, None, None] * distance_TS
    keep_TS = (q_pos[:, None] >= k_pos[None, :]) & (count_TS > 0)
    return _pv(jax.nn.softmax(jnp.where(keep_TS[None, None], s, _MASK_VALUE), axis=-1), v)


def _attend_cached(attn, q_BTHE, k_cache, v_cache, pos):
    """The cached form of ``attn``'s kind, with the scales :func:`jaxlab.nn.attention_kinds.attend`
    gives it (the non-mha kinds take the model's factor beyond ``E^-1/2``)."""
    common = dict(alibi_slopes=attn.slopes)
    factor = attn.scale * math.sqrt(attn.head_dim)
    if attn.kind == "mha":
        return cached_attention(q_BTHE, k_cache, v_cache, pos, scale=attn.scale, **common)
    if attn.kind == "swa":
        return cached_sliding_window_attention(
            q_BTHE, k_cache, v_cache, pos, window=attn.window, scale=attn.scale, **common
        )
    if attn.kind == "gswa":
        return cached_global_sliding_window_attention(
            q_BTHE, k_cache, v_cache, pos, window=attn.window, logit_factor=factor, **common
        )
    if attn.kind == "mlr":
        return cached_mlr_attention(
            q_BTHE, k_cache, v_cache, pos, ranks=tuple(attn.ranks),
            normalize=None if attn.normalize == "none" else attn.normalize,
            seq_len=attn.seq_len, logit_scale=factor, **common,
        )  # fmt: skip
    raise ConfigError(f"cached decoding has no form for attention kind {attn.kind!r}")


def extend(
    model, tokens_BT: Int[Array, "B T"], cache: KVCache
) -> tuple[Float[Array, "B T V"], KVCache]:
    """Logits of ``T`` new tokens after the cached ones, and the cache with them written."""
    B, T = tokens_BT.shape
    pos = cache.pos
    positions_BT = jnp.broadcast_to(pos + jnp.arange(T), (B, T))
    x_BTD = model.embed(tokens_BT, positions_BT)
    new_k, new_v = [], []
    for block, k_cache, v_cache in zip(model.blocks, cache.k, cache.v, strict=True):
        attn = block.attn
        h_BTD = block.norm1(x_BTD)
        q_BTHE, k_BTKE, v_BTKE = attn.qkv(h_BTD)
        start = (0, pos, 0, 0)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k_BTKE.astype(k_cache.dtype), start)
        v_cache = jax.lax.dynamic_update_slice(v_cache, v_BTKE.astype(v_cache.dtype), start)
        o_BTHE = _attend_cached(attn, q_BTHE, k_cache, v_cache, pos)
        x_BTD = x_BTD + attn.out(o_BTHE.reshape(B, T, -1))
        x_BTD = x_BTD + block.mlp(block.norm2(x_BTD))
        new_k.append(k_cache)
        new_v.append(v_cache)
    logits_BTV = model.unembed(model.final_norm(x_BTD)).astype(jnp.float32)
    return logits_BTV, KVCache(tuple(new_k), tuple(new_v), pos + T)
