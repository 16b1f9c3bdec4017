"""Generation (jaxlab.nn.generate) for the Transformer's KV cache and the xLSTM's recurrent state.

The contract tests check teacher-forced cached logits against the full forward for every LM; here:
greedy generation equals repeatedly taking the argmax of the full forward (no cache), sampling
obeys temperature / top-k and its key, caches have the sizes they should, and misuse is a
one-line error.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.nn.generate import decode_step, generate, sample, teacher_forced_logits
from jaxlab.nn.transformer import Transformer, TransformerConfig

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
    assert logits.shape == (1, 256) and int(cache["pos"]) == 1


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


@pytest.mark.parametrize("kind", ["swa", "gswa", "mlr"])
def test_cached_decoding_refuses_attention_kinds_it_does_not_implement(kind):
    # The KV cache attends with full causal MHA; serving another kind from it would silently
    # give logits that differ from the model's forward.
    extra = {"attention_window": 4} if kind in ("swa", "gswa") else {}
    if kind == "mlr":
        extra = {"attention_ranks": (4, 4)}
    cfg = TransformerConfig(
        seq_len=T, num_layers=1, d_model=32, num_heads=4, positions="alibi", attention=kind, **extra
    )
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    with pytest.raises(ConfigError, match="supports model.attention='mha' only"):
        generate(model, jnp.zeros((1, 4), jnp.int32), max_new_tokens=2)
