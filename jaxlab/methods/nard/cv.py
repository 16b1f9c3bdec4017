"""K-fold cross-validation of the graphical-lasso penalty λ (``fit(..., lam="cv")``).

For each candidate λ and fold, the chosen NARD variant is fitted on the other folds (centred with
their own means when ``fit_intercept``, exactly as :func:`~jaxlab.methods.nard.fit` would fit them)
and scored by the held-out plug-in predictive log-likelihood per sample,
``(1/N_test) Σ_n log N(y_n | W x_n + b, Ω⁻¹) = ½ log|Ω| − (m/2) log 2π − ½ tr(Ω R Rᵀ)/N_test`` with
``R = Y_test − W X_test − b``; the λ with the best mean score wins. Folds are a seeded permutation
of the samples cut into near-equal parts. Candidates default to :data:`LAMS` times the mean
variance of the outputs (λ is in the units of Y's covariance). Cross-validation loops in Python
over candidates and folds, so it runs on concrete arrays only, not under ``jax.jit``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from jaxlab.core.checks import is_traced
from jaxlab.core.errors import ConfigError, RunError
from jaxlab.methods.nard.checks import check_lam, check_options, validate
from jaxlab.methods.nard.output import NARDResult
from jaxlab.methods.nard.solve import fit_arrays

__all__ = ["LAMS", "CVResult", "heldout_loglik", "select_lam"]

LAMS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)


class CVResult(NamedTuple):
    """``best`` λ, the candidates ``lams`` and their mean held-out ``scores``."""

    best: float
    lams: tuple[float, ...]
    scores: tuple[float, ...]


def heldout_loglik(
    fitted: NARDResult, X: Float[ArrayLike, "d N"], Y: Float[ArrayLike, "m N"]
) -> float:
    """Mean predictive log-likelihood of the columns of Y under ``N(W x + b, Ω⁻¹)``."""
    m, n = Y.shape
    r = Y - fitted.predict(X)
    logdet = jnp.linalg.slogdet(fitted.precision)[1]
    quad = jnp.sum(fitted.precision * (r @ r.T)) / n
    return float(0.5 * logdet - 0.5 * m * math.log(2 * math.pi) - 0.5 * quad)


def select_lam(
    X: Float[ArrayLike, "d N"],
    Y: Float[ArrayLike, "m N"],
    method: str = "nard",
    *,
    lams: tuple[float, ...] | None = None,
    folds: int = 5,
    seed: int = 0,
    fit_intercept: bool = True,
    **opts,
) -> CVResult:
    """Chooses λ by ``folds``-fold cross-validation.

    Args:
      X: inputs, d×N.
      Y: outputs, m×N.
      method: the NARD variant fitted on each fold.
      lams: the candidates (default: :data:`LAMS` times the mean variance of Y's rows).
      folds: number of folds.
      seed: seed of the fold assignment.
      fit_intercept: centre each training fold (as :func:`~jaxlab.methods.nard.fit`).
      **opts: the other options of :func:`~jaxlab.methods.nard.fit` (``max_iter``, ``tol``,
        ``alpha_update``, ``max_active``), passed to every fit.

    Returns:
      A :class:`CVResult`.

    Raises:
      ConfigError: bad data, folds or candidates, or traced inputs (run it outside ``jax.jit`` and
        pass its ``best`` to ``fit``).
      RunError: every candidate's held-out score is non-finite.
    """
    if is_traced(X, Y):
        raise ConfigError(
            "lam='cv' (select_lam) cannot run under jax.jit or jax.vmap: it chooses λ in Python; "
            "call select_lam(X, Y, method) outside and pass lam=<its .best>"
        )
    X, Y = validate(X, Y, fit_intercept=fit_intercept)
    check_options(method, X.dtype, fit_intercept=fit_intercept, **opts)
    n = X.shape[1]
    if isinstance(folds, bool) or not isinstance(folds, int | np.integer) or not 2 <= folds <= n:
        raise ConfigError(f"cv_folds must be an integer in [2, N={n}], got {folds!r}")
    if lams is None:
        yc = Y - jnp.mean(Y, axis=1, keepdims=True) if fit_intercept else Y
        scale = float(jnp.mean(jnp.sum(yc * yc, axis=1))) / n
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
            out = fit_arrays(
                method, X[:, train], Y[:, train], lam, fit_intercept=fit_intercept, **opts
            )
            total += heldout_loglik(out, X[:, test], Y[:, test])
        scores.append(total / folds)
    if not np.any(np.isfinite(scores)):
        raise RunError(f"every candidate λ gave a non-finite held-out score: {scores}")
    # A candidate whose fits broke down (NaN score) is never chosen.
    best = lams[int(np.nanargmax(np.where(np.isfinite(scores), scores, np.nan)))]
    return CVResult(best, lams, tuple(scores))
