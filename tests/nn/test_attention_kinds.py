"""Attention kinds: SWA and Global+SWA against numpy, the mha path unchanged bit for bit, the
config checks, and every kind in the Transformer and the RMT."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.nn.attention import dot_product_attention
from jaxlab.nn.attention_kinds import (
    attend,
    attention_mix_flops,
    global_sliding_window_attention,
    sliding_window_attention,
)


def _probs(q, k, scale, window):
    """Float64 causal (windowed) softmax ``(B, H, T, T)``, loop-free numpy."""
    s = np.einsum("bthd,bshd->bhts", np.float64(q), np.float64(k)) * scale
    i, j = np.meshgrid(np.arange(q.shape[1]), np.arange(q.shape[1]), indexing="ij")
    allowed = j <= i if window is None else (j <= i) & (i - j <= window)
    s = np.where(allowed, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def _qkv(seed, B=2, T=12, H=2, D=8):
    return tuple(
        jax.random.normal(kk, (B, T, H, D)) for kk in jax.random.split(jax.random.key(seed), 3)
    )


def test_sliding_window_matches_numpy():
    q, k, v = _qkv(0)
    want = np.einsum("bhts,bshd->bthd", _probs(q, k, 8**-0.5, 3), np.float64(v))
    np.testing.assert_allclose(sliding_window_attention(q, k, v, window=3), want, atol=2e-5)


def test_global_sliding_window_adds_the_two_halves_probabilities():
    q, k, v = _qkv(1)
    p = _probs(q[..., :4], k[..., :4], 0.5, None) + _probs(q[..., 4:], k[..., 4:], 0.5, 2)
    want = np.einsum("bhts,bshd->bthd", p, np.float64(v))
    got = global_sliding_window_attention(q, k, v, window=2)
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_float64_inputs_give_float64_accurate_window_kinds(x64):
    """With x64 on, SWA and GSWA accumulate in float64: 1e-12 against float64 numpy."""
    q, k, v = (x.astype(jnp.float64) for x in _qkv(3))
    want = np.einsum("bhts,bshd->bthd", _probs(q, k, 8**-0.5, 3), np.float64(v))
    got = sliding_window_attention(q, k, v, window=3)
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)
    p = _probs(q[..., :4], k[..., :4], 0.5, None) + _probs(q[..., 4:], k[..., 4:], 0.5, 2)
    got = global_sliding_window_attention(q, k, v, window=2)
    np.testing.assert_allclose(got, np.einsum("bhts,bshd->bthd", p, np.float64(v)), atol=1e-12)


def test_mha_kind_is_the_plain_dispatch_bit_for_bit():
    q, k, v = _qkv(2)
    seg = jnp.array([[1] * 4 + [2] * 8, [1] * 12])
    kw = dict(scale=0.3, segment_ids=seg, impl="xla")
    np.testing.assert_array_equal(
        attend(q, k, v, kind="mha", **kw), dot_product_attention(q, k, v, causal=True, **kw)
    )


TINY = dict(vocab_size=32, seq_len=16, num_layers=2, d_model=16, num_heads=2)
KINDS = {
    "mha": {},
    "swa": dict(attention_window=4),
    "gswa": dict(attention_window=4),
    "mlr": dict(attention_ranks=(4, 2, 1, 1)),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_in_the_transformer_and_the_rmt_is_causal_and_document_masked(kind):
    tokens = jax.random.randint(jax.random.key(0), (1, 16), 1, 32)
    seg = jnp.array([[1] * 7 + [2] * 9])
    rcfg = RMTConfig(
        vocab_size=32, seq_len=16, num_layers=2, rank=2, d_key=8, d_value=8, d_ff=32,
        attention=kind, **KINDS[kind],
    )  # fmt: skip
    models = (
        Transformer(TransformerConfig(**TINY, attention=kind, **KINDS[kind]), rngs=nnx.Rngs(0)),
        RMT(rcfg, rngs=nnx.Rngs(0)),
    )
    for model in models:
        forward = jax.jit(lambda t, s, m=model: m(t, segment_ids=s))
        logits = forward(tokens, seg)
        assert logits.shape == (1, 16, 32) and bool(jnp.isfinite(logits).all())
        late = forward(tokens.at[0, 12:].set(5), seg)  # the future leaves the past alone
        np.testing.assert_allclose(late[0, :12], logits[0, :12], atol=1e-5)
        assert not np.allclose(late[0, 12:], logits[0, 12:])
        other = forward(tokens.at[0, :7].set(3), seg)  # the first document leaves the second
        np.testing.assert_allclose(other[0, 7:], logits[0, 7:], atol=1e-5)


def test_default_kind_is_mha_and_leaves_the_model_unchanged():
    cfg = TransformerConfig(**TINY)
    assert cfg.attention == "mha"
    tokens = jax.random.randint(jax.random.key(1), (1, 16), 0, 32)
    a = Transformer(cfg, rngs=nnx.Rngs(3))(tokens)
    b = Transformer(dataclasses.replace(cfg, attention_window=5), rngs=nnx.Rngs(3))(tokens)
    np.testing.assert_array_equal(a, b)  # mha ignores the other kinds' options


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(attention="flash"), "attention='flash' is not an option"),
        (dict(attention="swa"), "attention_window=0 must be >= 1"),
        (dict(attention="mlr", attention_ranks=(4, 2)), "sum to 6"),
        (dict(attention="mlr", attention_ranks=(4, 4), num_kv_heads=1), "kv heads"),
        (dict(attention="mlr", attention_ranks=(8,), attention_normalize="rows"), "normalize"),
    ],
)
def test_bad_attention_options_fail_when_the_config_is_built(fields, match):
    with pytest.raises(ConfigError, match=match):
        TransformerConfig(**{**TINY, **fields})


# ---------------------------------------------------------------------------- FLOP accounting

FT, FH, FD, FW, FRANKS = 16, 2, 8, 3, (4, 2, 1, 1)  # T, heads, head dim, window, MLR ranks


def _scored_pairs(kind, T, window, ranks):
    """Float64 ``(channels contracted for the logits, channels summed for the values)`` per pair
    ``(T, T)`` of one head, from the kinds' definitions (not from the code under test): MHA every
    causal pair with all D channels; SWA the window; GSWA half the channels on every pair and half
    on the window, the values over every pair; MLR level ``l`` (blocks of ``T / 2^l``) adds its
    ``r_l`` channels on the pairs inside one of its blocks, the values over every pair."""
    i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    causal = (j <= i).astype(np.float64)
    local = causal * (i - j <= window)
    if kind == "mha":
        return FD * causal, FD * causal
    if kind == "swa":
        return FD * local, FD * local
    if kind == "gswa":
        return FD / 2 * causal + FD / 2 * local, FD * causal
    qk = sum(r * causal * (i // (T >> lv) == j // (T >> lv)) for lv, r in enumerate(ranks))
    return qk, FD * causal


@pytest.mark.parametrize("kind", ["mha", "swa", "gswa", "mlr"])
def test_mix_flops_count_the_pairs_each_kind_scores(kind):
    qk, v = _scored_pairs(kind, FT, FW, FRANKS)
    kw = dict(seq_len=FT, num_heads=FH, head_dim=FD, window=FW, ranks=FRANKS)
    # causal: the mean over the T queries; full context (Kaplan): every query as the last one.
    want_causal = FH * 2 * (qk.sum() + v.sum()) / FT
    want_full = FH * 2 * (qk[-1].sum() + v[-1].sum())
    assert attention_mix_flops(kind, causal=True, **kw) == pytest.approx(want_causal, rel=1e-12)
    assert attention_mix_flops(kind, causal=False, **kw) == pytest.approx(want_full, rel=1e-12)


def test_flops_per_token_takes_the_attention_kind():
    base = TransformerConfig(seq_len=FT, num_layers=2, d_model=FH * FD, num_heads=FH)
    mlr = dataclasses.replace(base, attention="mlr", attention_ranks=FRANKS)
    kw = dict(seq_len=FT, num_heads=FH, head_dim=FD, ranks=FRANKS, causal=True)
    a, b = base.flops_per_token(causal=True), mlr.flops_per_token(causal=True)
    assert a._replace(attention_mix=0) == b._replace(attention_mix=0)
    assert b.attention_mix == 2 * attention_mix_flops("mlr", **kw)
    # Kaplan's convention for MHA: every query over the T keys, 4 T D per head and layer.
    assert base.flops_per_token().attention_mix == 2 * 4 * FT * FH * FD
