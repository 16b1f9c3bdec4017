"""Matched Transformer/RMT pairs and the analysis of the RMT paper's scaling comparison.

A pair shares the core width ``D = R * Dv`` (the transformer's model dimension, the RMT's MLP input
and embedding size), the number of layers, the head count ``H = R`` and head size ``Dv``, and
``d_ff`` — the way the paper pairs its 405M transformer with its 305M RMT (Table 2). The RMT then
has fewer parameters (no W_Q, W_K, W_V, W_O) and fewer FLOPs per token, and a residual stream of
``Dk * Dv`` entries instead of ``D``.

The headline numbers (paper Sec. 5.1, Table 3) are the fraction of the transformer's training FLOPs
and tokens that the RMT needs to reach the transformer's final loss; :func:`fraction_to_reach`
reads them off the validation curves by linear interpolation, :func:`pair_reach` does so for every
seed of a pair and summarises over the seeds, and :func:`scaling_fits` fits power laws of the
seed-mean final loss against training compute and non-embedding parameters (Sec. 5.1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxlab.core.scaling import PowerLawFit, fit_power_law, mean_sd
from jaxlab.lm.transformer import TransformerConfig
from jaxlab.methods.rmt.config import RMTConfig

__all__ = [
    "MATCHED_RECIPE",
    "ArchFit",
    "fraction_to_reach",
    "matched_pair",
    "pair_reach",
    "scaling_fits",
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
    (:class:`~jaxlab.lm.config.LMConfig`: ``norm``, ``positions``, ``alibi``,
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


def pair_reach(
    transformer_runs: Sequence[Mapping[str, Any]],
    rmt_runs: Sequence[Mapping[str, Any]],
    transformer: Mapping[str, float],
    rmt: Mapping[str, float],
) -> dict[str, Any]:
    """Per seed (the pair shares it): tokens and FLOPs fractions to the transformer's final loss.

    Args:
      transformer_runs, rmt_runs: one run per seed, in the same seed order, each with ``seed``,
        ``tokens`` and ``eval_loss`` (the validation curve).
      transformer, rmt: each model's ``train_flops_per_token_no_vocab`` (the analytic count
        without the vocabulary terms, the paper's convention) and
        ``measured_train_flops_per_token`` (XLA's count of the compiled train step).

    Returns:
      ``per_seed`` (:func:`fraction_to_reach` per seed, plus the FLOPs fraction with XLA's
      counts), ``reached`` and ``seeds`` (counts), and :func:`~jaxlab.core.scaling.mean_sd` over
      the seeds that reached the loss of ``tokens_fraction``, ``flops_fraction`` and
      ``measured_flops_fraction``.
    """
    per_seed = []
    measured_ratio = (
        rmt["measured_train_flops_per_token"] / transformer["measured_train_flops_per_token"]
    )
    for t, r in zip(transformer_runs, rmt_runs, strict=True):
        reach = fraction_to_reach(
            (r["tokens"], r["eval_loss"]),
            (t["tokens"], t["eval_loss"]),
            rmt["train_flops_per_token_no_vocab"],
            transformer["train_flops_per_token_no_vocab"],
        )
        frac = reach["tokens_fraction"]
        reach["measured_flops_fraction"] = None if frac is None else frac * measured_ratio
        per_seed.append({"seed": t["seed"], **reach})
    reached = [s for s in per_seed if s["tokens_fraction"] is not None]
    summary = {
        k: mean_sd([s[k] for s in reached])
        for k in ("tokens_fraction", "flops_fraction", "measured_flops_fraction")
    }
    return {"per_seed": per_seed, "reached": len(reached), "seeds": len(per_seed), **summary}


class ArchFit(NamedTuple):
    """One architecture's points across sizes and the power laws fitted to them."""

    compute: np.ndarray  # training FLOPs of each size (analytic, with the vocabulary terms)
    params: np.ndarray  # non-embedding parameters of each size
    loss: np.ndarray  # seed-mean final validation loss of each size
    vs_flops: PowerLawFit  # L(C); with an offset from four sizes on
    vs_params: PowerLawFit  # L(N), a pure power law


def scaling_fits(entries: Sequence[Mapping[str, Any]]) -> ArchFit:
    """Power laws of one architecture's seed-mean final loss across sizes (paper Sec. 5.1).

    Args:
      entries: one per size, with ``train_flops_per_token``, ``non_embedding_params``,
        ``final_eval_loss`` (a :func:`~jaxlab.core.scaling.mean_sd` result) and ``runs`` (the
        tokens seen by the first run's curve give the training budget).
    """
    compute = np.array([e["train_flops_per_token"] * e["runs"][0]["tokens"][-1] for e in entries])
    params = np.array([e["non_embedding_params"] for e in entries])
    loss = np.array([e["final_eval_loss"]["mean"] for e in entries])
    return ArchFit(
        compute,
        params,
        loss,
        fit_power_law(compute, loss, with_offset=len(entries) >= 4),
        fit_power_law(params, loss, with_offset=False),
    )
