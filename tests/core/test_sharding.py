"""The mesh and logical-axis rules: parameters follow the rules, the init program lays the state
out as they say; mesh shapes fail clearly.

That a model's sharded train step equals its single-device step is part of the language-model
contract (``tests/contracts/test_language_models.py``), checked for every LM there.
"""

import jax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import AxisRules, MeshConfig, make_mesh, state_shardings
from jaxlab.core.step import build_train_program
from jaxlab.lm.task import LMTask
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


def test_the_init_program_lays_the_state_out_as_its_shardings_say():
    """build_train_program finds the shardings inside the init program's one trace; the state it
    creates must come out laid out as they say (parameters split over fsdp and tensor, the
    optimizer's moments alike), or every step would start by moving it."""
    mesh, rules = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2)), AxisRules()
    task = LMTask(build=lambda rngs: Transformer(MODEL, rngs=rngs), seq_len=MODEL.seq_len)
    cfg = TrainConfig(steps=2, batch_size=8, warmup_steps=0, tensorboard=False)
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):
        program = build_train_program(task, cfg, mesh, rules, init_key=jax.random.key(0))
        state = program.init(jax.random.key(0))
    pairs = jax.tree.leaves(
        jax.tree.map(lambda x, s: (x, s), state, program.shardings),
        is_leaf=lambda p: isinstance(p, tuple),
    )
    assert len(pairs) == len(jax.tree.leaves(program.abstract_state)) > 0
    split = 0
    for array, sharding in pairs:
        assert array.sharding.is_equivalent_to(sharding, array.ndim), (array.shape, sharding)
        split += not sharding.is_fully_replicated
    assert split > len(pairs) // 3  # embeddings, projections and their Adam moments


def test_batch_shapes_are_those_of_the_staged_batch():
    # What the loop traces its eval step on: global_batch's shapes, dtypes and shardings, for a
    # full global batch and for a process's own rows (LocalBatch), float64 made float32 as by JAX.
    import numpy as np

    from jaxlab.core.mesh import LocalBatch, global_batch, global_batch_shapes

    mesh, rules = make_mesh(), AxisRules()
    for batch in (
        {
            "x": np.ones((16, 3), np.float32),
            "y": np.arange(16.0),
            "i": np.arange(16, dtype=np.int32),
        },
        LocalBatch(x=np.ones((8, 2, 2), np.float32)),
    ):
        staged, shapes = global_batch(batch, mesh, rules), global_batch_shapes(batch, mesh, rules)
        assert staged.keys() == shapes.keys()
        for name, array in staged.items():
            assert (shapes[name].shape, shapes[name].dtype) == (array.shape, array.dtype)
            assert shapes[name].sharding == array.sharding
