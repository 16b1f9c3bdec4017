"""The sLSTM: its scan against a plain numpy loop (with a document reset), and a tiny mixed
mLSTM/sLSTM model that trains, keeps documents apart and decodes from its cache."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.lm.generate import teacher_forced_logits
from jaxlab.lm.task import cross_entropy
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.methods.xlstm.model import XLSTMCache, mLSTMBlock, sLSTMBlock
from jaxlab.methods.xlstm.slstm import SLSTMState, slstm, sLSTMLayer

MIXED = xLSTMConfig(
    seq_len=16, num_layers=2, d_model=32, num_heads=4, chunk_size=4, slstm_blocks=(1,)
)


def numpy_slstm(pre, R, reset):
    B, T, _, H, D = pre.shape
    c, n, m, h = (np.zeros((B, H, D)) for _ in range(4))
    out = np.zeros((B, T, H, D))
    for t in range(T):
        h = np.where(reset[:, t, None, None], 0.0, h)
        g = pre[:, t] + np.einsum("bhd,ghde->bghe", h, R)
        z, i, f, o = (g[:, j] for j in range(4))
        lf = np.where(reset[:, t, None, None], -1e30, -np.log1p(np.exp(-f)))
        m_new = np.maximum(lf + m, i)
        c = np.exp(lf + m - m_new) * c + np.exp(i - m_new) * np.tanh(z)
        n = np.exp(lf + m - m_new) * n + np.exp(i - m_new)
        m = m_new
        h = 1 / (1 + np.exp(-o)) * c / n
        out[:, t] = h
    return out


def test_scan_matches_a_numpy_loop():
    rng = np.random.default_rng(0)
    pre = rng.normal(size=(2, 9, 4, 2, 3)) * 2
    R = rng.normal(size=(4, 2, 3, 3)) * 0.5
    reset = np.zeros((2, 9), bool)
    reset[1, 4] = True
    h, _ = slstm(jnp.asarray(pre, jnp.float32), jnp.asarray(R, jnp.float32), jnp.asarray(reset))
    ref = numpy_slstm(pre, R, reset)
    # The cell runs in float32 (its state is float32 by design): float32 rounding of O(1) values.
    np.testing.assert_allclose(h, ref, atol=1e-5)


def test_a_mixed_model_trains_and_keeps_documents_apart():
    model = xLSTM(MIXED, rngs=nnx.Rngs(0))
    assert [type(b) for b in model.blocks] == [mLSTMBlock, sLSTMBlock]  # chosen by the builder
    cache = model.init_cache(1, 16)
    assert isinstance(cache, XLSTMCache) and isinstance(cache.states[1], SLSTMState)
    tokens = jax.random.randint(jax.random.key(1), (1, 16), 1, 256)
    seg = jnp.array([[1] * 7 + [2] * 9])
    a = model(tokens, segment_ids=seg)
    b = model(tokens.at[0, :7].set(3), segment_ids=seg)
    np.testing.assert_allclose(a[0, 7:], b[0, 7:], atol=1e-5)
    full = model(tokens)  # the cache carries the sLSTM's state too
    np.testing.assert_allclose(teacher_forced_logits(model, tokens, 6), full, atol=1e-5)

    batch = jax.random.randint(jax.random.key(2), (4, 17), 0, 256)
    graphdef, state = nnx.split((model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)))

    @jax.jit
    def step(state):
        m, opt = nnx.merge(graphdef, state)
        loss_fn = lambda m: cross_entropy(m(batch[:, :-1]), batch[:, 1:])[0]  # noqa: E731
        loss, grads = nnx.value_and_grad(loss_fn)(m)
        opt.update(m, grads)
        return nnx.split((m, opt))[1], loss

    losses = []
    for _ in range(3):
        state, loss = step(state)
        losses.append(float(loss))
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_slstm_layer_matches_numpy_and_opens_the_forget_gates():
    """``out(MultiHeadNorm(sLSTM(W x + b)))`` in float64 numpy (Beck et al. 2024, Sec. 2.2, Eqs.
    8-17, through :func:`numpy_slstm`; per-head LayerNorm without bias as the authors'
    ``MultiHeadLayerNorm``). The biases are checked by gate, in the cell's (z, i, f, o) order: only
    the forget gates start non-zero (open), ``linspace(3, 6)`` over the heads (the config's
    ``fgate_bias_range``)."""
    layer = sLSTMLayer(MIXED, rngs=nnx.Rngs(0))
    H, E = MIXED.num_heads, MIXED.d_model // MIXED.num_heads
    bias = np.asarray(layer.bias[...], np.float64)
    np.testing.assert_array_equal(bias[[0, 1, 3]], 0.0)
    np.testing.assert_allclose(bias[2], np.repeat(np.linspace(3, 6, H)[:, None], E, 1), rtol=1e-6)

    rng = np.random.default_rng(0)
    layer.bias[...] = jnp.asarray(rng.normal(size=bias.shape), jnp.float32)  # every gate's matters
    layer.norm.scale[...] = jnp.asarray(rng.uniform(0.5, 1.5, layer.norm.scale.shape), jnp.float32)
    x = rng.normal(size=(2, 5, MIXED.d_model))
    reset = np.zeros((2, 5), bool)
    got, _ = nnx.jit(lambda m, x, r: m(x, r))(layer, jnp.asarray(x, jnp.float32), reset)

    f64 = lambda a: np.asarray(a[...], np.float64)  # noqa: E731
    pre = (x @ f64(layer.inp.kernel)).reshape(2, 5, 4, H, E) + f64(layer.bias)
    h = numpy_slstm(pre, f64(layer.R), reset)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + MIXED.norm_eps)
    want = (h.reshape(2, 5, -1) * f64(layer.norm.scale)) @ f64(layer.out.kernel)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
