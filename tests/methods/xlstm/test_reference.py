"""The xLSTM block and model against the float64 numpy reference written from the authors' code.

:mod:`jaxlab.testing.xlstm_reference` knows nothing of jaxlab: its weights are the authors' tensors
(``xlstm_large``'s names, PyTorch ``(out, in)`` layout). :func:`load_into` is this test's own map
from those names onto jaxlab's parameters. Random weights are chosen so that every part matters
(the gate soft-cap bends, the logit cap bends, the norms' weights are not 1).

Tolerance: 1e-9 relative to max|reference| at float64; the two sides differ only in summation
order (the chunkwise and parallel forms sum within chunks, the reference token by token).

The model tests run at ``eps = 0`` (the cell's normaliser offset), the block test at the
released ``eps = 1e-6``. The last test shows why: jaxlab closes the forget gate at a row's first
token (the document reset of :mod:`jaxlab.methods.xlstm.model`), which restarts the stabiliser at
``m_1 = i_1`` instead of the authors' ``max(log f_1 + 0, i_1)``. Both give the same ``h`` up to
where ``eps`` enters, which is in stabilised units, so at ``eps = 1e-6`` the logits differ by
about 1e-7 relative (bounded there at 1e-6).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.methods.xlstm.model import mLSTMBlock
from jaxlab.testing.xlstm_reference import (
    ReferenceConfig,
    block_forward,
    model_forward,
    random_weights,
)

# A tiny model with the 7B's proportions: qk head dim half the v head dim, SwiGLU ~2.67 E.
REF = ReferenceConfig(
    embedding_dim=32, num_heads=4, num_blocks=2, vocab_size=64, ffn_round_up_to_multiple_of=16
)
FORMS = ("parallel", "chunkwise", "recurrent")
S = 11  # off the chunk grid of 4
TOL = 1e-9


def jaxlab_config(ref: ReferenceConfig, **overrides) -> xLSTMConfig:
    """The jaxlab config of the reference's model, float64."""
    return xLSTMConfig(
        vocab_size=ref.vocab_size,
        num_layers=ref.num_blocks,
        d_model=ref.embedding_dim,
        num_heads=ref.num_heads,
        qk_dim_factor=ref.qk_dim_factor,
        v_dim_factor=ref.v_dim_factor,
        d_ff=ref.ffn_dim,
        gate_soft_cap=ref.gate_soft_cap,
        logit_soft_cap=ref.output_logit_soft_cap,
        norm_eps=ref.norm_eps,
        cell_eps=ref.eps,
        seq_len=16,
        chunk_size=4,
        dtype="float64",
        param_dtype="float64",
        **overrides,
    )


def _block_params(w: dict, n: int) -> dict:
    """Block ``n``'s authors' tensors as jaxlab's :class:`mLSTMBlock` parameters (``x W``
    kernels are the transposes of PyTorch's ``(out, in)`` weights)."""
    b, m = f"backbone.blocks.{n}.", f"backbone.blocks.{n}.mlstm_layer."

    def gate(g):
        return {"kernel": w[f"{m}{g}gate_preact.weight"].T, "bias": w[f"{m}{g}gate_preact.bias"]}

    return {
        "norm_mlstm": {"scale": w[b + "norm_mlstm.weight"]},
        "mlstm": {
            "q": {"kernel": w[m + "q.weight"].T},
            "k": {"kernel": w[m + "k.weight"].T},
            "v": {"kernel": w[m + "v.weight"].T},
            "ogate": {"kernel": w[m + "ogate_preact.weight"].T},
            "igate": gate("i"),
            "fgate": gate("f"),
            "norm": {"scale": w[m + "multihead_norm.weight"]},
            "out": {"kernel": w[m + "out_proj.weight"].T},
        },
        "norm_ffn": {"scale": w[b + "norm_ffn.weight"]},
        "mlp": {
            "gate": {"kernel": w[b + "ffn.proj_up_gate.weight"].T},
            "up": {"kernel": w[b + "ffn.proj_up.weight"].T},
            "down": {"kernel": w[b + "ffn.proj_down.weight"].T},
        },
    }


