"""The baseline decoder-only Transformer LM that jaxlab's methods are compared against.

Pre-norm GPT-2-style blocks (Radford et al. 2019): ``x += Attn(Norm(x))``, ``x += MLP(Norm(x))``, a
final norm and an untied unembedding, no biases anywhere. Positions are learned absolute embeddings
or ALiBi (Press et al. 2022); attention is causal with optional document masking of packed rows and
goes through :func:`jaxlab.nn.attention.dot_product_attention`. Init by ``cfg.init``
(:mod:`jaxlab.nn.init`); the default ``"gpt2"`` is N(0, 0.02) everywhere with the output
projections of the residual branches scaled by 1/sqrt(2L) (GPT-2, Sec. 2.3). Optionally the logits
of layer l are divided by l + 1 (``layer_scaled_logits``, as the RMT authors do for both of their
models, RMT paper Sec. 4.3). Parameters carry
logical axis names (``vocab``, ``embed``, ``heads``, ``mlp``) for :mod:`jaxlab.core.mesh`.
``TransformerConfig.paper(size)`` gives the baseline series of the RMT paper (Mak & Flanigan 2025,
Table 2): 49M / 160M / 260M / 405M with V = 50257 and N = 512.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.config import check
from jaxlab.core.mesh import constrain
from jaxlab.lm import kv_cache
from jaxlab.lm.config import LMConfig
from jaxlab.lm.model import LanguageModel
from jaxlab.nn.attention import alibi_slopes
from jaxlab.nn.attention_kinds import attend, logit_scale
from jaxlab.nn.init import unembedding_std, weight_std
from jaxlab.nn.layers import MLP, TokenEmbedding, make_norm, qk_layernorm, unembedding

__all__ = ["Transformer", "TransformerConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig(LMConfig):
    """Shape and options of :class:`Transformer` (common fields:
    :class:`~jaxlab.lm.config.LMConfig`); invalid combinations fail here, when built.

    ``d_ff`` 0 means ``4 * d_model``. ``linear`` applies to the MLP and to the Q, K, V and output
    projections.
    """

    # size: fields — RMT paper, Table 2 (baseline column)
    PAPER = {
        "49m": dict(d_model=384, num_layers=6, num_heads=12),
        "160m": dict(d_model=768, num_layers=12, num_heads=12),
        "260m": dict(d_model=896, num_layers=18, num_heads=14),
        "405m": dict(d_model=1024, num_layers=24, num_heads=16),
    }
    FAMILY = "Transformer"

    d_model: int = 256
    num_heads: int = 4
    num_kv_heads: int = 0  # 0 = num_heads (multi-head); fewer gives GQA/MQA

    def check_fields(self) -> None:
        for name in ("d_model", "num_heads"):
            check(getattr(self, name) > 0, f"model.{name} must be positive")
        check(
            self.d_model % self.num_heads == 0,
            f"model.num_heads={self.num_heads} must divide model.d_model={self.d_model}; "
            "change one of them",
        )
        kv = self.kv_heads
        check(
            kv > 0 and self.num_heads % kv == 0,
            f"model.num_kv_heads={self.num_kv_heads} must divide model.num_heads={self.num_heads}",
        )
        check(self.d_ff >= 0, "model.d_ff must be >= 0 (0 means 4 * d_model)")

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    def attention_shape(self) -> tuple[int, int, int]:
        return self.head_dim, self.num_heads, self.kv_heads

    def linear_shapes(self) -> tuple[tuple[int, int], ...]:
        d, q, kv = self.d_model, self.num_heads * self.head_dim, self.kv_heads * self.head_dim
        return ((d, q), (d, kv), (q, d), (d, self.ff_dim), (self.ff_dim, d))

    def matrix_flops(self) -> tuple[float, float, float]:
        """Per token (Kaplan et al. 2020, Table 1): Q, K, V in and the output projection
        (``2 d (q + 2 kv) + 2 q d`` for query width q and key/value width kv when dense), the MLP's
        two maps, and the unembedding; embedding lookups are free. Each map is counted as the
        linear factory builds it (:meth:`jaxlab.nn.linear.LinearSpec.flops`: a structured map
        costs what its shapes cost)."""
        d, q_width, kv_width = (
            self.d_model,
            self.num_heads * self.head_dim,
            self.kv_heads * self.head_dim,
        )
        f = self.linear_factory().flops
        proj = f(d, q_width) + 2 * f(d, kv_width) + f(q_width, d)
        return proj, f(d, self.ff_dim) + f(self.ff_dim, d), 2 * d * self.vocab_size


class Attention(nnx.Module):
    """Multi-head (or grouped-query) causal self-attention with separate Q, K, V projections,
    each built by the config's linear factory; ``cfg.attention`` picks the attention kind
    (:mod:`jaxlab.nn.attention_kinds`: ``mha``, the default, or ``swa``, ``gswa``, ``mlr``)."""

    def __init__(self, cfg: TransformerConfig, layer: int, *, rngs: nnx.Rngs):
        d, h, kv, hd = cfg.d_model, cfg.num_heads, cfg.kv_heads, cfg.head_dim
        linear = cfg.linear_factory()
        std_in = weight_std(cfg.init, d)
        std_out = weight_std(cfg.init, h * hd, residual_layers=cfg.num_layers)
        self.q = linear(d, h * hd, std=std_in, axes=("embed", "heads"), rngs=rngs)
        self.k = linear(d, kv * hd, std=std_in, axes=("embed", "heads"), rngs=rngs)
        self.v = linear(d, kv * hd, std=std_in, axes=("embed", "heads"), rngs=rngs)
        self.out = linear(h * hd, d, std=std_out, axes=("heads", "embed"), rngs=rngs)
        self.num_heads, self.kv_heads, self.head_dim = h, kv, hd
        self.impl = cfg.attention_impl
        scale = logit_scale(cfg.attention, hd, cfg.logit_scale)
        self.scale = scale / (layer + 1) if cfg.layer_scaled_logits else scale
        self.q_norm = qk_layernorm(hd, rngs, cfg.param_dtype) if cfg.qk_norm else None
        self.k_norm = qk_layernorm(hd, rngs, cfg.param_dtype) if cfg.qk_norm else None
        self.slopes = alibi_slopes(h, cfg.alibi) if cfg.positions == "alibi" else None
        self.kind, self.window = cfg.attention, cfg.attention_window
        self.ranks, self.normalize = cfg.attention_ranks, cfg.attention_normalize
        self.seq_len = cfg.seq_len

    def qkv(self, x_BTD: Float[Array, "B T D"]):
        """Per-head queries, keys (QK-normed when the config says so) and values."""
        B, T, _ = x_BTD.shape
        q_BTHE = self.q(x_BTD).reshape(B, T, self.num_heads, self.head_dim)
        k_BTKE = self.k(x_BTD).reshape(B, T, self.kv_heads, self.head_dim)
        v_BTKE = self.v(x_BTD).reshape(B, T, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q_BTHE = self.q_norm(q_BTHE).astype(v_BTKE.dtype)
            k_BTKE = self.k_norm(k_BTKE).astype(v_BTKE.dtype)
        return q_BTHE, k_BTKE, v_BTKE

    def __call__(self, x_BTD: Float[Array, "B T D"], segment_ids: Int[Array, "B T"] | None):
        B, T, _ = x_BTD.shape
        q_BTHE, k_BTKE, v_BTKE = self.qkv(x_BTD)
        o_BTHE = attend(
            q_BTHE,
            k_BTKE,
            v_BTKE,
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
        return self.out(o_BTHE.reshape(B, T, -1))


class Block(nnx.Module):
    """One pre-norm block: ``x + Attn(Norm(x))`` then ``x + MLP(Norm(x))``."""

    def __init__(self, cfg: TransformerConfig, layer: int, *, rngs: nnx.Rngs):
        self.norm1 = make_norm(cfg.norm, cfg.d_model, cfg.param_dtype, rngs=rngs)
        self.attn = Attention(cfg, layer, rngs=rngs)
        self.norm2 = make_norm(cfg.norm, cfg.d_model, cfg.param_dtype, rngs=rngs)
        self.mlp = MLP(
            cfg.d_model,
            cfg.ff_dim,
            in_std=weight_std(cfg.init, cfg.d_model),
            out_std=weight_std(cfg.init, cfg.ff_dim, residual_layers=cfg.num_layers),
            linear=cfg.linear_factory(),
            rngs=rngs,
        )

    def __call__(self, x_BTD, segment_ids):
        x_BTD = x_BTD + self.attn(self.norm1(x_BTD), segment_ids)
        return x_BTD + self.mlp(self.norm2(x_BTD))


class Transformer(LanguageModel):
    """Decoder-only LM: int tokens ``(B, T)`` → logits ``(B, T, V)`` (float32). Tokens are checked
    where they enter (:func:`jaxlab.nn.layers.check_token_ids`, in the embedding)."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = TokenEmbedding(
            cfg.vocab_size,
            cfg.seq_len,
            cfg.d_model,
            positions=cfg.positions,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            rngs=rngs,
        )
        self.blocks = nnx.List([Block(cfg, i, rngs=rngs) for i in range(cfg.num_layers)])
        self.final_norm = make_norm(cfg.norm, cfg.d_model, cfg.param_dtype, rngs=rngs)
        self.unembed = unembedding(
            cfg.d_model,
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
        """The final-normed hidden states whose :meth:`logits_from_hidden` are the logits (the
        split :func:`jaxlab.lm.task.chunked_cross_entropy` uses)."""
        x_BTD = constrain(self.embed(tokens_BT, positions), "batch", None, None)
        if not self.cfg.document_mask:
            segment_ids = None
        for block in self.blocks:
            x_BTD = constrain(block(x_BTD, segment_ids), "batch", None, None)
        return self.final_norm(x_BTD)

    def logits_from_hidden(self, h_BTD: Float[Array, "B T D"]) -> Float[Array, "B T V"]:
        """The unembedding, in float32."""
        return self.unembed(h_BTD).astype(jnp.float32)

    def init_cache(self, batch_size: int, max_len: int) -> kv_cache.KVCache:
        """A key/value cache of ``max_len`` positions (:func:`jaxlab.lm.kv_cache.init_cache`)."""
        return kv_cache.init_cache(self, batch_size, max_len)

    def extend(self, tokens_BT: Int[Array, "B T"], cache: kv_cache.KVCache):
        """Logits of new tokens after the cached ones (:func:`jaxlab.lm.kv_cache.extend`)."""
        return kv_cache.extend(self, tokens_BT, cache)
