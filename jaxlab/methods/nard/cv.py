"""K-fold cross-validation of the graphical-lasso penalty λ (``fit(..., lam="cv")``).

For each candidate λ and fold, the chosen NARD variant is fitted on the other folds and scored by
the held-out plug-in predictive log-likelihood per sample,
``(1/N_test) Σ_n log N(y_n | W x_n, Ω⁻¹) = ½ log|Ω| − (m/2) log 2π − ½ tr(Ω R Rᵀ)/N_test`` with
``R = Y_test − W X_test``; the λ with the best mean score wins. Folds are a seeded permutation of
the samples cut into near-equal parts. Candidates default to :data:`LAMS` times the mean diagonal of
``YYᵀ/N`` (λ is in the units of Y's covariance).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.core.errors import ConfigError, RunError
from jaxlab.methods.nard.solve import run_solver

__all__ = ["LAMS", "CVResult", "check_lam", "heldout_loglik", "select_lam"]

LAMS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)


class CVResult(NamedTuple):
    """``best`` λ, the candidates ``lams`` and their mean held-out ``scores``."""

    best: float
    lams: tuple[float, ...]
    scores: tuple[float, ...]


def check_lam(lam: object, name: str = "lam") -> float:
    """``lam`` as a float, or a one-line :class:`ConfigError` unless it is a finite number >= 0."""
    bad = ConfigError(f"{name} must be a finite number >= 0, got {lam!r}")
    if isinstance(lam, (str, bool)):
        raise bad
    try:
        value = float(lam)
    except (TypeError, ValueError):
        raise bad from None
    if not (math.isfinite(value) and value >= 0):
        raise bad
    return value


def heldout_loglik(
    coef: Float[Array, "m d"],
    precision: Float[Array, "m m"],
    X: Float[Array, "d N"],
    Y: Float[Array, "m N"],
) -> float:
    """Mean predictive log-likelihood of the columns of Y under ``N(W x, Ω⁻¹)``."""
    m, n = Y.shape
    r = Y - coef @ X
    logdet = jnp.linalg.slogdet(precision)[1]
    quad = jnp.sum(precision * (r @ r.T)) / n
    return float(0.5 * logdet - 0.5 * m * math.log(2 * math.pi) - 0.5 * quad)


def select_lam(
    X: Float[Array, "d N"],
    Y: Float[Array, "m N"],
    method: str,
    *,
    lams: tuple[float, ...] | None = None,
    folds: int = 5,
    seed: int = 0,
    **opts,
) -> CVResult:
    """Chooses λ by ``folds``-fold cross-validation (``opts`` are passed to the solver)."""
    n = X.shape[1]
    if not 2 <= folds <= n:
        raise ConfigError(f"cv_folds must lie in [2, N={n}], got {folds}")
    if lams is None:
        scale = float(jnp.mean(jnp.sum(Y * Y, axis=1))) / n
        lams = tuple(scale * v for v in LAMS)
    if isinstance(lams, str) or not hasattr(lams, "__len__") or len(lams) == 0:
        raise ConfigError(f"lams must be a non-empty list of finite values >= 0, got {lams!r}")
    lams = tuple(check_lam(v, "every value of lams") for v in lams)
    parts = np.array_split(np.random.default_rng(seed).permutation(n), folds)
    scores = []
    for lam in lams:
        total = 0.0
        for test in parts:
            train = np.setdiff1d(np.arange(n), test)
            out = run_solver(method, X[:, train], Y[:, train], float(lam), **opts)
            total += heldout_loglik(out.coef, out.precision, X[:, test], Y[:, test])
        scores.append(total / folds)
    if not np.any(np.isfinite(scores)):
        raise RunError(f"every candidate λ gave a non-finite held-out score: {scores}")
    # A candidate whose fits broke down (NaN score) is never chosen.
    best = lams[int(np.nanargmax(np.where(np.isfinite(scores), scores, np.nan)))]
    return CVResult(best, lams, tuple(scores))