def load_into(module: nnx.Module, params: dict) -> None:
    """Replaces ``module``'s parameters by ``params`` (a pure dict of the same structure), after
    checking that every shape matches."""
    state = nnx.state(module)
    want = jax.tree.map(np.shape, nnx.to_pure_dict(state))
    assert jax.tree.map(np.shape, params) == want
    nnx.replace_by_pure_dict(state, jax.tree.map(jnp.asarray, params))
    nnx.update(module, state)


def jaxlab_model(w: dict, ref: ReferenceConfig, **overrides) -> xLSTM:
    model = xLSTM(jaxlab_config(ref, **overrides), rngs=nnx.Rngs(0))
    load_into(
        model,
        {
            "embed": {"embedding": w["embedding.weight"]},
            "blocks": {n: _block_params(w, n) for n in range(ref.num_blocks)},
            "out_norm": {"scale": w["backbone.out_norm.weight"]},
            "unembed": {"kernel": w["lm_head.weight"].T},
        },
    )
    return model


def assert_close(got, want, tol=TOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == np.float64
    err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert err < tol, f"max error {err:.3g} relative to max|reference| (tolerance {tol:g})"


@pytest.fixture(scope="module")
def tokens():
    return np.random.default_rng(1).integers(0, REF.vocab_size, (2, S + 1))


@pytest.mark.parametrize("form", FORMS)
def test_one_block_matches_the_reference(x64, form):
    """One block at the released eps, from a zero state and with no reset inside the sequence:
    pre-RMSNorm, q/k/v/o, capped gates, the cell, the per-head LayerNorm, output gate, out
    projection, residual, SwiGLU, residual."""
    ref = dataclasses.replace(REF, num_blocks=1)
    w = random_weights(ref, seed=2)
    block = mLSTMBlock(jaxlab_config(ref, cell_form=form), rngs=nnx.Rngs(0))
    load_into(block, _block_params(w, 0))
    x = np.random.default_rng(3).standard_normal((2, S, ref.embedding_dim))
    want, _ = block_forward(w, 0, x, ref)
    got, _ = block(jnp.asarray(x), jnp.zeros((2, S), bool))
    assert_close(got, want)


@pytest.mark.parametrize("form", FORMS)
def test_model_logits_match_the_reference(x64, tokens, form):
    ref = dataclasses.replace(REF, eps=0.0)
    w = random_weights(ref)
    want, _ = model_forward(w, tokens[:, :S], ref)
    assert np.max(np.abs(want)) > 0.8 * ref.output_logit_soft_cap  # the cap bends
    assert_close(jaxlab_model(w, ref, cell_form=form)(jnp.asarray(tokens[:, :S])), want)


@pytest.mark.parametrize("form", FORMS)
def test_decode_step_with_a_carried_state_matches_the_reference(x64, tokens, form):
    """A prefill of S tokens (through the form), then one :func:`mlstm_step` from the cache."""
    ref = dataclasses.replace(REF, eps=0.0)
    w = random_weights(ref, seed=4)
    _, states = model_forward(w, tokens[:, :S], ref)
    want, _ = model_forward(w, tokens[:, S:], ref, states)
    model = jaxlab_model(w, ref, cell_form=form)
    _, cache = model.extend(jnp.asarray(tokens[:, :S]), model.init_cache(2, S + 1))
    got, cache = model.extend(jnp.asarray(tokens[:, S:]), cache)
    assert int(cache.pos) == S + 1
    assert_close(got, want)


def test_eps_enters_as_the_authors_up_to_the_row_start_reset(x64, tokens):
    """At the released eps = 1e-6 the model and the reference agree to ~eps, not to 1e-9: the
    row-start reset (module docstring) changes the stabiliser, and eps enters in its units."""
    w = random_weights(REF)
    want, _ = model_forward(w, tokens[:, :S], REF)
    got = jaxlab_model(w, REF, cell_form="recurrent")(jnp.asarray(tokens[:, :S]))
    assert_close(got, want, tol=1e-6)
