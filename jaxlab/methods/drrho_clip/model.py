"""CLIP towers as NNX modules: a small ViT or an MLP image tower, a small text transformer.

Both towers end in a bias-free projection to a shared ``embed_dim`` and are L2-normalised
(CLIP, Radford et al. 2021, Sec. 2.5). The image ViT splits the canvas into ``patch`` × ``patch``
patches with learned positions and a mean-pooled bidirectional encoder; the MLP tower flattens the
pixels. The text tower is a pre-norm transformer over caption tokens with a causal mask, read out at
the last non-pad token (CLIP's EOT readout; captions are right-padded with 0). The temperature is a
config number, not a parameter: DRRho-CLIP's ViT-B/16 run fixes τ = 0.01 (paper, Appendix), and one
fixed τ for every method keeps the comparison to one thing. The frozen reference model is an
instance of the same class; the task keeps it outside the trained parameters (see
:mod:`jaxlab.methods.drrho_clip.task`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.config import check
from jaxlab.nn.attention import dot_product_attention
from jaxlab.nn.layers import MLP, TokenEmbedding, make_norm
from jaxlab.nn.linear import Dense

__all__ = ["CLIPConfig", "CLIPModel"]


@dataclasses.dataclass(frozen=True)
class CLIPConfig:
    """Shapes of both towers; ``image_tower`` picks the ViT or the MLP."""

    image_tower: Literal["vit", "mlp"] = "vit"
    image_size: int = 32
    channels: int = 3
    patch: int = 8
    width: int = 64  # both towers' model width
    depth: int = 2  # transformer blocks per tower (MLP tower: hidden layers)
    heads: int = 4
    vocab_size: int = 64
    seq_len: int = 16
    embed_dim: int = 64

    def __post_init__(self) -> None:
        check(
            self.image_tower in ("vit", "mlp"),
            f"model.image_tower must be 'vit' or 'mlp', got {self.image_tower!r}",
        )
        for name in ("image_size", "patch", "width", "depth", "heads", "embed_dim", "seq_len"):
            check(getattr(self, name) > 0, f"model.{name} must be positive")
        check(self.image_size % self.patch == 0, "model.patch must divide model.image_size")
        check(self.width % self.heads == 0, "model.heads must divide model.width")

    @classmethod
    def vit_b(cls, vocab_size: int) -> CLIPConfig:
        """ViT-B width and depth (768, 12 blocks, 12 heads; 512-d embeddings) for the paper
        presets, on the rendered 32-px canvas with 4-px patches."""
        return cls(
            image_tower="vit", patch=4, width=768, depth=12, heads=12, vocab_size=vocab_size,
            embed_dim=512,
        )  # fmt: skip


class _Block(nnx.Module):
    """Pre-norm transformer block; ``causal`` for the text tower, bidirectional for the ViT."""

    def __init__(self, width: int, heads: int, depth: int, causal: bool, *, rngs: nnx.Rngs):
        std = width**-0.5
        self.norm1 = make_norm("layernorm", width, "float32", rngs=rngs)
        self.qkv = Dense(width, 3 * width, std=std, matmul_impl="xla", rngs=rngs)
        self.out = Dense(width, width, std=std / (2 * depth) ** 0.5, matmul_impl="xla", rngs=rngs)
        self.norm2 = make_norm("layernorm", width, "float32", rngs=rngs)
        self.mlp = MLP(
            width, 4 * width, in_std=std, out_std=std / (2 * depth) ** 0.5, rngs=rngs,
            matmul_impl="xla",
        )  # fmt: skip
        self.heads, self.causal = heads, causal

    def __call__(self, x_BTD: Float[Array, "B T D"], segment_ids_BT=None) -> Float[Array, "B T D"]:
        B, T, D = x_BTD.shape
        qkv = self.qkv(self.norm1(x_BTD)).reshape(B, T, 3, self.heads, D // self.heads)
        o_BTHE = dot_product_attention(
            qkv[:, :, 0],
            qkv[:, :, 1],
            qkv[:, :, 2],
            causal=self.causal,
            segment_ids=segment_ids_BT,
            impl="xla",
        )
        x_BTD = x_BTD + self.out(o_BTHE.reshape(B, T, D))
        return x_BTD + self.mlp(self.norm2(x_BTD))


def _normalise(x_BD: jax.Array) -> jax.Array:
    x_BD = x_BD.astype(jnp.float32)
    return x_BD * jax.lax.rsqrt(jnp.sum(x_BD * x_BD, axis=-1, keepdims=True) + 1e-12)


class CLIPModel(nnx.Module):
    """Image and text towers mapping to L2-normalised ``embed_dim`` embeddings."""

    def __init__(self, cfg: CLIPConfig, *, rngs: nnx.Rngs):
        w, c, p = cfg.width, cfg.channels, cfg.patch
        self.cfg = cfg
        if cfg.image_tower == "vit":
            n = (cfg.image_size // p) ** 2
            self.patch_embed = Dense(p * p * c, w, std=(p * p * c) ** -0.5, rngs=rngs)
            self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (n, w)))
            self.image_blocks = nnx.List(
                [_Block(w, cfg.heads, cfg.depth, False, rngs=rngs) for _ in range(cfg.depth)]
            )
            self.mlp_layers = nnx.List([])
        else:
            d_in = cfg.image_size**2 * c
            dims = [d_in] + [4 * w] * cfg.depth
            self.mlp_layers = nnx.List(
                [Dense(a, b, std=a**-0.5, rngs=rngs) for a, b in zip(dims, dims[1:], strict=False)]
            )
            self.image_blocks = nnx.List([])
        img_out = w if cfg.image_tower == "vit" else 4 * w
        self.image_norm = make_norm("layernorm", img_out, "float32", rngs=rngs)
        self.image_proj = Dense(img_out, cfg.embed_dim, std=img_out**-0.5, rngs=rngs)
        self.embed = TokenEmbedding(cfg.vocab_size, cfg.seq_len, w, positions="learned", rngs=rngs)
        self.text_blocks = nnx.List(
            [_Block(w, cfg.heads, cfg.depth, True, rngs=rngs) for _ in range(cfg.depth)]
        )
        self.text_norm = make_norm("layernorm", w, "float32", rngs=rngs)
        self.text_proj = Dense(w, cfg.embed_dim, std=w**-0.5, rngs=rngs)

    def encode_image(self, images: Float[Array, "B height width channels"]) -> Float[Array, "B D"]:
        """L2-normalised image embeddings of images in [0, 1]."""
        x = images.astype(jnp.float32)
        if self.cfg.image_tower == "mlp":
            h_BF = x.reshape(x.shape[0], -1)
            for layer in self.mlp_layers:
                h_BF = layer(h_BF, activation="gelu")
            return _normalise(self.image_proj(self.image_norm(h_BF)))
        B, H, W, C = x.shape
        p = self.cfg.patch
        patches = x.reshape(B, H // p, p, W // p, p, C).transpose(0, 1, 3, 2, 4, 5)
        x_BTD = self.patch_embed(patches.reshape(B, (H // p) * (W // p), p * p * C)) + self.pos
        for block in self.image_blocks:
            x_BTD = block(x_BTD)
        return _normalise(self.image_proj(self.image_norm(jnp.mean(x_BTD, axis=1))))

    def encode_text(self, tokens_BT: Int[Array, "B T"]) -> Float[Array, "B D"]:
        """L2-normalised text embeddings, read at each caption's last non-pad token."""
        x_BTD = self.embed(tokens_BT)
        for block in self.text_blocks:
            x_BTD = block(x_BTD)
        last_B = jnp.maximum(jnp.sum(tokens_BT != 0, axis=1) - 1, 0)
        x_BD = jnp.take_along_axis(x_BTD, last_B[:, None, None], axis=1)[:, 0]
        return _normalise(self.text_proj(self.text_norm(x_BD)))

    def __call__(self, images, tokens_BT) -> tuple[jax.Array, jax.Array]:
        return self.encode_image(images), self.encode_text(tokens_BT)
