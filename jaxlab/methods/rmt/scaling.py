"""Matched Transformer/RMT pairs and the analysis of the RMT paper's scaling comparison.

A pair shares the core width ``D = R * Dv`` (the transformer's model dimension, the RMT's MLP input
and embedding size), the number of layers, the head count ``H = R`` and head size ``Dv``, and
``d_ff`` — the way the paper pairs its 405M transformer with its 305M RMT (Table 2). The RMT then
has fewer parameters (no W_Q, W_K, W_V, W_O) and fewer FLOPs per token, and a residual stream of
``Dk * Dv`` entries instead of ``D``.

The headline numbers (paper Sec. 5.1, Table 3) are the fraction of the transformer's training FLOPs
and tokens that the RMT needs to reach the transformer's final loss; :func:`fraction_to_reach`
reads them off the validation curves by linear interpolation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxlab.methods.rmt.config import RMTConfig
from jaxlab.nn.transformer import TransformerConfig

__all__ = [
    "MATCHED_RECIPE",
    "fraction_to_reach",
    "matched_pair",
    "tokens_to_reach",
]

# The recipe of a matched pair unless told otherwise: the RMT authors' choices where their code
# makes one for both models (RMSNorm, ALiBi with geometric slopes, logits / (layer + 1)), and the
# paper's variance-preserving init applied to every matrix of both (see jaxlab.nn.init).
MATCHED_RECIPE = dict(
    norm="rmsnorm", positions="alibi", alibi="geometric", layer_scaled_logits=True, init="fan_in"
)


def matched_pair(
    width: int,
    layers: int,
    *,
    head_dim: int,
    d_key: int,
    seq_len: int,
    vocab_size: int,
    **recipe: Any,
) -> tuple[TransformerConfig, RMTConfig]:
    """The transformer and RMT of core width ``width`` (= heads x head_dim), ``layers`` deep.

    ``recipe`` overrides :data:`MATCHED_RECIPE`, the fields both models take alike
    (:class:`~jaxlab.nn.lm_config.LMConfig`: ``norm``, ``positions``, ``alibi``,
    ``layer_scaled_logits``, ``init``, ...); both configs get exactly the same values — every
    field of the shared base is equal — so that the pair differs in its residual stream only.
    """
    heads = width // head_dim
    common = dict(
        vocab_size=vocab_size, seq_len=seq_len, num_layers=layers, **{**MATCHED_RECIPE, **recipe}
    )
    transformer = TransformerConfig(d_model=width, num_heads=heads, d_ff=4 * width, **common)
    rmt = RMTConfig(rank=heads, d_key=d_key, d_value=head_dim, d_ff=4 * width, **common)
    return transformer, rmt


def tokens_to_reach(
    tokens: Sequence[float], losses: Sequence[float], target: float
) -> float | None:
    """Tokens at which a validation curve first reaches ``target`` (interpolated); None if never."""
    prev_t, prev_l = 0.0, None
    for t, loss in zip(tokens, losses, strict=True):
        if loss <= target:
            if prev_l is None or prev_l == loss:
                return float(t)
            return float(prev_t + (t - prev_t) * (prev_l - target) / (prev_l - loss))
        prev_t, prev_l = t, loss
    return None


def fraction_to_reach(
    rmt_curve: tuple[Sequence[float], Sequence[float]],
    transformer_curve: tuple[Sequence[float], Sequence[float]],
    rmt_flops_per_token: float,
    transformer_flops_per_token: float,
) -> dict[str, float | None]:
    """Tokens and FLOPs the RMT needs for the transformer's final loss, as fractions of its own."""
    target = transformer_curve[1][-1]
    tokens = tokens_to_reach(*rmt_curve, target)
    total = transformer_curve[0][-1]
    if tokens is None:
        return {"target_loss": target, "tokens_fraction": None, "flops_fraction": None}
    frac = tokens / total
    return {
        "target_loss": target,
        "tokens_fraction": frac,
        "flops_fraction": frac * rmt_flops_per_token / transformer_flops_per_token,
    }
