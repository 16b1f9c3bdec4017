"""The configuration of Sparse Spectral Training and of the low-rank baselines it is compared with.

One frozen dataclass names the training method of the linear maps (``full``, ``sst``, ``lora``,
``relora``, ``galore``) and every option; a bad value fails here in one line. Which options the
paper fixes and which are our choices is listed in the method's README (``T₃`` =
``resample_every``, the round length ``round_redraws``). :func:`scaled_iteration` gives the
iteration length and warm-up of a run too short for the paper's ``T₃`` = 200 (App. F).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from jaxlab.core.config import check, check_choices
from jaxlab.methods.sst.sampling import SamplingName

__all__ = ["METHODS", "PAPER_ITERATION", "MethodName", "SSTConfig", "scaled_iteration"]

MethodName = Literal["full", "sst", "lora", "relora", "galore"]
METHODS: tuple[str, ...] = MethodName.__args__
# App. F: an SST iteration is T₃ = 200 steps, each starting with a 20-step learning-rate warm-up.
PAPER_ITERATION = (200, 20)


def scaled_iteration(steps: int, k: int, rank: int, rounds: int) -> tuple[int, int]:
    """``(T₃, warm-up)`` for a run of ``steps`` steps that must see ``rounds`` rounds.

    A round is ⌈k/r⌉ iterations (every pair sampled once in expectation). The rule: the paper's
    ``T₃`` = 200 unless the run is too short for ``rounds`` rounds at that length, then the
    longest ``T₃`` that fits, ``⌊steps / (rounds ⌈k/r⌉)⌋``; the warm-up keeps the paper's ratio
    20/200 = 1/10 of ``T₃`` (at least one step).
    """
    t3_paper, warmup_paper = PAPER_ITERATION
    t3 = min(t3_paper, steps // (rounds * math.ceil(k / rank)))
    check(t3 >= 1, f"{steps} steps cannot hold {rounds} rounds of ceil({k}/{rank}) iterations")
    return t3, max(1, round(t3 * warmup_paper / t3_paper))


@dataclasses.dataclass(frozen=True)
class SSTConfig:
    """How the linear maps are trained.

    Attributes:
      method: ``full`` (AdamW on every weight), ``sst``, ``lora`` (frozen random W₀ + (α/r)AB),
        ``relora`` (ReLoRA*: LoRA with periodic merges), ``galore`` (gradient projection).
      rank: r, the trained pairs (SST), the adapter rank (LoRA, ReLoRA*), the projection rank
        (GaLore); capped at min(d_in, d_out) of each map.
      resample_every: T₃, steps between SST's redraws of the active pairs (one iteration;
        paper App. F: 200).
      iteration_warmup: the linear learning-rate warm-up at the start of every SST iteration after
        the first (paper App. F: 20 steps); it multiplies the run's schedule; 0 turns it off.
      round_redraws: redraws per round (a re-SVD starts each round); 0 means ⌈k/r⌉ for each map,
        the number after which every pair is expected to have been trained once.
      sampling: SST's sampling weights (:class:`~jaxlab.methods.sst.sampling.Sampling`).
      lora_alpha: LoRA's α (scale α/r); 0 means α = r.
      relora_every, relora_warmup: ReLoRA*'s merge interval and its learning-rate re-warmup steps.
      galore_every, galore_scale: GaLore's projector refresh interval T and its update scale α.
      exclude: path components of maps kept dense and trained at full rank (the output head).
      seed: the seed of SST's draws and of ReLoRA*'s re-initialisations.
    """

    method: MethodName = "sst"
    rank: int = 8
    resample_every: int = PAPER_ITERATION[0]
    iteration_warmup: int = PAPER_ITERATION[1]
    round_redraws: int = 0
    sampling: SamplingName = "s"
    lora_alpha: float = 0.0
    relora_every: int = 100
    relora_warmup: int = 10
    galore_every: int = 50
    galore_scale: float = 0.25
    exclude: tuple[str, ...] = ("unembed",)
    seed: int = 0

    def __post_init__(self) -> None:
        check_choices(self, "sst.")
        check(self.rank >= 1, f"sst.rank must be >= 1, got {self.rank}")
        for name in ("resample_every", "relora_every", "galore_every"):
            value = getattr(self, name)
            check(value >= 1, f"sst.{name} must be >= 1 step, got {value}")
        check(
            0 <= self.iteration_warmup <= self.resample_every,
            f"sst.iteration_warmup={self.iteration_warmup} must lie in [0, sst.resample_every="
            f"{self.resample_every}]",
        )
        check(self.round_redraws >= 0, "sst.round_redraws must be >= 0 (0: ceil(k / rank))")
        check(
            1 <= self.relora_warmup <= self.relora_every,
            f"sst.relora_warmup={self.relora_warmup} must lie in [1, sst.relora_every="
            f"{self.relora_every}]",
        )
        check(self.lora_alpha >= 0, "sst.lora_alpha must be >= 0 (0: alpha = rank)")
        check(self.galore_scale > 0, "sst.galore_scale must be positive")

    @property
    def alpha(self) -> float:
        return self.lora_alpha or float(self.rank)
