"""The xLSTM block and model against the float64 numpy reference written from the authors' code.

:mod:`jaxlab.testing.xlstm_reference` knows nothing of jaxlab: its weights are the authors' tensors
(``xlstm_large``'s names, PyTorch ``(out, in)`` layout). :func:`load_into` is this test's own map
from those names onto jaxlab's parameters. Random weights are chosen so that every part matters
(the gate soft-cap bends, the logit cap bends, the norms' weights are not 1).

Tolerance: 1e-9 relative to max|reference| at float64; the two sides differ only in summation
order (the chunkwise and parallel forms sum within chunks, the reference token by token).

Every test runs at the released ``eps = 1e-6`` (the cell's normaliser offset): a row starts from
the zero state as the authors' model does. The last test checks a document packed after another
one: jaxlab closes the forget gate at its first token, which restarts the stabiliser at ``m = i``
instead of a fresh start's ``max(log f, i)``; at ``eps = 0`` that is exact, at ``eps = 1e-6`` it
is bounded (``eps`` enters in stabilised units).
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
    w = random_weights(REF)
    want, _ = model_forward(w, tokens[:, :S], REF)
    assert np.max(np.abs(want)) > 0.8 * REF.output_logit_soft_cap  # the cap bends
    assert_close(jaxlab_model(w, REF, cell_form=form)(jnp.asarray(tokens[:, :S])), want)


@pytest.mark.parametrize("form", FORMS)
def test_decode_step_with_a_carried_state_matches_the_reference(x64, tokens, form):
    """A prefill of S tokens (through the form), then one :func:`mlstm_step` from the cache."""
    w = random_weights(REF, seed=4)
    _, states = model_forward(w, tokens[:, :S], REF)
    want, _ = model_forward(w, tokens[:, S:], REF, states)
    model = jaxlab_model(w, REF, cell_form=form)
    _, cache = model.extend(jnp.asarray(tokens[:, :S]), model.init_cache(2, S + 1))
    got, cache = model.extend(jnp.asarray(tokens[:, S:]), cache)
    assert int(cache.pos) == S + 1
    assert_close(got, want)


@pytest.mark.parametrize(("eps", "tol"), [(0.0, TOL), (1e-6, 1e-6)])
def test_a_packed_document_matches_the_reference_from_a_fresh_start(x64, tokens, eps, tol):
    """The second document of a packed row against the reference run on that document alone:
    exact at eps = 0, within the stabiliser restart's eps-sized difference at 1e-6 (docstring)."""
    ref = dataclasses.replace(REF, eps=eps)
    w, cut = random_weights(ref), 4
    want, _ = model_forward(w, tokens[:, cut:S], ref)
    segment_ids = jnp.asarray(np.arange(S) >= cut, jnp.int32)[None].repeat(2, 0)
    model = jaxlab_model(w, ref, cell_form="chunkwise", document_mask=True)
    got = model(jnp.asarray(tokens[:, :S]), segment_ids=segment_ids)[:, cut:]
    assert_close(got, want, tol=tol)
