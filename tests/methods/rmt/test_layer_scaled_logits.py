"""RMT's layer-scaled attention logits, pinned against a float64 numpy layer built from the authors'
code, with the scale computed from the layer index here rather than read from the model.

The authors' ``SHA.forward`` (github.com/bmac3/residual-matrix-transformer,
``src/models/rmt/attention.py``) computes ``q . k * mup_scaling``, divides it by ``layer_idx + 1``
with ``layer_idx`` the 0-based index of ``hax.arange(Layer)`` (``src/models/rmt/rmt.py``), and only
then adds the ALiBi bias ``-slope_h * (i - j)`` with slopes ``geomspace(2^(-8/R), 2^(-8))``; the
paper gives the same division for stability (Sec. 4.3). ``mup_scaling`` is
``attn_multiplier * sqrt(base Dv) / Dv``, i.e. ``1/sqrt(Dv)`` for a model that is its own µP base,
which is jaxlab's default ``logit_scale="sqrt"``.
"""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from jaxlab.methods.rmt import RMT, RMTConfig

CFG = RMTConfig(seq_len=8, num_layers=3, rank=4, d_key=6, d_value=5, d_ff=16, vocab_size=32)


def _attention_reference(x, gain, read_qkv, write, layer_idx, d_value, base_d_value=None):
    """One RMT attention branch in float64 numpy, in jaxlab's ``X^T`` layout ``(B, T, Dv, Dk)``.

    RMSNorm over the token's whole matrix (the authors' code), retrieval of q, k, v with the read
    keys (paper eq. 2), causal softmax of ``q.k * mup_scaling / (layer_idx + 1) - slope (i - j)``
    with the authors' ``mup_scaling = sqrt(base Dv) / Dv`` (base Dv = Dv unless given), and storage
    of the R head outputs with the write keys (paper eq. 1).
    """
    B, T, V, K = x.shape
    R = write.shape[0]
    h = gain.reshape(V, K) * x / np.sqrt((x**2).mean((2, 3), keepdims=True) + 1e-6)
    q, k, v = np.einsum("btem,cmr->cbtre", h, read_qkv)
    base = d_value if base_d_value is None else base_d_value
    scale = np.sqrt(base) / d_value / (layer_idx + 1)  # the rules under test, from the layer index
    logits = np.einsum("btre,bsre->brts", q, k) * scale
    slopes = np.geomspace(2.0 ** (-8.0 / R), 2.0**-8, R)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    logits = logits - slopes[:, None, None] * (i - j)  # ALiBi after the layer scaling
    logits = np.where(j <= i, logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("brts,bsre->btre", p, v)
    return np.einsum("btre,rm->btem", o, write)


@pytest.mark.parametrize(
    "layer_idx, base_d_value",
    [(0, None), (2, None), (1, 2)],  # (1, 2): µP from a base Dv of 2
)
def test_attention_branch_divides_logits_by_layer_index_plus_one(layer_idx, base_d_value):
    cfg = (
        CFG
        if base_d_value is None
        else dataclasses.replace(CFG, mup=True, mup_base_d_value=base_d_value)
    )
    model = RMT(cfg, rngs=nnx.Rngs(0))
    attn = model.layers[layer_idx].attn
    k = jax.random.split(jax.random.key(layer_idx), 4)
    # O(1)-and-larger logits (read keys of std 1), so that a wrong scale moves the softmax a lot
    attn.read_qkv[...] = jax.random.normal(k[0], attn.read_qkv.shape)
    attn.norm.scale[...] = jax.random.uniform(k[1], attn.norm.scale.shape, minval=0.5)
    x = jax.random.normal(k[2], (2, CFG.seq_len, CFG.d_value, CFG.d_key))
    seg = np.ones((2, CFG.seq_len), np.int32)

    out = np.asarray(attn(x, seg), np.float64)
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    ref = _attention_reference(
        f64(x), f64(attn.norm.scale[...]), f64(attn.read_qkv[...]), f64(attn.write[...]),
        layer_idx, CFG.d_value, base_d_value,
    )  # fmt: skip
    # float32 model against float64 numpy: rounding only (the outputs are O(0.1))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_mup_logits_off_keeps_one_over_sqrt_dv_at_every_width():
    cfg = dataclasses.replace(CFG, mup=True, mup_base_d_value=2, mup_logits=False)
    scales = [layer.attn.scale for layer in RMT(cfg, rngs=nnx.Rngs(0)).layers]
    np.testing.assert_allclose(scales, [CFG.d_value**-0.5 / (i + 1) for i in range(3)], rtol=1e-7)
