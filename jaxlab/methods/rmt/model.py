"""The Residual Matrix Transformer (Mak & Flanigan, ICML 2025) as Flax NNX modules.

Each token's residual stream is a matrix ``X`` of shape ``(Dk, Dv)``, an outer-product memory
(Kohonen 1972; Anderson 1972; paper Sec. 3). Storing data vectors ``y_h`` (Dv) with key vectors
``w_h`` (Dk) adds ``sum_h w_h y_h^T`` (:func:`store`); retrieving with key ``r_h`` reads
``r_h^T X`` (:func:`retrieve`). These two contractions replace every W_Q, W_K, W_V, W_O and the
residual-facing side of the MLP:

* attention (Sec. 3.1): for each of the R heads, q, k and v are retrieved from ``Norm(X)`` with
  three learned keys; causal softmax attention of head size Dv; each head's output is stored with
  its own key. Logits are float32 and divided by the layer index + 1 (Sec. 4.3, for stability).
* feed-forward (Sec. 3.2): retrieve R vectors, concatenate to ``R * Dv``, MLP (GELU, no biases) to
  ``d_ff`` and back, split into R chunks and store them.
* embedding / unembedding: the token embedding (``R * Dv``) is split into R vectors and stored; the
  output retrieves R vectors and maps ``R * Dv -> V`` (untied).

Pre-norm residual updates ``X <- X + MHA(Norm(X))``, ``X <- X + FF(Norm(X))`` with the norm taken
over the whole ``Dk x Dv`` matrix of a token. Initialisation (paper Table 1's variance analysis):
with i.i.d. keys of variance s^2, storing R vectors multiplies the variance by ``R s^2`` (backward:
``Dk s^2``) and retrieving multiplies it by ``Dk s^2`` (backward: ``R s^2``); we draw storage keys
with s^2 = 1/R and retrieval keys with s^2 = 1/Dk, so both preserve the forward variance, and the
layers' output storage keys are further scaled by 1/sqrt(2L) (GPT-2 style).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.mesh import constrain
from jaxlab.methods.rmt.config import RMTConfig
from jaxlab.nn.attention import alibi_slopes, dot_product_attention
from jaxlab.nn.layers import MLP, TokenEmbedding, make_norm, param_init, unembedding

__all__ = ["RMT", "retrieve", "store"]


def store(
    y_BTRV: Float[Array, "B T R Dv"], keys_RK: Float[Array, "R Dk"]
) -> Float[Array, "B T Dk Dv"]:
    """Outer-product storage ``sum_h w_h y_h^T`` of R data vectors with R keys (paper eq. 1)."""
    return jnp.einsum("btrv,rk->btkv", y_BTRV, keys_RK.astype(y_BTRV.dtype))


def retrieve(
    x_BTKV: Float[Array, "B T Dk Dv"], keys_KR: Float[Array, "Dk R"]
) -> Float[Array, "B T R Dv"]:
    """Retrieval ``r_h^T X`` of R vectors with R keys, one contraction (paper eq. 2)."""
    return jnp.einsum("btkv,kr->btrv", x_BTKV, keys_KR.astype(x_BTKV.dtype))


def _keys(shape, std: float, rngs: nnx.Rngs, dtype) -> nnx.Param:
    init = param_init(nnx.initializers.normal(std), (None,) * len(shape))
    return nnx.Param(init(rngs.params(), shape, jnp.dtype(dtype)))


class MatrixNorm(nnx.Module):
    """RMSNorm or LayerNorm over a token's whole ``Dk x Dv`` residual matrix."""

    def __init__(self, cfg: RMTConfig, *, rngs: nnx.Rngs):
        self.norm = make_norm(cfg.norm, cfg.residual_size, cfg.param_dtype, rngs=rngs)

    def __call__(self, x_BTKV: Float[Array, "B T Dk Dv"]) -> Float[Array, "B T Dk Dv"]:
        B, T, K, V = x_BTKV.shape
        return self.norm(x_BTKV.reshape(B, T, K * V)).reshape(B, T, K, V).astype(x_BTKV.dtype)


