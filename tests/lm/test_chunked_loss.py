"""The chunked cross-entropy (``LMTask.loss_chunk``): the plain loss's value and gradient.

The reference is :func:`jaxlab.lm.task.cross_entropy` over the full logits (itself pinned to a
float64 numpy loss in ``test_transformer.py``): first for a bare head (an unembedding with and
without a soft cap, rows on and off the chunk grid, with the z-loss), through
:class:`~jaxlab.lm.task.LMTask` for every language model in the contract
(``tests/contracts/test_language_models.py``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.task import LMTask, chunked_cross_entropy, cross_entropy
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

    (_, want), want_g = jax.jit(jax.value_and_grad(plain, argnums=(0, 1), has_aux=True))(h, w)
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


class _LogitsOnly(nnx.Module):
    """A user's own LM that maps tokens to logits but is not a LanguageModel (no hidden())."""

    def __init__(self, rngs):
        self.embed = nnx.Embed(256, 256, rngs=rngs)

    def __call__(self, tokens, *, segment_ids=None, positions=None):
        return self.embed(tokens)


def test_loss_chunk_needs_the_split_model():
    task = LMTask(build=_LogitsOnly, seq_len=16, loss_chunk=4)
    with pytest.raises(ConfigError, match="loss_chunk=4 needs a model with hidden"):
        task.build_model(nnx.Rngs(0))
    LMTask(build=_LogitsOnly, seq_len=16, loss_chunk=0).build_model(nnx.Rngs(0))  # plain: fits


class _SplitHead(nnx.Module):
    """A user's LM with ``hidden`` and ``logits_from_hidden`` and an output vocabulary ``vocab``."""

    def __init__(self, rngs, vocab=256):
        self.embed = nnx.Embed(256, 8, rngs=rngs)
        self.head = nnx.Linear(8, vocab, rngs=rngs)

    def hidden(self, tokens, *, segment_ids=None, positions=None):
        return self.embed(tokens)

    def logits_from_hidden(self, h):
        return self.head(h)

    def __call__(self, tokens, *, segment_ids=None, positions=None):
        return self.logits_from_hidden(self.hidden(tokens))


@pytest.mark.parametrize("loss_chunk", [0, 4], ids=["plain", "chunked"])
def test_a_vocabulary_below_the_data_is_one_line_where_the_loss_is_traced(loss_chunk):
    tokens = jnp.full((2, 8), 255, jnp.int32)  # the largest byte: past a 200-row head
    batch = {
        "inputs": tokens,
        "targets": tokens,
        "segment_ids": jnp.ones_like(tokens),
        "positions": jnp.broadcast_to(jnp.arange(8), tokens.shape),
    }
    task = LMTask(build=lambda rngs: _SplitHead(rngs, vocab=200), seq_len=8, loss_chunk=loss_chunk)
    model = task.build_model(nnx.Rngs(0))  # building does not run the model
    with pytest.raises(ConfigError, match=r"output vocabulary \(200\) is smaller than the data's"):
        nnx.jit(lambda m: task.loss(m, batch)[0])(model)
    fits = LMTask(build=_SplitHead, seq_len=8, loss_chunk=loss_chunk)
    assert np.isfinite(nnx.jit(lambda m: fits.loss(m, batch)[0])(fits.build_model(nnx.Rngs(0))))
