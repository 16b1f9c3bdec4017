"""Small NNX building blocks shared by jaxlab's models: norms, the bias-free GELU MLP, embeddings,
the token-id check, and the parameter counts (all, and outside the embeddings).

Layers take the numbers they need as arguments (never a config). Linear maps come from
:mod:`jaxlab.nn.linear` (one constructor for dense and structured maps); ``param_init`` (logical
axis names on an initializer) and ``default_matmul_impl`` live there and are re-exported here.

Token ids. An embedding look-up is a gather, and JAX's gather never raises: an id ``>=
vocab_size`` (or ``< -vocab_size``) reads NaNs and an id in ``[-vocab_size, 0)`` wraps around to
another token. Every language model therefore checks its tokens where they enter
(:func:`check_token_ids`): shapes always, and the ids themselves in one line when they are concrete
(eager calls). Under ``jax.jit`` (or ``vmap``, ``grad``) values cannot be inspected; there the check
is a :func:`jax.experimental.checkify.debug_check`, which does nothing unless the caller wraps the
function in :func:`jax.experimental.checkify.checkify`, and :func:`jaxlab.core.checks.ids_in_range`
is the flag to return from a jitted step and check on the host, as the training loop does with its
finiteness flag (:func:`jaxlab.core.step.all_finite`).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.checks import check_ids
from jaxlab.core.errors import ConfigError
from jaxlab.nn.linear import Dense, LinearFactory, LinearSpec, default_matmul_impl, param_init

__all__ = [
    "MLP",
    "TokenEmbedding",
    "check_token_ids",
    "count_params",
    "non_embedding_params",
    "default_matmul_impl",
    "make_norm",
    "param_init",
    "qk_layernorm",
    "unembedding",
]


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


def qk_layernorm(dim: int, rngs: nnx.Rngs, param_dtype: str = "float32") -> nnx.LayerNorm:
    """The QK LayerNorm of Kuang et al.'s code (``LayerNorm(d, bias=False)``, eps ``1e-5`` as
    ``F.layer_norm``) over the last axis; one module shared by every head. ``dtype=None``: it
    computes in the promotion of the input and its float32 scale, so float32 for bfloat16 and
    float32 inputs and float64 for float64 ones, like the attention around it."""
    return nnx.LayerNorm(
        dim, use_bias=False, epsilon=1e-5, dtype=None, param_dtype=jnp.dtype(param_dtype),
        rngs=rngs,
    )  # fmt: skip


class MLP(nnx.Module):
    """``W_out · GELU(W_in · x)`` without biases; ``W_in`` starts at N(0, in_std²), ``W_out`` at
    N(0, out_std²) (or the structured equivalents, see :mod:`jaxlab.nn.linear`).

    Both maps come from ``linear`` (a :class:`~jaxlab.nn.linear.LinearSpec` or any linear factory),
    with logical axes ``("embed", "mlp")`` and ``("mlp", "embed")``. Without ``linear``, dense maps
    with ``dtype``, ``param_dtype`` and ``matmul_impl`` are built: ``"pallas"`` runs both products
    through :func:`pallas_kernels.matmul` with the GELU fused into the first one's epilogue,
    ``"xla"`` through XLA, ``"auto"`` (the default) resolves through :func:`default_matmul_impl`.
    Both backends use the same parameters and the tanh GELU, so a model can switch between them.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        out_std: float,
        in_std: float = 0.02,
        linear: LinearFactory | None = None,
        dtype: str = "float32",
        param_dtype: str = "float32",
        matmul_impl: Literal["auto", "xla", "pallas"] = "auto",
        rngs: nnx.Rngs,
    ):
        if linear is None:
            linear = LinearSpec(dtype=dtype, param_dtype=param_dtype, matmul_impl=matmul_impl)
        self.up = linear(d_model, d_ff, std=in_std, axes=("embed", "mlp"), rngs=rngs)
        self.down = linear(d_ff, d_model, std=out_std, axes=("mlp", "embed"), rngs=rngs)

    def __call__(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T D"]:
        return self.down(self.up(x_BTD, activation="gelu"))


def check_token_ids(
    tokens: Int[Array, "B T"], vocab_size: int | None, *, owner: str = "tokens"
) -> None:
    """Raises a one-line :class:`ConfigError` unless ``tokens`` are ``(B, T)`` integers with every
    id in ``[0, vocab_size)`` (``vocab_size=None``: the shape and dtype only).

    The shape and dtype are checked always (they are static); the ids by
    :func:`jaxlab.core.checks.check_ids`: at once when they are concrete, and under a
    transformation (``jax.jit``, ``vmap``, ``grad``) by a
    :func:`jax.experimental.checkify.debug_check`, which raises only when the caller's function is
    wrapped in :func:`jax.experimental.checkify.checkify` and costs nothing otherwise.
    """
    shape, dtype = jnp.shape(tokens), jnp.result_type(tokens)
    if len(shape) != 2 or not jnp.issubdtype(dtype, jnp.integer):
        hint = "; add a batch axis (tokens[None]) for one sequence" if len(shape) == 1 else ""
        raise ConfigError(
            f"{owner}: tokens must be (B, T) integer ids; got shape {shape}, dtype {dtype}{hint}"
        )
    if vocab_size is not None:
        check_ids(tokens, vocab_size, name=f"{owner}: token ids", table="the vocabulary")


class TokenEmbedding(nnx.Module):
    """Token embedding plus optional learned absolute positions, N(0, 0.02) init, no biases.

    ``positions="alibi"`` (or anything but ``"learned"``) adds no position table: the attention
    carries the positions then. Tokens are checked by :func:`check_token_ids`.
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

    def __call__(
        self, tokens_BT: Int[Array, "B T"], positions_BT: Int[Array, "B T"] | None = None
    ) -> Float[Array, "B T D"]:
        check_token_ids(tokens_BT, self.tokens.num_embeddings)
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
    dim: int,
    vocab_size: int,
    *,
    dtype: str,
    param_dtype: str,
    rngs: nnx.Rngs,
    std: float = 0.02,
) -> Dense:
    """The untied, bias-free output projection ``dim -> vocab_size``, N(0, std²) init, XLA."""
    return Dense(
        dim,
        vocab_size,
        std=std,
        axes=("embed", "vocab"),
        dtype=dtype,
        param_dtype=param_dtype,
        matmul_impl="xla",
        rngs=rngs,
    )


def count_params(model: nnx.Module) -> int:
    """Number of parameters of a model, concrete or abstract (``nnx.eval_shape``)."""
    return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


# Attribute names of the token (and position) embedding and the unembedding in jaxlab's LMs.
EMBEDDING_NAMES = frozenset({"embed", "unembed"})


def non_embedding_params(model: nnx.Module) -> int:
    """Parameters outside the token/position embeddings and the unembedding (Kaplan et al. 2020):
    every parameter whose path passes through no attribute named ``embed`` or ``unembed``."""
    total = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.Param)):
        names = {getattr(p, "key", getattr(p, "name", None)) for p in path}
        if not names & EMBEDDING_NAMES:
            total += leaf.size
    return total
