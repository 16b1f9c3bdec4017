"""The whole RMT forward against float64 numpy written from the paper and the authors' code.

``test_model``'s paper-layout reference borrows the model's own MLP, embedding and unembedding, and
``test_layer_scaled_logits`` pins the attention branch alone; this test rebuilds the rest in numpy:
the embedding split into R data vectors and stored (paper Sec. 3, eq. 1), the feed-forward branch
(Sec. 3.2; the authors' ``src/models/rmt/mlp.py``: RMSNorm over the token's matrix, retrieval of R
vectors, ``W2 gelu(W1 .)`` with haliax's tanh GELU, storage with the write keys), the pre-norm
residual sums, and the final norm, retrieval and unembedding (``src/models/rmt/rmt.py``). Only the
weights are read from the model.
"""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.methods.rmt import RMT, RMTConfig
from tests.methods.rmt.test_layer_scaled_logits import _attention_reference

CFG = RMTConfig(seq_len=6, num_layers=2, rank=3, d_key=4, d_value=5, d_ff=7, vocab_size=11)


def _f64(a):
    return np.asarray(a, np.float64)


def _rmsnorm(x, gain):
    """RMSNorm over a token's whole ``(Dv, Dk)`` matrix (jaxlab's ``X^T`` layout), eps 1e-6."""
    return (
        _f64(gain).reshape(x.shape[-2:]) * x / np.sqrt((x**2).mean((-2, -1), keepdims=True) + 1e-6)
    )


def _gelu(x):
    """The tanh GELU (Hendrycks & Gimpel 2016), haliax's ``gelu`` default in the authors' MLP."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _ff_reference(x, ff):
    """Sec. 3.2: ``store(W2 gelu(W1 concat_h(r_h^T Norm(X))), w)`` for one token matrix each."""
    B, T = x.shape[:2]
    y_BTRE = np.einsum("btem,mr->btre", _rmsnorm(x, ff.norm.scale[...]), _f64(ff.read[...]))
    h = _gelu(y_BTRE.reshape(B, T, -1) @ _f64(ff.mlp.up.kernel[...]))
    out_BTRE = (h @ _f64(ff.mlp.down.kernel[...])).reshape(y_BTRE.shape)
    return np.einsum("btre,rm->btem", out_BTRE, _f64(ff.write[...]))


def test_rmt_logits_match_a_float64_numpy_forward():
    model = RMT(CFG, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)  # numpy draws: no per-shape compilations
    for layer in model.layers:  # non-trivial gains, and O(1) logits so that the softmax bends
        for norm in (layer.attn.norm, layer.ff.norm):
            norm.scale[...] = jnp.asarray(rng.uniform(0.5, 1.5, norm.scale.shape), jnp.float32)
        layer.attn.read_qkv[...] = jnp.asarray(
            rng.normal(size=layer.attn.read_qkv.shape), jnp.float32
        )
    model.final_norm.scale[...] = jnp.asarray(rng.uniform(0.5, 1.5, CFG.residual_size), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, CFG.vocab_size, (2, CFG.seq_len)), jnp.int32)

    R, V = CFG.rank, CFG.d_value
    e = _f64(model.embed.tokens.embedding[...])[np.asarray(tokens)]  # (B, T, R Dv)
    x = np.einsum("btre,rm->btem", e.reshape(*e.shape[:2], R, V), _f64(model.store_embed[...]))
    for i, layer in enumerate(model.layers):
        a = layer.attn
        x = x + _attention_reference(
            x, _f64(a.norm.scale[...]), _f64(a.read_qkv[...]), _f64(a.write[...]), i, V
        )
        x = x + _ff_reference(x, layer.ff)
    y = np.einsum(
        "btem,mr->btre", _rmsnorm(x, model.final_norm.scale[...]), _f64(model.read_out[...])
    )
    want = y.reshape(*y.shape[:2], -1) @ _f64(model.unembed.kernel[...])

    got = np.asarray(nnx.jit(lambda m, t: m(t))(model, tokens), np.float64)  # one program
    # float32 model against float64 numpy: rounding only, relative to the logits' size
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