class RMTAttention(nnx.Module):
    """Multi-head attention whose q, k, v and outputs go through retrieval and storage keys."""

    def __init__(self, cfg: RMTConfig, layer: int, *, rngs: nnx.Rngs):
        R, K = cfg.rank, cfg.d_key
        self.norm = MatrixNorm(cfg, rngs=rngs)
        self.read_qkv = _keys((3, K, R), K**-0.5, rngs, cfg.param_dtype)
        if cfg.query_zero_init:  # µP's zero query (Yang et al. 2021, App. D.2), as the code meant
            self.read_qkv[...] = self.read_qkv[...].at[0].set(0.0)
        self.write = _keys((R, K), R**-0.5 / math.sqrt(2 * cfg.num_layers), rngs, cfg.param_dtype)
        scale = cfg.d_value**-0.5
        self.scale = scale / (layer + 1) if cfg.layer_scaled_logits else scale
        self.slopes = alibi_slopes(R) if cfg.positions == "alibi" else None
        self.impl = cfg.attention_impl

    def __call__(self, x_BTKV, segment_ids):
        h_BTKV = self.norm(x_BTKV)
        qkv_CBTRV = jnp.einsum("btkv,ckr->cbtrv", h_BTKV, self.read_qkv[...].astype(h_BTKV.dtype))
        o_BTRV = dot_product_attention(
            qkv_CBTRV[0],
            qkv_CBTRV[1],
            qkv_CBTRV[2],
            causal=True,
            segment_ids=segment_ids,
            alibi_slopes=self.slopes,
            scale=self.scale,
            impl=self.impl,
        )
        return store(o_BTRV, self.write[...])


class RMTFeedForward(nnx.Module):
    """Retrieve R vectors, MLP over their concatenation, store the R output chunks."""

    def __init__(self, cfg: RMTConfig, *, rngs: nnx.Rngs):
        R, K = cfg.rank, cfg.d_key
        self.norm = MatrixNorm(cfg, rngs=rngs)
        self.read = _keys((K, R), K**-0.5, rngs, cfg.param_dtype)
        self.mlp = MLP(
            cfg.width,
            cfg.d_ff,
            out_std=0.02,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            rngs=rngs,
        )
        self.write = _keys((R, K), R**-0.5 / math.sqrt(2 * cfg.num_layers), rngs, cfg.param_dtype)

    def __call__(self, x_BTKV):
        B, T = x_BTKV.shape[:2]
        y_BTRV = retrieve(self.norm(x_BTKV), self.read[...])
        out_BTD = self.mlp(y_BTRV.reshape(B, T, -1))
        return store(out_BTD.reshape(y_BTRV.shape), self.write[...])


class RMTLayer(nnx.Module):
    def __init__(self, cfg: RMTConfig, layer: int, *, rngs: nnx.Rngs):
        self.attn = RMTAttention(cfg, layer, rngs=rngs)
        self.ff = RMTFeedForward(cfg, rngs=rngs)

    def __call__(self, x_BTKV, segment_ids):
        x_BTKV = x_BTKV + self.attn(x_BTKV, segment_ids)
        return x_BTKV + self.ff(x_BTKV)


class RMT(nnx.Module):
    """Residual Matrix Transformer LM: int tokens ``(B, T)`` → logits ``(B, T, V)`` (float32)."""

    def __init__(self, cfg: RMTConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = TokenEmbedding(
            cfg.vocab_size,
            cfg.seq_len,
            cfg.width,
            positions=cfg.positions,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            rngs=rngs,
        )
        self.store_embed = _keys((cfg.rank, cfg.d_key), cfg.rank**-0.5, rngs, cfg.param_dtype)
        self.layers = nnx.List([RMTLayer(cfg, i, rngs=rngs) for i in range(cfg.num_layers)])
        self.final_norm = MatrixNorm(cfg, rngs=rngs)
        self.read_out = _keys((cfg.d_key, cfg.rank), cfg.d_key**-0.5, rngs, cfg.param_dtype)
        self.unembed = unembedding(
            cfg.width, cfg.vocab_size, dtype=cfg.dtype, param_dtype=cfg.param_dtype, rngs=rngs
        )

    def __call__(
        self,
        tokens_BT: Int[Array, "B T"],
        *,
        segment_ids: Int[Array, "B T"] | None = None,
        positions: Int[Array, "B T"] | None = None,
    ) -> Float[Array, "B T V"]:
        cfg = self.cfg
        B, T = tokens_BT.shape
        e_BTD = self.embed(tokens_BT, positions)
        x_BTKV = store(e_BTD.reshape(B, T, cfg.rank, cfg.d_value), self.store_embed[...])
        x_BTKV = constrain(x_BTKV, "batch", None, None, None)
        segment_ids = segment_ids if cfg.document_mask else None
        for layer in self.layers:
            x_BTKV = constrain(layer(x_BTKV, segment_ids), "batch", None, None, None)
        y_BTRV = retrieve(self.final_norm(x_BTKV), self.read_out[...])
        return self.unembed(y_BTRV.reshape(B, T, cfg.width)).astype(jnp.float32)
