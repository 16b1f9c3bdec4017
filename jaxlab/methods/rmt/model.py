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

The storage and retrieval keys (``R x Dk`` maps) are the method itself and stay plain arrays; only
the MLP's two maps come from the config's linear factory (``cfg.linear``: dense by default, or a
structured kind from :mod:`jaxlab.nn.linear`).

Pre-norm residual updates ``X <- X + MHA(Norm(X))``, ``X <- X + FF(Norm(X))`` with the norm taken
over the whole ``Dk x Dv`` matrix of a token. Initialisation follows ``cfg.init``
(:mod:`jaxlab.nn.init`), one rule for every matrix. The default ``"fan_in"`` is the paper's
variance analysis (Table 1): with i.i.d. keys of variance s^2, storing R vectors multiplies the
variance by ``R s^2`` (backward: ``Dk s^2``) and retrieving multiplies it by ``Dk s^2`` (backward:
``R s^2``), so storage keys get s^2 = 1/R and retrieval keys s^2 = 1/Dk, and the MLP's matrices
1/fan_in likewise; the layers' output storage keys (the last matrix of each residual branch) are
further scaled by 1/sqrt(2L) (GPT-2 style; the authors' code does the same).

Layout and speed. The residual is held as ``X^T``, shape ``(B, T, Dv, Dk)`` with Dk the minor
axis, so that storage and retrieval are each one plain ``(B*T*Dv, .) @ (., .)`` matrix product
and neither the forward nor the backward transposes a residual-sized tensor (only the small
``R x Dv`` operands are transposed); :func:`store` and :func:`retrieve` carry hand-written
gradients to keep that true for the key gradients, and the matrix norm is folded into the
retrieval that always follows it (:class:`MatrixNorm`). The method README gives the step-time
ratio against the matched transformer that these choices give.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.mesh import constrain
from jaxlab.lm.model import LanguageModel
from jaxlab.methods.rmt.config import RMTConfig
from jaxlab.nn.attention import alibi_slopes
from jaxlab.nn.attention_kinds import attend, logit_scale
from jaxlab.nn.init import unembedding_std, weight_std
from jaxlab.nn.layers import MLP, TokenEmbedding, param_init, qk_layernorm, unembedding

__all__ = ["RMT", "retrieve", "retrieve_reference", "store", "store_reference"]


def _flat(a: Array) -> Array:
    return a.reshape(-1, a.shape[-1])


@jax.custom_vjp
def _store(y_BTRE: Array, keys_RM: Array) -> Array:
    B_T_E = (*y_BTRE.shape[:-2], y_BTRE.shape[-1])
    x = _flat(jnp.swapaxes(y_BTRE, -1, -2)) @ keys_RM  # (B*T*Dv, R) @ (R, Dk)
    return x.reshape(*B_T_E, keys_RM.shape[-1])


def _store_fwd(y_BTRE, keys_RM):
    return _store(y_BTRE, keys_RM), (y_BTRE, keys_RM)


def _store_bwd(res, dx_BTEM):
    y_BTRE, keys_RM = res
    dx = _flat(dx_BTEM)  # (B*T*Dv, Dk), the residual gradient in its natural layout
    dy_BTER = (dx @ keys_RM.T).reshape(*dx_BTEM.shape[:-1], keys_RM.shape[0])
    dkeys_RM = _flat(jnp.swapaxes(y_BTRE, -1, -2)).T @ dx  # transposes the R-wide operand only
    return jnp.swapaxes(dy_BTER, -1, -2), dkeys_RM


_store.defvjp(_store_fwd, _store_bwd)


@jax.custom_vjp
def _retrieve(x_BTEM: Array, keys_MR: Array) -> Array:
    y = (_flat(x_BTEM) @ keys_MR).reshape(*x_BTEM.shape[:-1], keys_MR.shape[-1])
    return jnp.swapaxes(y, -1, -2)


def _retrieve_fwd(x_BTEM, keys_MR):
    return _retrieve(x_BTEM, keys_MR), (x_BTEM, keys_MR)


def _retrieve_bwd(res, dy_BTRE):
    x_BTEM, keys_MR = res
    dy = _flat(jnp.swapaxes(dy_BTRE, -1, -2))  # (B*T*Dv, R)
    dx_BTEM = (dy @ keys_MR.T).reshape(x_BTEM.shape)
    dkeys_MR = (dy.T @ _flat(x_BTEM)).T  # transposes the R-wide operand only
    return dx_BTEM, dkeys_MR


_retrieve.defvjp(_retrieve_fwd, _retrieve_bwd)


def store(y_BTRE: Float[Array, "B T R E"], keys_RM: Float[Array, "R M"]) -> Float[Array, "B T E M"]:
    """Outer-product storage ``X = sum_h w_h y_h^T`` of R data vectors with R keys (paper eq. 1).

    Returns the residual matrix in jaxlab's layout, ``X^T`` of shape ``(Dv, Dk)`` per token (see
    the module docstring). One ``(B*T*Dv, R) @ (R, Dk)`` product; the gradients are written out
    (``custom_vjp``) so that the residual-sized operand is never transposed. Equal to
    :func:`store_reference` (tested, values and gradients).
    """
    return _store(y_BTRE, keys_RM.astype(y_BTRE.dtype))


def retrieve(
    x_BTEM: Float[Array, "B T E M"], keys_MR: Float[Array, "M R"]
) -> Float[Array, "B T R E"]:
    """Retrieval ``y_h = X^T r_h`` of R vectors with R keys (paper eq. 2), one matrix product.

    ``x_BTEM`` is the residual in jaxlab's ``(Dv, Dk)`` layout. Equal to :func:`retrieve_reference`.
    """
    return _retrieve(x_BTEM, keys_MR.astype(x_BTEM.dtype))


def store_reference(y_BTRE: Array, keys_RM: Array) -> Array:
    """:func:`store` as one plain einsum, differentiated by JAX: the reference for the tests."""
    return jnp.einsum("btre,rm->btem", y_BTRE, keys_RM.astype(y_BTRE.dtype))


def retrieve_reference(x_BTEM: Array, keys_MR: Array) -> Array:
    """:func:`retrieve` as one plain einsum, differentiated by JAX: the reference for the tests."""
    return jnp.einsum("btem,mr->btre", x_BTEM, keys_MR.astype(x_BTEM.dtype))


def _keys(shape, std: float, rngs: nnx.Rngs, dtype) -> nnx.Param:
    """An ``R x Dk`` (or ``Dk x R``) key matrix, N(0, std^2), with no sharding names (small)."""
    init = param_init(nnx.initializers.normal(std), (None,) * len(shape))
    return nnx.Param(init(rngs.params(), shape, jnp.dtype(dtype)))


class MatrixNorm(nnx.Module):
    """RMSNorm or LayerNorm (no bias) over a token's whole ``Dk x Dv`` residual matrix.

    ``Norm(X) = g * (X - mu) * inv`` with an elementwise gain ``g`` (Dk·Dv entries, stored flat),
    ``mu`` the mean of the matrix (LayerNorm only) and ``inv = 1/sqrt(mean((X - mu)^2) + 1e-6)``,
    computed in float32. Every use of the norm in the RMT is followed by a retrieval, and ``inv`` is
    one number per token, so :meth:`read` retrieves from ``g * (X - mu)`` and multiplies the R
    retrieved vectors by ``inv`` afterwards: ``Norm(X)`` itself is never materialised, which saves
    a pass over the (large) residual forward and backward. ``__call__`` gives ``Norm(X)``.
    """

    def __init__(self, cfg: RMTConfig, *, rngs: nnx.Rngs):
        if cfg.norm not in ("rmsnorm", "layernorm"):
            raise ValueError(f"unknown norm {cfg.norm!r}; choose 'layernorm' or 'rmsnorm'")
        self.kind = cfg.norm
        self.shape = (cfg.d_value, cfg.d_key)
        init = param_init(nnx.initializers.ones, (None,))
        self.scale = nnx.Param(init(rngs.params(), (cfg.residual_size,), cfg.param_dtype))

    def _factors(self, x_BTEM):
        x = x_BTEM.astype(jnp.float32)
        if self.kind == "layernorm":
            x = x - jnp.mean(x, axis=(-2, -1), keepdims=True)
        inv = jax.lax.rsqrt(jnp.mean(x * x, axis=(-2, -1), keepdims=True) + 1e-6)
        return x * self.scale[...].astype(jnp.float32).reshape(self.shape), inv

    def __call__(self, x_BTEM: Float[Array, "B T E M"]) -> Float[Array, "B T E M"]:
        h, inv = self._factors(x_BTEM)
        return (h * inv).astype(x_BTEM.dtype)

    def read(
        self, x_BTEM: Float[Array, "B T E M"], keys_MR: Float[Array, "M R"]
    ) -> Float[Array, "B T R E"]:
        """``retrieve(Norm(X), keys)``, computed as ``retrieve(g * (X - mu), keys) * inv``."""
        h, inv = self._factors(x_BTEM)
        return (retrieve(h.astype(x_BTEM.dtype), keys_MR) * inv).astype(x_BTEM.dtype)


def _write_keys(cfg: RMTConfig, rngs: nnx.Rngs) -> nnx.Param:
    """The storage keys that end a residual branch (attention or FF): fan-in R, × 1/sqrt(2L)."""
    std = weight_std(cfg.init, cfg.rank, residual_layers=cfg.num_layers)
    return _keys((cfg.rank, cfg.d_key), std, rngs, cfg.param_dtype)


class RMTAttention(nnx.Module):
    """Multi-head attention whose q, k, v and outputs go through retrieval and storage keys."""

    def __init__(self, cfg: RMTConfig, layer: int, *, rngs: nnx.Rngs):
        R, M = cfg.rank, cfg.d_key
        self.norm = MatrixNorm(cfg, rngs=rngs)
        self.read_qkv = _keys((3, M, R), weight_std(cfg.init, M), rngs, cfg.param_dtype)
        if cfg.query_zero_init:  # µP's zero query (Yang et al. 2021, App. D.2), as the code meant
            self.read_qkv[...] = self.read_qkv[...].at[0].set(0.0)
        self.write = _write_keys(cfg, rngs)
        scale = logit_scale(cfg.attention, cfg.d_value, cfg.logit_scale)
        if cfg.mup and cfg.mup_logits and cfg.mup_base_d_value and cfg.logit_scale == "sqrt":
            # The authors' µP logits (SHA.mup_scaling): sqrt(base Dv) / Dv for MHA, i.e. 1/sqrt(Dv)
            # times sqrt(base Dv / Dv) (the same factor on every attention kind's own scale).
            scale *= math.sqrt(cfg.mup_base_d_value / cfg.d_value)
        self.scale = scale / (layer + 1) if cfg.layer_scaled_logits else scale
        self.q_norm = qk_layernorm(cfg.d_value, rngs, cfg.param_dtype) if cfg.qk_norm else None
        self.k_norm = qk_layernorm(cfg.d_value, rngs, cfg.param_dtype) if cfg.qk_norm else None
        self.slopes = alibi_slopes(R, cfg.alibi) if cfg.positions == "alibi" else None
        self.impl = cfg.attention_impl
        self.kind, self.window = cfg.attention, cfg.attention_window
        self.ranks, self.normalize = cfg.attention_ranks, cfg.attention_normalize
        self.seq_len = cfg.seq_len

    def __call__(self, x_BTEM, segment_ids):
        n_qkv, M, R = self.read_qkv.shape  # one retrieval of all 3R query/key/value vectors
        read_keys = jnp.swapaxes(self.read_qkv[...], 0, 1).reshape(M, n_qkv * R)  # (M, 3R)
        qkv_BT3RE = self.norm.read(x_BTEM, read_keys).reshape(*x_BTEM.shape[:2], n_qkv, R, -1)
        q_BTRE, k_BTRE, v_BTRE = qkv_BT3RE[:, :, 0], qkv_BT3RE[:, :, 1], qkv_BT3RE[:, :, 2]
        if self.q_norm is not None:  # LMConfig.qk_norm: per-head LayerNorm of q and k
            q_BTRE = self.q_norm(q_BTRE).astype(v_BTRE.dtype)
            k_BTRE = self.k_norm(k_BTRE).astype(v_BTRE.dtype)
        o_BTRE = attend(
            q_BTRE,
            k_BTRE,
            v_BTRE,
            segment_ids=segment_ids,
            alibi_slopes=self.slopes,
            scale=self.scale,
            impl=self.impl,
            kind=self.kind,
            window=self.window,
            ranks=self.ranks,
            normalize=self.normalize,
            seq_len=self.seq_len,
        )
        return store(o_BTRE, self.write[...])


class RMTFeedForward(nnx.Module):
    """Retrieve R vectors, MLP over their concatenation, store the R output chunks."""

    def __init__(self, cfg: RMTConfig, *, rngs: nnx.Rngs):
        R, M = cfg.rank, cfg.d_key
        self.norm = MatrixNorm(cfg, rngs=rngs)
        self.read = _keys((M, R), weight_std(cfg.init, M), rngs, cfg.param_dtype)
        self.mlp = MLP(
            cfg.width,
            cfg.d_ff,
            in_std=weight_std(cfg.init, cfg.width),
            out_std=weight_std(cfg.init, cfg.d_ff),  # the storage keys end this branch
            linear=cfg.linear_factory(),
            rngs=rngs,
        )
        self.write = _write_keys(cfg, rngs)

    def __call__(self, x_BTEM):
        B, T = x_BTEM.shape[:2]
        y_BTRE = self.norm.read(x_BTEM, self.read[...])
        out_BTD = self.mlp(y_BTRE.reshape(B, T, -1))
        return store(out_BTD.reshape(y_BTRE.shape), self.write[...])


class RMTLayer(nnx.Module):
    def __init__(self, cfg: RMTConfig, layer: int, *, rngs: nnx.Rngs):
        self.attn = RMTAttention(cfg, layer, rngs=rngs)
        self.ff = RMTFeedForward(cfg, rngs=rngs)

    def __call__(self, x_BTEM, segment_ids):
        x_BTEM = x_BTEM + self.attn(x_BTEM, segment_ids)
        return x_BTEM + self.ff(x_BTEM)


class RMT(LanguageModel):
    """Residual Matrix Transformer LM: int tokens ``(B, T)`` → logits ``(B, T, V)`` (float32).
    Tokens are checked where they enter (:func:`jaxlab.nn.layers.check_token_ids`, in the
    embedding)."""

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
        self.store_embed = _keys(
            (cfg.rank, cfg.d_key), weight_std(cfg.init, cfg.rank), rngs, cfg.param_dtype
        )
        self.layers = nnx.List([RMTLayer(cfg, i, rngs=rngs) for i in range(cfg.num_layers)])
        self.final_norm = MatrixNorm(cfg, rngs=rngs)
        self.read_out = _keys(
            (cfg.d_key, cfg.rank), weight_std(cfg.init, cfg.d_key), rngs, cfg.param_dtype
        )
        self.unembed = unembedding(
            cfg.width,
            cfg.vocab_size,
            std=unembedding_std(cfg.init),
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            rngs=rngs,
        )

    def hidden(
        self,
        tokens_BT: Int[Array, "B T"],
        *,
        segment_ids: Int[Array, "B T"] | None = None,
        positions: Int[Array, "B T"] | None = None,
    ) -> Float[Array, "B T D"]:
        """The residual matrix after the final norm, read out to vectors of ``width`` = rank x
        d_value (the head's input, as the Transformer's final-normed ``d_model`` vectors are)."""
        cfg = self.cfg
        e_BTD = self.embed(tokens_BT, positions)  # checks the tokens (check_token_ids)
        B, T = tokens_BT.shape
        x_BTEM = store(e_BTD.reshape(B, T, cfg.rank, cfg.d_value), self.store_embed[...])
        x_BTEM = constrain(x_BTEM, "batch", None, None, None)
        segment_ids = segment_ids if cfg.document_mask else None
        for layer in self.layers:
            x_BTEM = constrain(layer(x_BTEM, segment_ids), "batch", None, None, None)
        y_BTRE = self.final_norm.read(x_BTEM, self.read_out[...])
        return y_BTRE.reshape(B, T, cfg.width)

    def logits_from_hidden(self, h_BTD: Float[Array, "B T D"]) -> Float[Array, "B T V"]:
        """The unembedding, in float32."""
        return self.unembed(h_BTD).astype(jnp.float32)
