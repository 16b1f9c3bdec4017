"""The in-context regression Transformer with a pluggable scoring function (Kuang et al. 2025,
Sec. 5.1, following Garg et al. 2022).

A prompt ``(x_1, y_1, ..., x_N, y_N)`` becomes ``2N`` tokens of width ``d``: ``x_i`` itself and
``(y_i, 0, ..., 0)``. A read-in map ``d -> D`` and learned positions feed ``num_layers`` pre-norm
blocks (attention, GELU MLP), a final LayerNorm and a read-out ``D -> 1``; the prediction for
``y_i`` is read at the token of ``x_i``. Only the attention's scoring differs between models
(:mod:`jaxlab.methods.structured_attention.scoring`): ``mha`` with ``num_heads`` heads of size
``D / num_heads``, ``btt`` and ``mlr`` with full-width per-head scores. Values and the output map
are dense ``D x D`` in every model; with ``H`` heads each head's values are ``D / H`` wide.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from jaxlab.core.config import check, check_choices
from jaxlab.methods.structured_attention.mup import MUP_INPUT_STD
from jaxlab.methods.structured_attention.scoring import (
    MIN_LEVEL_WIDTH,
    BilinearBTTScore,
    BilinearMLRScore,
    DotProductScore,
)
from jaxlab.nn.attention import accumulation_dtype
from jaxlab.nn.layers import MLP, param_init
from jaxlab.nn.linear import LinearSpec

__all__ = ["ICLConfig", "ICLTransformer", "ScoredAttention"]

_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ICLConfig:
    """Shape of :class:`ICLTransformer`.

    Attributes:
      dim: input dimension d of the regression; n_points: examples per prompt (2d in the paper).
      d_model: width D; num_layers: blocks; num_heads: attention heads.
      scoring: ``mha``, ``btt`` (bilinear BTT, TT rank ``btt_rank``) or ``mlr`` (bilinear MLR
        with ``mlr_ranks`` per head, level 0 first; under ``qk_norm`` every level needs
        ``r_l 2^l >= 3`` numbers for its LayerNorm, ``scoring.MIN_LEVEL_WIDTH``).
      qk_norm: the LayerNorms of the scores (:mod:`~jaxlab.methods.structured_attention.scoring`):
        per-head QK-LN for ``mha``, the key-side LN for ``btt``, the per-level LNs for ``mlr``;
        on by default, as the authors' ICL runs (``do_qk_ln=True``).
      logit_scale: ``"sqrt"`` (default) or the authors' µP scales ``"mup"`` (per scoring, see
        :mod:`~jaxlab.methods.structured_attention.scoring`).
      rms_cap: the authors' RMS cap of the BTT and MLR factor weights (no effect on ``mha``)
        (:func:`jaxlab.nn.linear.rms_capped`); off by default. It does not change the init.
      parametrization: ``"standard"`` (jaxlab's inits: read-in N(0, 1), output maps scaled by
        ``1/sqrt(2L)``, one learning rate) or ``"mup"``, the authors' ``muPify``
        (:mod:`~jaxlab.methods.structured_attention.mup`): read-in and positions N(0, 0.02²),
        the attention's and MLP's output maps and the read-out at zero, and per-layer learning
        rates from :func:`~jaxlab.methods.structured_attention.mup.mup_lr_groups` (the tasks'
        ``optimizer``). In both, every hidden matrix and every BTT/MLR factor starts at
        N(0, 1/fan_in), LayerNorm scales at one.
      position_std: init std of the learned positions; ``None`` (default): 1.0 under
        ``"standard"``, the authors' 0.02 under ``"mup"``. Garg et al.'s GPT-2 uses 0.02 with a
        read-in at 0.02; with jaxlab's read-in at 1.0 a y token ``(y, 0, .., 0)`` lies along a
        read-in direction that x tokens share, so positions at 0.02 would tell the two kinds of
        token apart only through a tiny signal and the task is learned much later (see the
        method README); 1.0 keeps the ratio of the two scales.
    """

    dim: int = 16
    n_points: int = 32
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 1
    scoring: Literal["mha", "btt", "mlr"] = "mha"
    btt_rank: int = 1
    mlr_ranks: tuple[int, ...] = (4, 2, 1, 1)
    qk_norm: bool = True
    logit_scale: Literal["sqrt", "mup"] = "sqrt"
    rms_cap: bool = False
    parametrization: Literal["standard", "mup"] = "standard"
    position_std: float | None = None

    def __post_init__(self) -> None:
        # Messages name the fields themselves: the ICL experiments pass several of them through
        # under the same names (mlr_ranks, qk_norm, logit_scale, num_layers) and check the others
        # (their widths and heads) in their own terms first.
        check_choices(self)
        for name in ("dim", "n_points", "d_model", "num_layers", "num_heads"):
            check(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
        check(
            self.position_std is None or self.position_std > 0,
            f"position_std must be positive (or None: the parametrization's), got "
            f"{self.position_std}",
        )
        check(
            self.d_model % self.num_heads == 0,
            f"num_heads={self.num_heads} must divide d_model={self.d_model}",
        )
        if self.scoring == "mlr":
            blocks = 2 ** (len(self.mlr_ranks) - 1)
            check(
                self.mlr_ranks and min(self.mlr_ranks) > 0 and self.d_model % blocks == 0,
                f"mlr_ranks={self.mlr_ranks}: positive ranks whose {blocks} blocks divide "
                f"d_model={self.d_model}",
            )
            widths = [r * 2**lv for lv, r in enumerate(self.mlr_ranks)]
            check(
                not self.qk_norm or min(widths) >= MIN_LEVEL_WIDTH,
                f"mlr_ranks={self.mlr_ranks} with qk_norm: a level's LayerNorm sees "
                f"r_l 2^l = {min(widths)} number(s) per head (constant or a sign); give every "
                f"level at least {MIN_LEVEL_WIDTH} (e.g. 3|2|1 per head at D = 48, 8 heads)",
            )

    @property
    def seq_len(self) -> int:
        return 2 * self.n_points

    @property
    def mup(self) -> bool:
        return self.parametrization == "mup"

    def input_stds(self) -> tuple[float, float]:
        """Init stds of the read-in and of the positions: the authors' 0.02 for both under µP;
        1.0 (inputs have variance 1/d) and ``position_std`` (default 1.0) otherwise."""
        if self.mup:
            return MUP_INPUT_STD, self.position_std or MUP_INPUT_STD
        return 1.0, self.position_std or 1.0

    def output_std(self, fan_in: int, depth_scale: float = 1.0) -> float:
        """Init std of a map that writes into the residual stream or the prediction: 0 under
        µP (``muPify``'s zeros), else ``(fan_in * depth_scale)^-1/2``."""
        return 0.0 if self.mup else (fan_in * depth_scale) ** -0.5


def _scorer(cfg: ICLConfig, rngs: nnx.Rngs) -> nnx.Module:
    common = dict(qk_norm=cfg.qk_norm, logit_scale=cfg.logit_scale, rngs=rngs)
    D, H = cfg.d_model, cfg.num_heads
    if cfg.scoring == "btt":
        return BilinearBTTScore(D, H, btt_rank=cfg.btt_rank, rms_cap=cfg.rms_cap, **common)
    if cfg.scoring == "mlr":
        return BilinearMLRScore(D, H, ranks=cfg.mlr_ranks, rms_cap=cfg.rms_cap, **common)
    return DotProductScore(D, H, **common)


class ScoredAttention(nnx.Module):
    """Causal softmax attention over the logits of a scoring function, dense values and output."""

    def __init__(self, cfg: ICLConfig, *, rngs: nnx.Rngs):
        D, dense = cfg.d_model, LinearSpec()
        self.score = _scorer(cfg, rngs)
        self.v = dense(D, D, std=D**-0.5, rngs=rngs)
        self.out = dense(D, D, std=cfg.output_std(D, 2 * cfg.num_layers), rngs=rngs)
        self.num_heads = cfg.num_heads

    def __call__(
        self, x_BTD: Float[Array, "B T D"], num_queries: int | None = None
    ) -> Float[Array, "B Q D"]:
        """The outputs of the last ``num_queries`` positions (all ``T`` by default): a model that
        reads only the last token's output (the recall probe) skips the other rows' logits."""
        B, T, D = x_BTD.shape
        Q = T if num_queries is None else num_queries
        s_BHQT = self.score(x_BTD, num_queries)
        s_BHQT = s_BHQT.astype(accumulation_dtype(s_BHQT))  # float32, float64 for float64 input
        causal_QT = jnp.arange(T)[None, :] <= jnp.arange(T - Q, T)[:, None]
        p_BHQT = jax.nn.softmax(jnp.where(causal_QT, s_BHQT, _MASK_VALUE), axis=-1)
        v_BTHE = self.v(x_BTD).reshape(B, T, self.num_heads, D // self.num_heads)
        o_BQHE = jnp.einsum("bhqt,bthe->bqhe", p_BHQT, v_BTHE)
        return self.out(o_BQHE.reshape(B, Q, D))

    def flops(self, T: int, num_queries: int | None = None) -> float:
        """Forward FLOPs of one sequence: scores, the value map (``T`` rows), the value sum and
        the output map (``Q = num_queries`` rows, ``T`` by default)."""
        D, Q = self.v.d_in, T if num_queries is None else num_queries
        return self.score.flops(T, num_queries) + 2 * (T + Q) * D * D + 2 * Q * T * D


class _Block(nnx.Module):
    def __init__(self, cfg: ICLConfig, *, rngs: nnx.Rngs):
        D = cfg.d_model
        self.norm1 = nnx.LayerNorm(D, use_bias=False, rngs=rngs)
        self.attn = ScoredAttention(cfg, rngs=rngs)
        self.norm2 = nnx.LayerNorm(D, use_bias=False, rngs=rngs)
        self.mlp = MLP(D, 4 * D, in_std=D**-0.5, out_std=cfg.output_std(4 * D, 2 * cfg.num_layers),
                       matmul_impl="xla", rngs=rngs)  # fmt: skip

    def __call__(self, x_BTD):
        x_BTD = x_BTD + self.attn(self.norm1(x_BTD))
        return x_BTD + self.mlp(self.norm2(x_BTD))


class ICLTransformer(nnx.Module):
    """Prompts ``xs (B, N, d)``, ``ys (B, N)`` -> predictions ``(B, N)`` of every ``y_i`` from
    ``x_1, y_1, ..., x_i``."""

    def __init__(self, cfg: ICLConfig, *, rngs: nnx.Rngs):
        D, dense = cfg.d_model, LinearSpec()
        self.cfg = cfg
        read_in_std, position_std = cfg.input_stds()
        self.read_in = dense(cfg.dim, D, std=read_in_std, rngs=rngs)
        init = param_init(nnx.initializers.normal(position_std), (None, None))
        self.positions = nnx.Param(init(rngs.params(), (cfg.seq_len, D), jnp.float32))
        self.blocks = nnx.List([_Block(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.final_norm = nnx.LayerNorm(D, use_bias=False, rngs=rngs)
        self.read_out = dense(D, 1, std=cfg.output_std(D), rngs=rngs)

    def __call__(self, xs_BNd: Float[Array, "B N d"], ys_BN: Float[Array, "B N"]):
        B, N, d = xs_BNd.shape
        y_tokens_BNd = jnp.zeros_like(xs_BNd).at[..., 0].set(ys_BN)
        z_BTd = jnp.stack([xs_BNd, y_tokens_BNd], axis=2).reshape(B, 2 * N, d)
        h_BTD = self.read_in(z_BTd) + self.positions[: 2 * N]
        for block in self.blocks:
            h_BTD = block(h_BTD)
        pred_BT = self.read_out(self.final_norm(h_BTD))[..., 0]
        return pred_BT[:, ::2]  # at the x tokens

    def flops(self) -> float:
        """Analytic forward FLOPs of one prompt (matrix products; a multiply-add is 2)."""
        cfg, T = self.cfg, self.cfg.seq_len
        D = cfg.d_model
        per_block = self.blocks[0].attn.flops(T) + 2 * 2 * T * D * 4 * D
        return cfg.num_layers * per_block + 2 * T * D * (cfg.dim + 1)
