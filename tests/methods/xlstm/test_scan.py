"""Scanned blocks (``xLSTMConfig.scan_blocks``): the same model as the unscanned Python loop.

The reference is the unscanned model (one module per block) with the same parameters, copied in by
:func:`jaxlab.methods.xlstm.model.stack_blocks`: logits, gradients, cached decoding, the sharding
of every weight and the 7B parameter count must not change. The sharded-step contract for a
scanned model on 8 CPU devices is here too (the unscanned one is in the LM contract tests).
"""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import AxisRules, MeshConfig, batch_sharding, make_mesh, state_shardings
from jaxlab.lm.generate import teacher_forced_logits
from jaxlab.lm.task import cross_entropy
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.methods.xlstm.model import stack_blocks

CFG = xLSTMConfig(seq_len=16, num_layers=2, d_model=32, num_heads=4, chunk_size=4)
TOKENS = jax.random.randint(jax.random.key(0), (4, 15), 0, 256)  # off the chunk grid
SEGMENTS = jnp.array([[1] * 6 + [2] * 9, [1] * 15] * 2)  # a document reset inside rows 0 and 2


@pytest.fixture(scope="module")
def pair():
    """An unscanned model and a scanned one (remat on, so its checkpointed scan body is what is
    compared) holding the same parameters."""
    loop = xLSTM(CFG, rngs=nnx.Rngs(0))
    scanned_cfg = dataclasses.replace(CFG, scan_blocks=True, remat=True)
    scanned = nnx.eval_shape(lambda: xLSTM(scanned_cfg, rngs=nnx.Rngs(1)))  # shapes only
    stack_blocks(loop, scanned)  # every parameter is now the loop's
    return loop, scanned


def _rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


@pytest.fixture(scope="module")
def outputs(pair):
    """Per model: the logits of a packed batch and the gradients of its loss (one jit each)."""

    @nnx.jit
    def run(model):
        def loss(m):
            logits = m(TOKENS[:, :-1], segment_ids=SEGMENTS[:, :-1])
            return cross_entropy(logits, TOKENS[:, 1:])[0], logits

        (_, logits), grads = nnx.value_and_grad(loss, has_aux=True)(model)
        return logits, nnx.to_pure_dict(grads)

    return [run(model) for model in pair]


def test_scanned_blocks_are_stacked_on_a_leading_axis(pair):
    _, scanned = pair
    assert scanned.blocks.mlstm.q.kernel.shape == (2, 32, 16)
    assert scanned.blocks.mlp.up.kernel.shape[0] == 2


def test_scanned_logits_equal_the_loop(outputs):
    (ref, _), (got, _) = outputs
    assert _rel(got, ref) < 1e-5


def test_scanned_gradients_equal_the_loop(outputs):
    (_, g_loop), (_, g_scan) = outputs
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *(g_loop["blocks"][n] for n in range(2)))
    want = {**g_loop, "blocks": stacked}
    assert jax.tree.structure(want) == jax.tree.structure(g_scan)
    for ref, got in zip(jax.tree.leaves(want), jax.tree.leaves(g_scan), strict=True):
        assert _rel(got, ref) < 1e-5


def test_scanned_teacher_forced_decoding_equals_the_full_forward(pair):
    """A prompt off the chunk grid (7 tokens, chunk 4); the contract tests add one on it."""
    _, scanned = pair
    cache = scanned.init_cache(2, 16)
    assert cache.states.C.shape == (2, 2, 4, 4, 8)  # (layers, B, NH, Dqk, Dv)
    tokens = jnp.concatenate([TOKENS[:2], TOKENS[:2, :1]], axis=1)
    full = scanned(tokens)
    assert _rel(teacher_forced_logits(scanned, tokens, 7), full) < 1e-5


def test_stacked_weights_keep_their_sharding_with_the_layer_axis_replicated(pair):
    loop, scanned = pair
    with nnx.logical_axis_rules(AxisRules().as_tuple()):
        specs_loop = nnx.get_partition_spec(nnx.state(loop.blocks[0]))
        specs_scan = nnx.get_partition_spec(nnx.state(scanned.blocks))
    flat_loop = dict(nnx.to_flat_state(specs_loop))
    flat_scan = dict(nnx.to_flat_state(specs_scan))
    assert flat_loop.keys() == flat_scan.keys()
    for path, var in flat_loop.items():
        want = tuple(var.get_value())
        got = tuple(flat_scan[path].get_value())
        assert got == ((None, *want) if want else ()), path
    assert tuple(flat_scan["mlp", "up", "kernel"].get_value()) == (None, "fsdp", "tensor")


def test_scanning_an_slstm_model_is_a_one_line_error():
    with pytest.raises(ConfigError, match="scan_blocks"):
        dataclasses.replace(CFG, scan_blocks=True, slstm_blocks=(1,))


def test_stack_blocks_rejects_mismatched_models(pair):
    loop, _ = pair
    other_cfg = dataclasses.replace(CFG, scan_blocks=True, num_layers=1)
    other = nnx.eval_shape(lambda: xLSTM(other_cfg, rngs=nnx.Rngs(0)))
    with pytest.raises(ConfigError, match="differ in shape"):
        stack_blocks(loop, other)


def test_sharded_scanned_gradients_equal_single_device(pair, outputs):
    """The scanned model's logits and gradients on a (2, 2, 2) data x fsdp x tensor mesh of the 8
    CPU devices (stacked weights sharded over fsdp and tensor, the layer axis replicated) equal
    its single-device ones."""
    _, scanned = pair
    mesh, rules = make_mesh(MeshConfig(2, 2, 2)), AxisRules()
    graphdef, state = nnx.split(scanned)
    shardings = state_shardings(state, mesh, rules)
    q_kernel = nnx.to_pure_dict(shardings)["blocks"]["mlstm"]["q"]["kernel"]
    assert q_kernel.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor")
    state = jax.device_put(state, shardings)

    def run(state, tokens, segments):
        def loss(m):
            logits = m(tokens[:, :-1], segment_ids=segments[:, :-1])
            return cross_entropy(logits, tokens[:, 1:])[0], logits

        (_, logits), grads = nnx.value_and_grad(loss, has_aux=True)(nnx.merge(graphdef, state))
        return logits, nnx.to_pure_dict(grads)

    batch = jax.device_put((TOKENS, SEGMENTS), batch_sharding(mesh, rules))
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):
        logits, grads = jax.jit(run)(state, *batch)
    ref_logits, ref_grads = outputs[1]
    assert _rel(logits, ref_logits) < 1e-5
    for ref, got in zip(jax.tree.leaves(ref_grads), jax.tree.leaves(grads), strict=True):
        assert _rel(got, ref) < 1e-5
