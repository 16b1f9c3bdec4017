"""The authors' recipe as switches (Kuang et al. 2025, ``src/model.py``), each against a float64
numpy construction written from their code: per-head QK LayerNorm and the µP logit scales of MHA
(``k *= 8 / sqrt(d)`` before ``1 / sqrt(d)``: ``8/d``), bilinear MLR (``8 / (r_l 2^l)`` per level)
and bilinear BTT (``1/D``), and the RMS cap of the BTT/MLR factors
(``W / max(1, RMS(W) / (sqrt(min(d_in, d_out)) / d_in))``), in the ICL scorers and in the LM."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.transformer import Attention, TransformerConfig
from jaxlab.methods.structured_attention import BilinearBTTScore, BilinearMLRScore, DotProductScore
from jaxlab.methods.structured_attention.icl_model import ICLConfig
from jaxlab.nn.linear import rms_capped
from tests.methods.structured_attention import authors_btt

D = 16


@pytest.fixture(scope="module")
def x():
    return jax.random.normal(jax.random.key(0), (2, 6, D))


def _ln(v, scale):
    """The authors' ``LayerNorm(d, bias=False)``: ``F.layer_norm`` with eps 1e-5."""
    mu, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
    return (v - mu) / np.sqrt(var + 1e-5) * scale


def _scramble(norm, seed):
    norm.scale[...] = jnp.asarray(
        np.random.default_rng(seed).uniform(0.5, 1.5, norm.scale[...].shape), jnp.float32
    )


def _cap(w, d_in, d_out):
    """The authors' cap of a block ``d_in -> d_out`` (their ``init_scale``/``max_rms``)."""
    rms = np.sqrt(np.mean(w**2) + 1e-8)
    return w / max(1.0, rms / (min(d_in, d_out) ** 0.5 / d_in))


