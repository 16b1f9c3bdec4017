"""The xLSTM's per-head norm: :class:`MultiHeadNorm`, shared by the mLSTM and sLSTM layers.

Both mixers of an xLSTM block normalise each head's cell output on its own before the heads are
concatenated (xLSTM 7B, Sec. 3.1; the authors' ``MultiHeadLayerNorm``). It has a module of its own
because both layers use it: the mLSTM layer (:mod:`jaxlab.methods.xlstm.model`) and the sLSTM
layer (:mod:`jaxlab.methods.xlstm.slstm`), which the model imports in turn.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from jaxlab.nn.layers import param_init

__all__ = ["MultiHeadNorm"]

F32 = jnp.float32


class MultiHeadNorm(nnx.Module):
    """LayerNorm of each head's cell output over its Dv channels (mean-centred, biased
    variance), weight only, in float32 or float64 for float64 input (the 7B's
    ``MultiHeadLayerNorm``)."""

    def __init__(self, heads: int, dim: int, eps: float, param_dtype: str, rngs: nnx.Rngs):
        init = param_init(nnx.initializers.ones, ("heads",))
        self.scale = nnx.Param(init(rngs.params(), (heads * dim,), jnp.dtype(param_dtype)))
        self.heads, self.dim, self.eps = heads, dim, eps

    def __call__(self, h_BTHE: Float[Array, "B T H E"]) -> Float[Array, "B T F"]:
        acc = jnp.promote_types(h_BTHE.dtype, F32)
        h = h_BTHE.astype(acc)
        mean = jnp.mean(h, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(h - mean), axis=-1, keepdims=True)
        h = (h - mean) * jax.lax.rsqrt(var + self.eps)
        B, T = h.shape[:2]
        return h.reshape(B, T, -1) * self.scale[...].astype(acc)
