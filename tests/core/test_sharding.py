"""The mesh and logical-axis rules: parameters follow the rules; mesh shapes fail clearly.

That a model's sharded train step equals its single-device step is part of the language-model
contract (``tests/contracts/test_language_models.py``), checked for every LM there.
"""

import jax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import AxisRules, MeshConfig, make_mesh, state_shardings
from jaxlab.lm.transformer import Transformer, TransformerConfig

MODEL = TransformerConfig(seq_len=16, num_layers=2, d_model=32, num_heads=4, num_kv_heads=2)


def test_parameters_follow_the_logical_rules():
    mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
    model = nnx.eval_shape(lambda: Transformer(MODEL, rngs=nnx.Rngs(0)))
    shardings = state_shardings(nnx.state(model), mesh, AxisRules())
    assert shardings["embed"]["tokens"]["embedding"].spec == P("tensor", "fsdp")
    assert shardings["blocks"][0]["mlp"]["up"]["kernel"].spec == P("fsdp", "tensor")
    assert shardings["blocks"][0]["attn"]["out"]["kernel"].spec == P("tensor", "fsdp")


def test_mesh_shape_errors_are_config_errors():
    assert make_mesh(MeshConfig()).devices.shape == (jax.device_count(), 1, 1)
    with pytest.raises(ConfigError, match="do not divide"):
        make_mesh(MeshConfig(data=-1, fsdp=3))
    with pytest.raises(ConfigError, match="at most one"):
        MeshConfig(data=-1, fsdp=-1)