@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("scale", ["sqrt", "mup"])
def test_mha_qk_layernorm_and_mup_scale_match_the_authors(x, qk_norm, scale):
    H = 4
    hd = D // H
    score = DotProductScore(D, H, qk_norm=qk_norm, logit_scale=scale, rngs=nnx.Rngs(1))
    if qk_norm:
        _scramble(score.q_norm, 0)
        _scramble(score.k_norm, 1)
    xb = np.float64(x)
    q = (xb @ np.float64(score.q.dense_matrix())).reshape(2, 6, H, hd)
    k = (xb @ np.float64(score.k.dense_matrix())).reshape(2, 6, H, hd)
    if qk_norm:  # one LayerNorm of width d_head per side, shared by the heads
        q = _ln(q, np.float64(score.q_norm.scale[...]))
        k = _ln(k, np.float64(score.k_norm.scale[...]))
    if scale == "mup":
        k = k * 8 / np.sqrt(hd)  # theirs: then SDPA's 1 / sqrt(d)
    want = np.einsum("bthe,bshe->bhts", q, k) / np.sqrt(hd)
    np.testing.assert_allclose(score(x), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("cap", [False, True])
def test_bilinear_mlr_mup_scale_and_rms_cap_match_the_authors(x, cap):
    H, ranks = 2, (2, 1, 1)
    score = BilinearMLRScore(
        D, H, ranks=ranks, qk_norm=False, logit_scale="mup", rms_cap=cap, rngs=nnx.Rngs(2)
    )
    xb = np.float64(x)
    want = 0.0
    for level, r in enumerate(ranks):
        p, size = 2**level, D // 2**level
        sides = []
        for w in (score.wq[level], score.wk[level]):
            w = np.float64(w[...])  # (D, H r): p blocks (size, H r), as theirs (p, size, H r)
            if cap:
                w = _cap(w, size, H * r)
            w = w.reshape(p, size, H, r)
            y = np.zeros((2, 6, H, r * p))
            for b in range(p):
                part = xb[..., b * size : (b + 1) * size] @ w[b].reshape(size, H * r)
                y[..., np.arange(r) * p + b] = part.reshape(2, 6, H, r)
            sides.append(y)
        c = 1 / np.sqrt(r * p) * (8 / np.sqrt(r * p))  # theirs: 1/sqrt(r p), times 8/sqrt(r p)
        want = want + np.einsum("bthe,bshe->bhts", *sides) * c
    np.testing.assert_allclose(score(x), want, rtol=2e-5, atol=2e-5)
    # the factors start at muPify's N(0, 1/fan_in), fan-in D / 2^l, with or without the cap
    for level in range(len(ranks)):
        rms = float(jnp.sqrt(jnp.mean(score.wq[level][...] ** 2)))
        assert rms == pytest.approx((D / 2**level) ** -0.5, rel=0.3)


@pytest.mark.parametrize("cap", [False, True])
def test_bilinear_btt_mup_scale_and_rms_cap_match_the_authors(x, cap):
    H = 2
    score = BilinearBTTScore(
        D, H, btt_rank=1, qk_norm=False, logit_scale="mup", rms_cap=cap, rngs=nnx.Rngs(3)
    )
    c, d, b, a, s = score.maps[0].shape
    rng = np.random.default_rng(3)  # N(0, 1) entries: far above the cap
    wk, wq = rng.normal(size=(c, d, H * b * s)), rng.normal(size=(H * b, a, c * s))
    authors_btt.load_into(score, wk, wq)
    if cap:  # their W_K blocks map d -> b s, their W_Q blocks c s -> a; here each head's own
        wk = np.concatenate(
            [authors_btt.cap(w, d, b * s) for w in np.split(wk, H, axis=-1)], axis=-1
        )
        wq = np.concatenate([authors_btt.cap(w, c * s, a) for w in np.split(wq, H)])
    # µP: 1/D, no factor 8 (theirs)
    want = authors_btt.btt_scores(np.float64(x), wk, wq, H, None, logit_scale="mup")
    np.testing.assert_allclose(score(x), want, rtol=2e-5, atol=2e-5)


def test_cap_leaves_factors_below_it_alone():
    w = np.random.default_rng(0).normal(size=(16, 4))
    cap = 2**0.5 / 16  # a block 16 -> 2
    small = w / np.sqrt(np.mean(w**2)) * 0.5 * cap
    np.testing.assert_allclose(rms_capped(jnp.asarray(small), cap), small, rtol=1e-6)
    big = rms_capped(jnp.asarray(w), cap)  # above it: rescaled to RMS = cap
    np.testing.assert_allclose(np.sqrt(np.mean(np.float64(big) ** 2)), cap, rtol=1e-5)


@pytest.mark.parametrize("kind", ["mha", "swa"])
def test_lm_attention_qk_norm_and_mup_match_the_authors(kind):
    cfg = TransformerConfig(
        vocab_size=8, seq_len=6, num_layers=1, d_model=D, num_heads=2, qk_norm=True,
        logit_scale="mup", attention=kind, attention_window=2 if kind == "swa" else 0,
    )  # fmt: skip
    attn = Attention(cfg, 0, rngs=nnx.Rngs(5))
    _scramble(attn.q_norm, 2)
    _scramble(attn.k_norm, 3)
    h = jax.random.normal(jax.random.key(1), (2, 6, D))
    hb, hd = np.float64(h), D // 2
    q, k, v = (
        (hb @ np.float64(m.dense_matrix())).reshape(2, 6, 2, hd) for m in (attn.q, attn.k, attn.v)
    )
    q, k = _ln(q, np.float64(attn.q_norm.scale[...])), _ln(k, np.float64(attn.k_norm.scale[...]))
    s = np.einsum("bthe,bshe->bhts", q, k * 8 / np.sqrt(hd)) / np.sqrt(hd)
    i, j = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    keep = (j <= i) & ((i - j <= 2) if kind == "swa" else True)
    s = np.where(keep, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    o = np.einsum("bhts,bshe->bthe", p, v).reshape(2, 6, D) @ np.float64(attn.out.dense_matrix())
    np.testing.assert_allclose(attn(h, None), o, rtol=1e-4, atol=1e-5)


def test_recipe_defaults_and_bad_values():
    lm = TransformerConfig(vocab_size=8, seq_len=6, num_layers=1, d_model=D, num_heads=2)
    assert (lm.qk_norm, lm.logit_scale) == (False, "sqrt")  # mlr_lm's numbers do not move
    with pytest.raises(ConfigError, match="logit_scale"):
        TransformerConfig(vocab_size=8, seq_len=6, num_layers=1, logit_scale="mu")
    with pytest.raises(ConfigError, match="logit_scale"):
        ICLConfig(logit_scale="1/d")
    with pytest.raises(ConfigError, match="logit_scale"):
        DotProductScore(D, 2, logit_scale="8/d", rngs=nnx.Rngs(0))
