"""Initialisation rules: the standard deviations by rule and role, and that each model's built
parameters follow the rule it is given (one rule for every matrix)."""

import math

import jax
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.nn.attention import alibi_slopes
from jaxlab.nn.init import unembedding_std, weight_std


def test_weight_std_by_rule():
    assert weight_std("gpt2", 512) == 0.02
    assert weight_std("fan_in", 64) == pytest.approx(1 / 8)
    assert weight_std("authors", 64) == pytest.approx(0.02 / 8)
    assert weight_std("fan_in", 64, residual_layers=2) == pytest.approx(1 / 8 / 2)
    assert unembedding_std("authors") == 0.0 and unembedding_std("fan_in") == 0.02
    with pytest.raises(ConfigError, match="unknown init rule 'he'"):
        weight_std("he", 4)


def _stds(model) -> dict[str, float]:
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.Param)):
        name = "/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path[:-1])
        out[name] = float(np.std(np.asarray(leaf)))
    return out


L, D, H, FF = 2, 64, 4, 256


@pytest.mark.parametrize("rule", ["gpt2", "fan_in", "authors"])
def test_transformer_follows_its_rule(rule):
    cfg = TransformerConfig(num_layers=L, d_model=D, num_heads=H, d_ff=FF, init=rule)
    stds = _stds(Transformer(cfg, rngs=nnx.Rngs(0)))
    res = math.sqrt(2 * L)
    expected = {
        "blocks/0/attn/q/kernel": weight_std(rule, D),
        "blocks/1/attn/out/kernel": weight_std(rule, D) / res,
        "blocks/0/mlp/up/kernel": weight_std(rule, D),
        "blocks/1/mlp/down/kernel": weight_std(rule, FF) / res,
        "embed/tokens/embedding": 0.02,
        "unembed/kernel": unembedding_std(rule),
    }
    for name, std in expected.items():
        assert stds[name] == pytest.approx(std, rel=0.1, abs=1e-12), name


@pytest.mark.parametrize("rule", ["gpt2", "fan_in", "authors"])
def test_rmt_follows_its_rule(rule):
    R, K, V = 4, 16, 16
    cfg = RMTConfig(num_layers=L, rank=R, d_key=K, d_value=V, d_ff=FF, init=rule)
    stds = _stds(RMT(cfg, rngs=nnx.Rngs(0)))
    res = math.sqrt(2 * L)
    expected = {
        "layers/0/attn/read_qkv": weight_std(rule, K),  # retrieval keys: fan-in Dk
        "layers/1/attn/write": weight_std(rule, R) / res,  # storage keys end the branch
        "layers/0/ff/read": weight_std(rule, K),
        "layers/0/ff/write": weight_std(rule, R) / res,
        "layers/0/ff/mlp/up/kernel": weight_std(rule, R * V),
        "layers/1/ff/mlp/down/kernel": weight_std(rule, FF),
        "store_embed": weight_std(rule, R),
        "read_out": weight_std(rule, K),
        "embed/tokens/embedding": 0.02,
        "unembed/kernel": unembedding_std(rule),
    }
    for name, std in expected.items():
        assert stds[name] == pytest.approx(std, rel=0.2, abs=1e-12), name


def test_gpt2_transformer_is_the_historical_default():
    assert TransformerConfig().init == "gpt2" and not TransformerConfig().layer_scaled_logits
    assert RMTConfig().init == "fan_in" and RMTConfig().layer_scaled_logits


def test_layer_scaled_logits_and_alibi_kind_reach_the_transformer():
    cfg = TransformerConfig(
        num_layers=3,
        d_model=96,
        num_heads=6,
        positions="alibi",
        alibi="geometric",
        layer_scaled_logits=True,
    )
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    assert [b.attn.scale for b in model.blocks] == pytest.approx(
        [16**-0.5 / (i + 1) for i in range(3)]
    )
    np.testing.assert_array_equal(model.blocks[0].attn.slopes, alibi_slopes(6, "geometric"))
    # One layer: dividing by layer index + 1 = 1 changes nothing.
    tokens = jax.numpy.arange(24)[None] % 256
    one = dict(num_layers=1, d_model=32, num_heads=2, seq_len=24)
    a = Transformer(TransformerConfig(**one), rngs=nnx.Rngs(1))(tokens)
    b = Transformer(TransformerConfig(**one, layer_scaled_logits=True), rngs=nnx.Rngs(1))(tokens)
    np.testing.assert_array_equal(a, b)
