"""The chunked cross-entropy (``LMTask.loss_chunk``): the plain loss's value and gradient.

The reference is :func:`jaxlab.lm.task.cross_entropy` over the full logits (itself pinned to a
float64 numpy loss in ``test_transformer.py``): first for a bare head (an unembedding with and
without a soft cap, rows on and off the chunk grid, with the z-loss), then through
:class:`~jaxlab.lm.task.LMTask` for every model that has ``hidden``/``logits_from_hidden``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.task import LMTask, chunked_cross_entropy, cross_entropy
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.methods.xlstm.model import soft_cap

# float32 sums in another order: agreement to a few ulps of the loss, not bitwise.
RTOL = 2e-6


def _close(a, b, rtol=RTOL):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.max(np.abs(b)))


@pytest.mark.parametrize(
    "T,chunk,cap",
    [(12, 4, 0.0), (13, 4, 2.0), (12, 5, 2.0), (5, 8, 2.0)],
    ids=["on_grid", "off_grid_cap", "ragged_cap", "short_row_cap"],
)
def test_chunked_equals_plain_value_and_gradient(T, chunk, cap):
    kh, kw, kt = jax.random.split(jax.random.key(0), 3)
    h = jax.random.normal(kh, (3, T, 8))
    w = jax.random.normal(kw, (8, 11))
    targets = jax.random.randint(kt, (3, T), 0, 11)

    def plain(h, w):
        ce, z = cross_entropy(soft_cap(h @ w, cap), targets, z_loss=0.1)
        return ce + z, (ce, z)

    def chunked(h, w):
        ce, z = chunked_cross_entropy(
            h, lambda x: soft_cap(x @ w, cap), targets, chunk=chunk, z_loss=0.1
        )
        return ce + z, (ce, z)

    (_, want), want_g = jax.value_and_grad(plain, argnums=(0, 1), has_aux=True)(h, w)
    (_, got), got_g = jax.jit(jax.value_and_grad(chunked, argnums=(0, 1), has_aux=True))(h, w)
    _close(got, want)
    for g, wg in zip(got_g, want_g, strict=True):
        _close(g, wg, rtol=1e-5)


def test_chunked_never_builds_the_full_logits():
    """The lowered loss holds no (B, T, V) array, only (B, chunk, V) blocks."""
    B, T, V, chunk = 2, 64, 1000, 8
    h = jnp.zeros((B, T, 16))
    w = jnp.zeros((16, V))
    targets = jnp.zeros((B, T), jnp.int32)
    fn = jax.grad(lambda h: chunked_cross_entropy(h, lambda x: x @ w, targets, chunk=chunk)[0])
    text = jax.jit(fn).lower(h).as_text()
    assert f"{B}x{chunk}x{V}xf32" in text and f"{B}x{T}x{V}xf32" not in text


def test_bad_chunk_is_one_line():
    with pytest.raises(ConfigError, match="chunk must be positive"):
        chunked_cross_entropy(jnp.zeros((1, 4, 2)), lambda x: x, jnp.zeros((1, 4), int), chunk=0)


MODELS = {
    "transformer": (Transformer, TransformerConfig(seq_len=16, num_layers=2, d_model=32, num_heads=4)),  # noqa: E501
    "xlstm": (xLSTM, xLSTMConfig(seq_len=16, num_layers=2, d_model=32, num_heads=4, chunk_size=4)),
}  # fmt: skip


@pytest.mark.parametrize("name", MODELS)
def test_lm_task_loss_chunk_equals_plain(name):
    cls, cfg = MODELS[name]
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, (2, 17))
    batch = {
        "inputs": jnp.asarray(tokens[:, :-1]),
        "targets": jnp.asarray(tokens[:, 1:]),
        "segment_ids": jnp.asarray([[1] * 7 + [2] * 9, [1] * 16]),
        "positions": jnp.asarray(np.tile(np.arange(16), (2, 1))),
    }
    model = cls(cfg, rngs=nnx.Rngs(0))
    results = []
    for chunk in (0, 6):
        task = LMTask(build=lambda r: model, seq_len=16, z_loss=1e-3, loss_chunk=chunk)
        task.build_model(nnx.Rngs(0))  # the check of the model's methods
        grad = nnx.value_and_grad(lambda m, t=task: t.loss(m, batch), has_aux=True)
        (loss, metrics), grads = grad(model)
        results.append((loss, metrics["z_loss"], nnx.to_pure_dict(grads)))
    (loss0, z0, g0), (loss1, z1, g1) = results
    _close(loss1, loss0)
    _close(z1, z0)
    jax.tree.map(lambda a, b: _close(a, b, rtol=1e-5), g1, g0)


def test_loss_chunk_needs_the_split_model():
    cfg = RMTConfig(seq_len=16, num_layers=1, rank=4, d_key=8, d_value=8, d_ff=32)
    task = LMTask(build=lambda r: RMT(cfg, rngs=r), seq_len=16, loss_chunk=4)
    with pytest.raises(ConfigError, match="loss_chunk=4 needs a model with hidden"):
        task.build_model(nnx.Rngs(0))
