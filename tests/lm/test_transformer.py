"""The baseline Transformer: loss, presets and config errors.

Shapes, causality, document masking and sharding are the language-model contract
(``tests/contracts/test_language_models.py``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.task import cross_entropy
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.nn.layers import count_params


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
