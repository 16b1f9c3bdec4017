"""The baseline Transformer's key/value cache: preallocated to a maximum length, written in place.

:func:`init_cache` allocates, per layer, keys and values ``(B, max_len, K, D)`` (zeros) and a write
position; :func:`extend` runs ``T`` new tokens through the model's own submodules (embedding,
norms, projections, MLP, unembedding), writes their keys and values at ``[pos, pos + T)`` with
``lax.dynamic_update_slice`` (in place under ``jit`` with donation) and attends each new query to
every cached key at or before its position, with the model's scale and ALiBi slopes. Its logits
equal :class:`~jaxlab.nn.transformer.Transformer`'s full forward on the same tokens (tested in
``tests/nn/test_generate.py``); a cache holds one document per row (no segment ids). The memory of
a decode step grows with ``max_len``: this is what the xLSTM's constant-size state is compared with.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxlab.core.errors import ConfigError

__all__ = ["cached_attention", "extend", "init_cache"]

_MASK_VALUE = -1e30  # as the reference attention's masked logits: exp() underflows to exactly 0


def init_cache(model, batch_size: int, max_len: int) -> dict:
    """Zero keys/values of ``max_len`` positions for every layer of ``model`` and position 0."""
    cfg = model.cfg
    if cfg.attention != "mha":
        raise ConfigError(
            f"cached decoding supports model.attention='mha' only, not {cfg.attention!r}; "
            "generate with an mha model or score full sequences with the model's forward"
        )
    if cfg.positions == "learned" and max_len > cfg.seq_len:
        raise ConfigError(
            f"max_len={max_len} exceeds model.seq_len={cfg.seq_len} (learned positions); "
            "generate fewer tokens or use positions=alibi"
        )
    shape = (batch_size, max_len, cfg.kv_heads, cfg.head_dim)
    # A fresh buffer per leaf: a donated cache must not hold one buffer twice.
    zeros = lambda: tuple(jnp.zeros(shape, cfg.dtype) for _ in range(cfg.num_layers))  # noqa: E731
    return {"k": zeros(), "v": zeros(), "pos": jnp.zeros((), jnp.int32)}


def cached_attention(
    q_BTHD: Float[Array, "B T H D"],
    k_BSKD: Float[Array, "B S K D"],
    v_BSKD: Float[Array, "B S K D"],
    pos: Int[Array, ""],
    *,
    scale: float,
    alibi_slopes: Float[Array, " H"] | None,
) -> Float[Array, "B T H D"]:
    """Queries at positions ``pos + t`` against a cache of ``S`` slots (slot s = position s):
    float32 logits, keys after the query (and the unwritten slots) masked."""
    B, T, H, D = q_BTHD.shape
    S, K = k_BSKD.shape[1:3]
    q_BTKGD = q_BTHD.reshape(B, T, K, H // K, D)
    logits = jnp.einsum("btkgd,bskd->bkgts", q_BTKGD, k_BSKD, preferred_element_type=jnp.float32)
    logits_BHTS = logits.reshape(B, H, T, S) * scale
    q_pos, k_pos = pos + jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    if alibi_slopes is not None:
        distance_TS = jnp.abs(q_pos - k_pos).astype(jnp.float32)
        logits_BHTS -= alibi_slopes.astype(jnp.float32)[None, :, None, None] * distance_TS
    logits_BHTS = jnp.where((q_pos >= k_pos)[None, None], logits_BHTS, _MASK_VALUE)
    probs_BKGTS = (
        jax.nn.softmax(logits_BHTS, axis=-1).astype(v_BSKD.dtype).reshape(B, K, H // K, T, S)
    )
    return jnp.einsum("bkgts,bskd->btkgd", probs_BKGTS, v_BSKD).reshape(B, T, H, D)


def extend(model, tokens_BT: Int[Array, "B T"], cache: dict) -> tuple[Float[Array, "B T V"], dict]:
    """Logits of ``T`` new tokens after the cached ones, and the cache with them written."""
    B, T = tokens_BT.shape
    pos = cache["pos"]
    positions_BT = jnp.broadcast_to(pos + jnp.arange(T), (B, T))
    x_BTD = model.embed(tokens_BT, positions_BT)
    new_k, new_v = [], []
    for block, k_cache, v_cache in zip(model.blocks, cache["k"], cache["v"], strict=True):
        attn = block.attn
        h_BTD = block.norm1(x_BTD)
        q_BTHD = attn.q(h_BTD).reshape(B, T, attn.num_heads, attn.head_dim)
        k_BTKD = attn.k(h_BTD).reshape(B, T, attn.kv_heads, attn.head_dim)
        v_BTKD = attn.v(h_BTD).reshape(B, T, attn.kv_heads, attn.head_dim)
        start = (0, pos, 0, 0)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k_BTKD.astype(k_cache.dtype), start)
        v_cache = jax.lax.dynamic_update_slice(v_cache, v_BTKD.astype(v_cache.dtype), start)
        o_BTHD = cached_attention(
            q_BTHD, k_cache, v_cache, pos, scale=attn.scale, alibi_slopes=attn.slopes
        )
        x_BTD = x_BTD + attn.out(o_BTHD.reshape(B, T, -1))
        x_BTD = x_BTD + block.mlp(block.norm2(x_BTD))
        new_k.append(k_cache)
        new_v.append(v_cache)
    logits_BTV = model.unembed(model.final_norm(x_BTD)).astype(jnp.float32)
    return logits_BTV, {"k": tuple(new_k), "v": tuple(new_v), "pos": pos + T}
