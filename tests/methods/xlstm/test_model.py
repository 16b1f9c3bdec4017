"""The xLSTM 7B model: the paper's parameter count, the init of its gates, its forms and dtypes.

The language-model contract (causality, document resets, sharded steps, 64-device lowering,
structured linear maps, cached generation) is in ``tests/contracts/test_language_models.py``.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.nn.layers import count_params

TINY = xLSTMConfig(seq_len=16, num_layers=1, d_model=32, num_heads=4, chunk_size=4)


@pytest.mark.parametrize("scan_blocks", [True, False], ids=["scanned", "loop"])
def test_7b_parameter_count_matches_the_paper(scan_blocks):
    """The released model's count, with the blocks stacked (the preset) and as a loop."""
    cfg = xLSTMConfig.xlstm_7b(scan_blocks=scan_blocks)
    assert (cfg.qk_head_dim, cfg.v_head_dim, cfg.ff_dim) == (256, 512, 10944)
    n = count_params(nnx.eval_shape(lambda: xLSTM(cfg, rngs=nnx.Rngs(0))))
    assert n == 6_865_424_896


def test_gate_biases_start_where_the_paper_puts_them():
    model = xLSTM(dataclasses.replace(TINY, num_heads=8, d_model=64), rngs=nnx.Rngs(0))
    layer = model.blocks[0].mlstm
    np.testing.assert_allclose(layer.igate.bias[...], -10.0)
    np.testing.assert_allclose(layer.fgate.bias[...], np.linspace(3.0, 6.0, 8), rtol=1e-6)


def test_authors_init_follows_the_xlstm_jax_recipe():
    """``init="authors"``: zero gate kernels (gates start at their biases, the output gate at
    1/2), small init sqrt(2/(5E)) into the blocks and for both embeddings, Wang init 2/(L sqrt E)
    at the ends of the residual branches. Sample standard deviations over >= 2048 entries are
    within 10% (about six standard errors)."""
    E, L = 64, 3
    cfg = dataclasses.replace(TINY, d_model=E, num_layers=L, num_heads=4, init="authors")
    model = xLSTM(cfg, rngs=nnx.Rngs(0))
    small, wang = np.sqrt(2 / (5 * E)), 2 / (L * np.sqrt(E))
    for block in model.blocks:
        layer = block.mlstm
        for gate in (layer.igate.kernel, layer.fgate.kernel, layer.ogate.kernel):
            assert not np.any(np.asarray(gate[...]))
        np.testing.assert_allclose(layer.igate.bias[...], -10.0)
        np.testing.assert_allclose(layer.fgate.bias[...], np.linspace(3.0, 6.0, 4), rtol=1e-6)
        matrices = {
            small: (layer.q, layer.k, layer.v, block.mlp.gate, block.mlp.up),
            wang: (layer.out, block.mlp.down),
        }
        for std, maps in matrices.items():
            for linear in maps:
                np.testing.assert_allclose(np.std(linear.kernel[...]), std, rtol=0.1)
    np.testing.assert_allclose(np.std(model.embed.embedding[...]), small, rtol=0.1)
    np.testing.assert_allclose(np.std(model.unembed.kernel[...]), small, rtol=0.1)
    # The default rule is untouched: every gate kernel N(0, 0.02^2).
    gpt2 = xLSTM(dataclasses.replace(cfg, init="gpt2"), rngs=nnx.Rngs(0)).blocks[0].mlstm
    np.testing.assert_allclose(np.std(gpt2.igate.kernel[...]), 0.02, rtol=0.2)
    np.testing.assert_allclose(np.std(gpt2.ogate.kernel[...]), 0.02, rtol=0.1)


def test_cell_forms_give_the_same_logits():
    tokens = jax.random.randint(jax.random.key(0), (2, 13), 0, 256)
    logits = {
        form: xLSTM(dataclasses.replace(TINY, cell_form=form), rngs=nnx.Rngs(0))(tokens)
        for form in ("recurrent", "parallel", "chunkwise")
    }
    scale = float(jnp.max(jnp.abs(logits["recurrent"])))
    for form in ("parallel", "chunkwise"):
        np.testing.assert_allclose(logits[form], logits["recurrent"], atol=1e-5 * scale)


def test_cell_forms_give_the_same_finite_gradients_in_a_jitted_step():
    """The gradient of a jitted next-token loss, every form against the recurrent one. The parallel
    form's gate gradients were NaN here under the suite's XLA flags: its stabiliser took
    ``jnp.max``, whose gradient divides by the number of entries equal to the maximum, and XLA
    recomputed those entries for the backward pass with other rounding (none equal)."""
    tokens = jax.random.randint(jax.random.key(0), (4, 17), 0, 256)

    def grads(form):
        graphdef, state = nnx.split(
            xLSTM(dataclasses.replace(TINY, cell_form=form), rngs=nnx.Rngs(0))
        )

        def loss(state):
            logits = nnx.merge(graphdef, state)(tokens[:, :-1])
            return -jnp.mean(
                jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1)
            )

        return jax.jit(jax.grad(loss))(state)

    want = grads("recurrent")
    for form in ("parallel", "chunkwise"):
        got = grads(form)
        for path, g in jax.tree_util.tree_leaves_with_path(got):
            assert np.isfinite(np.asarray(g)).all(), (form, jax.tree_util.keystr(path))
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(g, w, atol=1e-5 * float(jnp.max(jnp.abs(w))) + 1e-9)


def test_logits_are_soft_capped():
    model = xLSTM(dataclasses.replace(TINY, logit_soft_cap=0.5), rngs=nnx.Rngs(0))
    logits = model(jnp.zeros((1, 4), jnp.int32))
    assert float(jnp.max(jnp.abs(logits))) < 0.5


def test_bfloat16_compute_keeps_the_state_in_float32():
    model = xLSTM(dataclasses.replace(TINY, dtype="bfloat16"), rngs=nnx.Rngs(0))
    logits, cache = model.extend(jnp.zeros((1, 5), jnp.int32), model.init_cache(1, 8))
    assert logits.dtype == jnp.float32
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(cache.states))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(num_heads=3), "num_heads=3 must divide"),
        (dict(cell_form="quadratic"), "cell_form"),
        (dict(norm="layernorm"), "RMSNorm"),
        (dict(chunk_size=0), "chunk_size"),
        (dict(init="xavier"), "model.init='xavier' is not an option"),
        (dict(dtype="float64"), "needs 64-bit JAX"),
    ],
)
def test_bad_configs_are_one_line_errors(overrides, match):
    with pytest.raises(ConfigError, match=match):
        dataclasses.replace(TINY, **overrides)
