"""Generation (jaxlab.lm.generate) for the Transformer's KV cache and the xLSTM's recurrent state.

The contract tests check teacher-forced cached logits against the full forward for every LM; here:
greedy generation equals repeatedly taking the argmax of the full forward (no cache), sampling
obeys temperature / top-k and its key, caches have the sizes they should, and misuse (an
unbatched prompt, ids outside the vocabulary included) is a one-line error. For the attention
kinds (swa, gswa, mlr): teacher-forced decoding equals the model's full forward, for prompts on and
off the MLR block grid and for caches shorter and longer than ``seq_len``; the cached MLR
attention, both its one-token (sliced) and its multi-token (masked) form, equals the dense
construction of ``mlr_attention_reference`` laid on the same block grid, for every normalisation.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.generate import decode_step, generate, prefill, sample, teacher_forced_logits
from jaxlab.lm.kv_cache import (
    cached_attention,
    cached_global_sliding_window_attention,
    cached_mlr_attention,
    cached_sliding_window_attention,
)
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.nn.attention import alibi_slopes, xla_attention
from jaxlab.nn.attention_kinds import global_sliding_window_attention, sliding_window_attention
from jaxlab.nn.mlr_attention import mlr_attention_reference

T = 16
MODELS = {
    "transformer_alibi": lambda: Transformer(
        TransformerConfig(seq_len=T, num_layers=1, d_model=32, num_heads=4, positions="alibi"),
        rngs=nnx.Rngs(0),
    ),
    "xlstm": lambda: xLSTM(
        xLSTMConfig(seq_len=T, num_layers=1, d_model=32, num_heads=4, chunk_size=4),
        rngs=nnx.Rngs(0),
    ),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def test_greedy_generation_is_the_argmax_of_the_full_forward(model):
    prompt = jax.random.randint(jax.random.key(0), (2, 5), 0, 256)
    out = generate(model, prompt, max_new_tokens=3)
    tokens = prompt
    for _ in range(3):  # no cache: the whole sequence again for every token
        tokens = jnp.concatenate([tokens, jnp.argmax(model(tokens)[:, -1:], -1)], axis=1)
    np.testing.assert_array_equal(out, tokens)


def test_teacher_forced_logits_equal_the_full_forward(model):
    tokens = jax.random.randint(jax.random.key(1), (1, 9), 0, 256)
    full = model(tokens)
    np.testing.assert_allclose(
        teacher_forced_logits(model, tokens, 5), full, atol=1e-5 * float(jnp.max(jnp.abs(full)))
    )


def test_a_fresh_cache_can_be_donated_to_the_decode_step(model):
    """Every cache leaf is its own buffer (donating one buffer twice is an XLA error)."""
    logits, cache = decode_step(model, jnp.zeros((1,), jnp.int32), model.init_cache(1, 8))
    assert logits.shape == (1, 256) and int(cache.pos) == 1


def test_sampling_follows_temperature_top_k_and_the_key():
    logits = jax.random.normal(jax.random.key(0), (4, 50))
    greedy = sample(logits)
    np.testing.assert_array_equal(greedy, jnp.argmax(logits, -1))
    top1 = sample(logits, jax.random.key(1), temperature=5.0, top_k=1)
    np.testing.assert_array_equal(top1, greedy)
    top3 = jax.lax.top_k(logits, 3)[1]
    keys = jax.random.split(jax.random.key(2), 20)
    draws = jnp.stack([sample(logits, k, temperature=2.0, top_k=3) for k in keys])
    assert bool(jnp.all(jnp.any(draws[..., None] == top3[None], axis=-1)))
    assert len(np.unique(np.asarray(draws))) > 4  # more than one token per row over 20 keys
    again = jnp.stack([sample(logits, k, temperature=2.0, top_k=3) for k in keys])
    np.testing.assert_array_equal(draws, again)


def test_the_xlstm_cache_does_not_grow_with_the_context_and_the_kv_cache_does():
    x, t = MODELS["xlstm"](), MODELS["transformer_alibi"]()
    sizes = lambda c: sum(a.size for a in jax.tree.leaves(c))  # noqa: E731
    assert sizes(x.init_cache(1, 16)) == sizes(x.init_cache(1, 4096))
    assert sizes(t.init_cache(1, 4096)) == 256 * sizes(t.init_cache(1, 16)) - 255  # pos scalar


def test_misuse_is_a_one_line_error():
    learned = Transformer(
        TransformerConfig(seq_len=T, num_layers=1, d_model=32, num_heads=4), rngs=nnx.Rngs(0)
    )
    prompt = jnp.zeros((1, 4), jnp.int32)
    with pytest.raises(ConfigError, match="exceeds model.seq_len"):
        generate(learned, prompt, max_new_tokens=T)
    with pytest.raises(ConfigError, match="explicit key"):
        generate(learned, prompt, max_new_tokens=2, temperature=1.0)
    with pytest.raises(ConfigError, match="cannot generate"):
        generate(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), prompt, max_new_tokens=2)


def test_prompts_are_checked_before_anything_compiles(model):
    """An unbatched prompt (T,) and ids outside [0, vocab) are one-line errors from ``generate``
    and ``prefill`` (before: an IndexError, and NaN or wrapped-around embeddings in silence)."""
    prompt = jnp.zeros((1, 4), jnp.int32)
    with pytest.raises(ConfigError, match=r"generate: tokens must be \(B, T\).*batch axis"):
        generate(model, prompt[0], max_new_tokens=2)
    for bad in (256, -1):
        with pytest.raises(ConfigError, match=r"generate: token ids must lie in \[0, 256\)"):
            generate(model, prompt.at[0, 2].set(bad), max_new_tokens=2)
        with pytest.raises(ConfigError, match=r"prefill: token ids must lie in \[0, 256\)"):
            prefill(model, prompt.at[0, 2].set(bad), max_len=8)
    with pytest.raises(ConfigError, match="integer ids"):
        generate(model, prompt.astype(jnp.float32), max_new_tokens=2)


def test_models_without_a_cache_are_refused_whatever_their_attention_kind():
    rmt = RMT(
        RMTConfig(seq_len=T, num_layers=1, rank=2, d_key=4, d_value=8, d_ff=16, attention="mlr",
                  attention_ranks=(4, 2, 2)),
        rngs=nnx.Rngs(0),
    )  # fmt: skip
    with pytest.raises(ConfigError, match="RMT cannot generate"):
        generate(rmt, jnp.zeros((1, 4), jnp.int32), max_new_tokens=2)


# ------------------------------------------------------------- the attention kinds' caches

KINDS = {  # name: (config fields, length of the teacher-forced sequence)
    "swa_alibi": (dict(attention="swa", attention_window=3, positions="alibi"), 12),
    "gswa_learned": (dict(attention="gswa", attention_window=5), T),
    # 24 > seq_len: the cache runs past the model's context into a second level-0 block.
    "mlr_alibi": (dict(attention="mlr", attention_ranks=(4, 2, 2), positions="alibi"), 24),
}


@pytest.fixture(scope="module", params=list(KINDS))
def kind_model(request):
    fields, length = KINDS[request.param]
    cfg = TransformerConfig(seq_len=T, num_layers=1, d_model=32, num_heads=4, **fields)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    return model, length, nnx.jit(lambda m, tokens: m(tokens))


def test_teacher_forced_decoding_equals_the_full_forward_for_every_kind(kind_model):
    """Prompts of 8 (on the MLR grid: blocks of 16, 8, 4) and 5 (off it) positions."""
    model, length, forward = kind_model
    tokens = jax.random.randint(jax.random.key(3), (2, length), 0, 256)
    full = forward(model, tokens)
    for prompt_len in (8, 5):
        np.testing.assert_allclose(
            teacher_forced_logits(model, tokens, prompt_len),
            full,
            atol=1e-5 * float(jnp.max(jnp.abs(full))),
        )


def test_greedy_generation_of_an_mlr_model_is_the_argmax_of_its_forward():
    fields, _ = KINDS["mlr_alibi"]
    model = Transformer(
        TransformerConfig(seq_len=T, num_layers=1, d_model=32, num_heads=4, **fields),
        rngs=nnx.Rngs(1),
    )
    prompt = jax.random.randint(jax.random.key(4), (2, 5), 0, 256)
    out = generate(model, prompt, max_new_tokens=6)
    assert out.shape == (2, 11)
    np.testing.assert_array_equal(out[:, :5], prompt)
    # Each generated token is the argmax of the full forward over the tokens before it.
    np.testing.assert_array_equal(out[:, 5:], jnp.argmax(jax.jit(model)(out)[:, 4:-1], -1))


def _reference_on_grid(q, k, v, *, ranks, normalize, seq_len, slopes, logit_scale):
    """The dense construction on ``seq_len``'s block grid: rows of ``seq_len`` positions each
    (level-0 blocks repeat; pairs in different ones are never scored), padded at the end."""
    S = q.shape[1]
    pad = -S % seq_len
    grow = lambda x: jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0)))  # noqa: E731
    rows = lambda x: grow(x).reshape(-1, seq_len, *x.shape[2:])  # noqa: E731
    out = mlr_attention_reference(rows(q), rows(k), rows(v), ranks=ranks, normalize=normalize,
                                  alibi_slopes=slopes, logit_scale=logit_scale)  # fmt: skip
    return out.reshape(1, -1, *v.shape[2:])[:, :S]


@pytest.mark.parametrize("normalize", [None, "levels", "block_levels"])
@pytest.mark.parametrize("S", [9, 24])  # a cache shorter and one longer than seq_len
def test_cached_mlr_attention_equals_the_dense_construction(normalize, S):
    ranks, H = (4, 2, 2), 2
    q, k, v = jax.random.normal(jax.random.key(S), (3, 1, S, H, sum(ranks)))
    slopes = alibi_slopes(H, "press")
    kw = dict(ranks=ranks, normalize=normalize, seq_len=T, logit_scale=0.7, alibi_slopes=slopes)
    want = _reference_on_grid(q, k, v, ranks=ranks, normalize=normalize, seq_len=T,
                              slopes=slopes, logit_scale=0.7)  # fmt: skip
    slots = jnp.arange(S)[None, :, None, None]

    @jax.jit
    @jax.vmap
    def step(t):  # one query at position t; the slots after it hold garbage that must not count
        k_t, v_t = jnp.where(slots <= t, k, 1e3), jnp.where(slots <= t, v, 1e3)
        return cached_mlr_attention(jax.lax.dynamic_slice_in_dim(q, t, 1, 1), k_t, v_t, t, **kw)

    steps = step(jnp.arange(S))[:, 0, 0]  # (S, H, D)
    np.testing.assert_allclose(steps, want[0], atol=1e-5)
    # Several queries at once (the prefill's form), from a non-zero position.
    np.testing.assert_allclose(
        cached_mlr_attention(q[:, 3:8], k, v, jnp.int32(3), **kw), want[:, 3:8], atol=1e-5
    )


def test_cached_attention_of_every_kind_is_float64_accurate_for_float64_inputs(x64):
    """With x64 on, the cached forms accumulate in float64: 1e-12 against the uncached forms
    (each checked against float64 numpy in its own tests), the prefill's form and one-token
    steps (their slices of the cache)."""
    ranks, H, S = (4, 2, 2), 2, 16
    q, k, v = jax.random.normal(jax.random.key(3), (3, 1, S, H, sum(ranks)), jnp.float64)
    slopes = jnp.asarray(alibi_slopes(H), jnp.float64)
    mlr = dict(ranks=ranks, normalize="block_levels", seq_len=S, logit_scale=0.7)
    cases = [
        (lambda *a: cached_attention(*a, scale=0.3, alibi_slopes=slopes),
         xla_attention(q, k, v, causal=True, scale=0.3, alibi_slopes=slopes)),
        (lambda *a: cached_sliding_window_attention(*a, window=3, scale=0.3, alibi_slopes=None),
         sliding_window_attention(q, k, v, window=3, scale=0.3)),
        (lambda *a: cached_global_sliding_window_attention(*a, window=3, logit_factor=1.0,
                                                           alibi_slopes=None),
         global_sliding_window_attention(q, k, v, window=3)),
        (lambda *a: cached_mlr_attention(*a, alibi_slopes=slopes, **mlr),
         _reference_on_grid(q, k, v, ranks=ranks, normalize="block_levels", seq_len=S,
                            slopes=slopes, logit_scale=0.7)),
    ]  # fmt: skip
    for cached, want in cases:
        got = cached(q, k, v, jnp.int32(0))
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)
        for t in (5, 15):
            step = cached(q[:, t : t + 1], k, v, jnp.int32(t))
            np.testing.assert_allclose(step, want[:, t : t + 1], atol=1e-12, rtol=0)
