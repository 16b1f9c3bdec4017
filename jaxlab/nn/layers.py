"""Small NNX building blocks shared by jaxlab's models: norms, the bias-free GELU MLP, init helpers.

Layers take the numbers they need as arguments (never a config). ``param_init`` attaches logical
axis names to an initializer (for :mod:`jaxlab.core.mesh`) with flax's eager sharding off, so the
names are metadata until ``jax.jit(..., out_shardings=...)`` places the parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

import pallas_kernels
from jaxlab.core.errors import ConfigError
from jaxlab.nn import attention

__all__ = [
    "MLP",
    "TokenEmbedding",
    "count_params",
    "default_matmul_impl",
    "make_norm",
    "param_init",
    "unembedding",
]


def param_init(init: Callable, axes: Sequence[str | None]) -> Callable:
    """An initializer annotated with logical axis names, one per parameter dimension.

    Eager sharding is off for these variables: the names are metadata, so a model builds on one
    device with no mesh, and :func:`jaxlab.core.mesh.state_shardings` turns them into shardings.
    """
    return nnx.with_partitioning(init, tuple(axes), eager_sharding=False)


def make_norm(
    kind: Literal["layernorm", "rmsnorm"], dim: int, param_dtype: str, *, rngs: nnx.Rngs
) -> nnx.Module:
    """LayerNorm (Ba et al. 2016) or RMSNorm (Zhang & Sennrich 2019) over the last axis, no bias.

    Norms compute in float32 whatever the activations' dtype, for stability.
    """
    pdt = jnp.dtype(param_dtype)
    if kind == "layernorm":
        return nnx.LayerNorm(dim, use_bias=False, dtype=jnp.float32, param_dtype=pdt, rngs=rngs)
    if kind == "rmsnorm":
        return nnx.RMSNorm(dim, dtype=jnp.float32, param_dtype=pdt, rngs=rngs)
    raise ValueError(f"unknown norm {kind!r}; choose 'layernorm' or 'rmsnorm'")


def default_matmul_impl(platform: str | None = None) -> Literal["xla", "pallas"]:
    """What ``matmul_impl="auto"`` picks: the Pallas matmul on GPU/TPU when
    :func:`jaxlab.nn.attention.pallas_ready` says so (the same switch as the attention kernels:
    ``JAXLAB_PALLAS=on``, or :data:`~jaxlab.nn.attention.PALLAS_VERIFIED_ON_HARDWARE` once the
    native lowering has passed on hardware), XLA otherwise (on CPU Pallas only interprets)."""
    return "pallas" if attention.pallas_ready(platform) else "xla"


class MLP(nnx.Module):
    """``W_out · GELU(W_in · x)`` without biases; ``W_out`` starts at N(0, out_std).

    ``matmul_impl="pallas"`` runs both products through :func:`pallas_kernels.matmul` (float32
    accumulation, the GELU fused into the first product's epilogue; interpreted on CPU, so slow
    there); ``"xla"`` uses ``nnx.Linear``; ``"auto"`` (the default) resolves through
    :func:`default_matmul_impl`. Both use the same parameters and the tanh GELU, so a model can
    switch between them.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        out_std: float,
        dtype: str = "float32",
        param_dtype: str = "float32",
        matmul_impl: Literal["auto", "xla", "pallas"] = "auto",
        rngs: nnx.Rngs,
    ):
        if matmul_impl not in ("auto", "xla", "pallas"):
            raise ValueError(
                f"unknown matmul_impl {matmul_impl!r}; choose 'auto', 'xla' or 'pallas'"
            )
        matmul_impl = default_matmul_impl() if matmul_impl == "auto" else matmul_impl
        kw = dict(use_bias=False, dtype=jnp.dtype(dtype), param_dtype=jnp.dtype(param_dtype))
        self.up = nnx.Linear(
            d_model,
            d_ff,
            kernel_init=param_init(nnx.initializers.normal(0.02), ("embed", "mlp")),
            rngs=rngs,
            **kw,
        )
        self.down = nnx.Linear(
            d_ff,
            d_model,
            kernel_init=param_init(nnx.initializers.normal(out_std), ("mlp", "embed")),
            rngs=rngs,
            **kw,
        )
        self.matmul_impl = matmul_impl
        self.dtype = jnp.dtype(dtype)

    def __call__(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T D"]:
        if self.matmul_impl == "xla":
            return self.down(jax.nn.gelu(self.up(x_BTD)))
        w_up_DF = self.up.kernel[...].astype(self.dtype)
        w_down_FD = self.down.kernel[...].astype(self.dtype)
        h_BTF = pallas_kernels.matmul(x_BTD.astype(self.dtype), w_up_DF, activation="gelu")
        return pallas_kernels.matmul(h_BTF, w_down_FD)


class TokenEmbedding(nnx.Module):
    """Token embedding plus optional learned absolute positions, N(0, 0.02) init, no biases.

    ``positions="alibi"`` (or anything but ``"learned"``) adds no position table: the attention
    carries the positions then.
    """

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        dim: int,
        *,
        positions: str,
        dtype: str = "float32",
        param_dtype: str = "float32",
        rngs: nnx.Rngs,
    ):
        normal = nnx.initializers.normal(0.02)
        kw = dict(dtype=jnp.dtype(dtype), param_dtype=jnp.dtype(param_dtype), rngs=rngs)
        self.tokens = nnx.Embed(
            vocab_size, dim, embedding_init=param_init(normal, ("vocab", "embed")), **kw
        )
        self.positions = (
            nnx.Embed(seq_len, dim, embedding_init=param_init(normal, (None, "embed")), **kw)
            if positions == "learned"
            else None
        )
        self.seq_len = seq_len

    def __call__(self, tokens_BT, positions_BT=None) -> Float[Array, "B T D"]:
        x_BTD = self.tokens(tokens_BT)
        if self.positions is None:
            return x_BTD
        T = tokens_BT.shape[1]
        if T > self.seq_len:
            raise ConfigError(
                f"sequence length {T} exceeds model.seq_len={self.seq_len} (learned positions)"
            )
        positions_BT = jnp.arange(T)[None, :] if positions_BT is None else positions_BT
        return x_BTD + self.positions(positions_BT)


def unembedding(
    dim: int, vocab_size: int, *, dtype: str, param_dtype: str, rngs: nnx.Rngs
) -> nnx.Linear:
    """The untied, bias-free output projection ``dim -> vocab_size``, N(0, 0.02) init."""
    return nnx.Linear(
        dim,
        vocab_size,
        use_bias=False,
        kernel_init=param_init(nnx.initializers.normal(0.02), ("embed", "vocab")),
        dtype=jnp.dtype(dtype),
        param_dtype=jnp.dtype(param_dtype),
        rngs=rngs,
    )


def count_params(model: nnx.Module) -> int:
    """Number of parameters of a model, concrete or abstract (``nnx.eval_shape``)."""
    return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
