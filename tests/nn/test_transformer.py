"""The baseline Transformer: shapes, causality, document masking, presets and config errors."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.nn.layers import count_params
from jaxlab.nn.lm_task import cross_entropy
from jaxlab.nn.transformer import Transformer, TransformerConfig

TINY = TransformerConfig(seq_len=16, num_layers=2, d_model=32, num_heads=4)


@pytest.fixture(scope="module", params=["learned", "alibi"])
def model_fn(request):
    cfg = TransformerConfig(**{**TINY.__dict__, "positions": request.param})
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    apply = jax.jit(lambda tokens, seg: nnx.merge(graphdef, state)(tokens, segment_ids=seg))
    return apply


def test_logits_shape_and_dtype(model_fn):
    logits = model_fn(jnp.zeros((2, 16), jnp.int32), jnp.ones((2, 16), jnp.int32))
    chex.assert_shape(logits, (2, 16, 256))
    chex.assert_type(logits, jnp.float32)
    chex.assert_tree_all_finite(logits)


def test_causal_future_tokens_do_not_change_the_past(model_fn):
    tokens = jax.random.randint(jax.random.key(0), (1, 16), 1, 256)
    changed = tokens.at[0, 10:].set(7)
    seg = jnp.ones((1, 16), jnp.int32)
    a, b = model_fn(tokens, seg), model_fn(changed, seg)
    np.testing.assert_allclose(a[0, :10], b[0, :10], atol=1e-5)
    assert not np.allclose(a[0, 10:], b[0, 10:])


def test_document_mask_isolates_documents(model_fn):
    tokens = jax.random.randint(jax.random.key(1), (1, 16), 1, 256)
    seg = jnp.array([[1] * 6 + [2] * 10])
    other_first_doc = tokens.at[0, :6].set(3)
    a, b = model_fn(tokens, seg), model_fn(other_first_doc, seg)
    # With learned positions the second document sees absolute positions, which are the same here.
    np.testing.assert_allclose(a[0, 6:], b[0, 6:], atol=1e-5)


def test_cross_entropy_against_numpy():
    logits = jax.random.normal(jax.random.key(2), (2, 3, 5))
    targets = jnp.array([[0, 1, 2], [3, 4, 0]])
    ce, z = cross_entropy(logits, targets, z_loss=1e-4)
    lg = np.asarray(logits, np.float64)
    lse = np.log(np.exp(lg).sum(-1))
    want = np.mean(lse - np.take_along_axis(lg, np.asarray(targets)[..., None], -1)[..., 0])
    assert float(ce) == pytest.approx(want, rel=1e-6)
    assert float(z) == pytest.approx(1e-4 * np.mean(lse**2), rel=1e-6)


@pytest.mark.parametrize(
    "size, millions", [("49m", 49.4), ("160m", 162.5), ("260m", 264.0), ("405m", 405.5)]
)
def test_paper_presets_parameter_counts(size, millions):
    # Counted from the abstract model; the RMT paper (Table 2) rounds to 49/160/260/405M.
    model = nnx.eval_shape(lambda: Transformer(TransformerConfig.paper(size), rngs=nnx.Rngs(0)))
    assert count_params(model) / 1e6 == pytest.approx(millions, abs=0.05)


def test_invalid_configs_say_what_to_change():
    with pytest.raises(ConfigError, match="num_heads=5 must divide model.d_model=32"):
        TransformerConfig(d_model=32, num_heads=5)
    with pytest.raises(ConfigError, match="num_kv_heads=3 must divide"):
        TransformerConfig(d_model=32, num_heads=4, num_kv_heads=3)
    with pytest.raises(ConfigError, match="unknown Transformer preset"):
        TransformerConfig.paper("7b")
