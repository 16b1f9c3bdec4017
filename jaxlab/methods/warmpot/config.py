"""Configuration of WARMPOT training and of its baselines, which share every other setting.

Naram et al., "Theoretical Performance Guarantees for Partial Domain Adaptation via Partial Optimal
Transport", ICML 2025 (authors' PyTorch code: github.com/JayD2106/WARMPOT). The method is one
``method`` field: the baselines differ from WARMPOT only in the source weights, the masses of the
plan, or whether the alignment term is on (:data:`METHODS`), so a comparison changes one thing.

Where the paper and the code differ:

* the mass schedule: the code sets ``α_t = α t / T_ramp + 0.01`` for ``t ≤ T_ramp`` (so it ends the
  ramp at ``α + 0.01`` and then drops to ``α``); here ``α_t = 0.01 + (α - 0.01) min(t / T_ramp, 1)``
  reaches ``α`` exactly (the paper, Sec. 5, only says the mass is increased from a small value);
* the classifier loss is the weighted mean ``Σ w_i CE_i / Σ w_i`` as in the code's
  ``CrossEntropyWeighted`` (the paper's Eq. for the empirical bound weights by ``w_i`` directly;
  with ``Σ w = α`` the two differ by the factor ``α``, which the normalisation removes).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxlab.core.config import check, check_choices

__all__ = ["METHODS", "MethodName", "WarmpotConfig"]

MethodName = Literal["warmpot", "source_only", "full_ot", "partial_uniform", "pada", "mpot"]
# method: (source weights, alignment on, masses: "config" (α, β), "full" (1, 1), "beta1" (α, 1))
METHODS: dict[str, tuple[str, bool, str]] = {
    "warmpot": ("plan", True, "config"),  # w = π1 (the paper's weights), partial alignment
    "source_only": ("uniform", False, "config"),  # plain cross-entropy on the source
    "full_ot": ("uniform", True, "full"),  # balanced OT alignment (α = β = 1), uniform weights
    "partial_uniform": ("uniform", True, "config"),  # WARMPOT's partial plan, uniform weights
    "pada": ("class", True, "config"),  # PADA-style class weights: mean target softmax per class
    # m-POT-style (Nguyen et al., ICML 2022): mini-batch partial OT of mass α between uniform
    # measures (β = 1), uniform weights.
    "mpot": ("uniform", True, "beta1"),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarmpotConfig:
    """One training run (a method, its hyperparameters, the schedule).

    ``alpha`` (α) is the transported mass, ``beta`` (β) scales the source masses to ``1/(β n_s)``
    (β near the fraction of shared classes is the paper's recommendation, Sec. 4); ``epsilon`` is
    the entropic regularisation of the plan; ``eta1``, ``eta2``, ``eta3`` weigh the feature
    distance, the label cost and the transport term (paper Sec. 5, Eq. for the cost ``M``).
    """

    method: MethodName = "warmpot"
    alpha: float = 0.5
    beta: float = 0.5
    epsilon: float = 1.0
    eta1: float = 0.1
    eta2: float = 1.0
    eta3: float = 0.5
    entropy: float = 0.0  # weight of the mean target prediction entropy (the code's --entropy)
    ramp_steps: int = 300  # steps over which α_t rises from 0.01 to α
    steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 1e-3
    hidden: int = 128
    features: int = 64
    eval_every: int = 50
    pada_momentum: float = 0.9  # EMA of the mean target softmax (PADA's class weights)
    ot_tol: float = 1e-4
    ot_max_iter: int = 300
    seed: int = 0

    def __post_init__(self):
        check_choices(self)
        check(0 < self.alpha <= 1, f"alpha must be in (0, 1], got {self.alpha}")
        check(0 < self.beta <= 1, f"beta must be in (0, 1], got {self.beta}")
        check(self.epsilon > 0, f"epsilon must be positive, got {self.epsilon}")
        check(min(self.eta1, self.eta2, self.eta3, self.entropy) >= 0, "etas must be >= 0")
        check(self.steps >= 1 and self.batch_size >= 2, "need steps >= 1 and batch_size >= 2")
        check(
            self.eval_every >= 1 and self.steps % self.eval_every == 0,
            f"steps ({self.steps}) must be a multiple of eval_every ({self.eval_every})",
        )
        check(self.ramp_steps >= 0 and self.learning_rate > 0, "need ramp_steps >= 0, lr > 0")
        check(0 <= self.pada_momentum < 1, "pada_momentum must be in [0, 1)")

    @property
    def weights(self) -> str:
        return METHODS[self.method][0]

    @property
    def aligns(self) -> bool:
        return METHODS[self.method][1]

    @property
    def masses(self) -> tuple[float, float]:
        """``(α, β)`` the plan is computed with (1, 1 for full OT)."""
        kind = METHODS[self.method][2]
        return {"full": (1.0, 1.0), "beta1": (self.alpha, 1.0)}.get(kind, (self.alpha, self.beta))
