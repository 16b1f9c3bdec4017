"""LoRA for pre-training and ReLoRA*'s merge: the low-rank baselines of Sparse Spectral Training.

LoRA (Hu et al., ICLR 2022) trains ``M = W₀ + (α/r) A B`` with ``W₀`` frozen; for pre-training
(SST paper, Sec. 3.1) ``W₀`` is the layer's random initialisation, ``A`` ``(d_in, r)`` is random and
``B`` ``(r, d_out)`` is zero, so the model is its dense twin at step 0. The adapter is the shared
:class:`~jaxlab.nn.linear.LowRank` map (``u`` = A, ``vt`` = B) with ``vt`` zeroed. ReLoRA (Lialin et
al., ICLR 2024; ReLoRA* in the SST paper, Sec. 3.3: without the full-rank warm start) periodically
merges ``W₀ ← W₀ + (α/r) A B`` (the function is unchanged), draws a new ``A``, zeroes ``B`` and
resets their optimizer moments (:func:`jaxlab.methods.sst.hooks.relora_merge`).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from jaxlab.nn.linear import LowRank
from jaxlab.nn.linear_map import LinearMap
from jaxlab.nn.spectral import Frozen

__all__ = ["LoRA"]


class LoRA(LinearMap):
    """``x @ W₀ + (α/r) (x @ A) @ B`` with ``W₀`` a :class:`~jaxlab.nn.spectral.Frozen` array."""

    def __init__(
        self,
        base: Float[Array, "d_in d_out"],
        *,
        rank: int,
        alpha: float,
        axes=(None, None),
        dtype: str = "float32",
        param_dtype: str = "float32",
        rngs: nnx.Rngs,
    ):
        d_in, d_out = base.shape
        LowRank.validate(d_in, d_out, rank=rank)
        pd = jnp.dtype(param_dtype)
        self.base = Frozen(base.astype(pd), out_sharding=tuple(axes), eager_sharding=False)
        self.adapter = LowRank(
            d_in, d_out, rank=rank, std=1.0, axes=axes, dtype=dtype, param_dtype=param_dtype,
            rngs=rngs,
        )  # fmt: skip
        self.adapter.vt[...] = jnp.zeros_like(self.adapter.vt[...])
        self.scale = alpha / rank
        self.d_in, self.d_out, self.dtype = d_in, d_out, jnp.dtype(dtype)

    @staticmethod
    def options(spec) -> dict:
        return {"rank": spec.rank}

    @staticmethod
    def validate(d_in: int, d_out: int, *, rank: int) -> None:
        LowRank.validate(d_in, d_out, rank=rank)

    def product(self, x):
        return x @ self.base[...].astype(self.dtype) + self.scale * self.adapter.product(x)

    def dense_matrix(self):
        return self.base[...].astype(jnp.float32) + self.scale * self.adapter.dense_matrix()
