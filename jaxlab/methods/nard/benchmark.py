"""One fit of a NARD variant or baseline on a problem, scored: the unit of the NARD experiments.

``score_fit`` runs ``name`` (one of :data:`~jaxlab.methods.nard.api.METHODS` or
:data:`~jaxlab.methods.nard.baselines.BASELINES`) on a
:class:`~jaxlab.data.nard_synthetic.NardProblem` and returns a flat dict of JSON-ready numbers:
TPR, FPR, Ω's relative and edge errors (NaN where the method has no output network), coefficient
RMSE, ``seconds`` (total time to convergence), ``n_iter``, ``seconds_per_iter``
(``seconds / n_iter``), ``stats_seconds`` (NARD's statistics; NaN for the baselines) and
``converged`` (1 or 0). NARD's seconds include its statistics and exclude compilation (see
:func:`~jaxlab.methods.nard.api.fit`); ``wall_seconds`` is the whole call, compilation included.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from jaxlab.data.nard_synthetic import NardProblem
from jaxlab.methods.nard.api import METHODS, fit
from jaxlab.methods.nard.baselines import run_baseline
from jaxlab.methods.nard.scores import network_errors, support_rates

__all__ = ["Fitted", "HeldOut", "fit_any", "heldout_mse", "score_fit", "standardise"]


def score_fit(name: str, problem: NardProblem, lam: float, **kwargs) -> dict[str, float]:
    """Fits method or baseline ``name`` on ``problem`` and scores it against the truth.

    ``kwargs`` go to :func:`~jaxlab.methods.nard.api.fit` for a NARD method and to
    :func:`~jaxlab.methods.nard.baselines.run_baseline` for a baseline.
    """
    if name in METHODS:
        start = time.perf_counter()
        res = fit(problem.X, problem.Y, method=name, lam=lam, **kwargs)
        wall = time.perf_counter() - start  # includes compilation on the first call of a shape
        coef, selected, prec = map(np.asarray, (res.coef, res.selected, res.precision))
        n_iter, seconds, converged = res.n_iter, res.seconds, res.converged
        extra = {"stats_seconds": res.stats_seconds, "wall_seconds": wall}
    else:
        out = run_baseline(name, problem.X, problem.Y, lam, **kwargs)
        coef, selected, prec = out.coef, out.selected, out.precision
        n_iter, seconds, converged = out.n_iter, out.seconds, out.converged
        extra = {"stats_seconds": float("nan"), "wall_seconds": seconds}
    tpr, fpr = support_rates(selected, problem.support)
    frob, edge = network_errors(prec, problem.precision) if prec is not None else (np.nan,) * 2
    rmse = float(np.sqrt(np.mean((coef - problem.coef) ** 2)))
    return {
        "tpr": tpr,
        "fpr": fpr,
        "omega_rel_error": frob,
        "edge_error": edge,
        "coef_rmse": rmse,
        "seconds": seconds,
        "n_iter": n_iter,
        "seconds_per_iter": seconds / max(n_iter, 1),
        "converged": float(converged),
        **extra,
    }


def standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres and scales the rows of ``train`` and ``test`` with ``train``'s mean and standard
    deviation (rows that are constant in ``train`` are only centred)."""
    mu, sd = train.mean(1, keepdims=True), train.std(1, keepdims=True)
    sd = np.where(sd > 0, sd, 1.0)
    return (train - mu) / sd, (test - mu) / sd


class Fitted(NamedTuple):
    """A fit of a NARD method or a baseline, reduced to what the real-data experiment reports."""

    coef: np.ndarray
    selected: np.ndarray
    precision: np.ndarray | None
    converged: bool
    n_iter: int
    seconds: float


def fit_any(name: str, X: np.ndarray, Y: np.ndarray, lam: float, **kw) -> Fitted:
    """Fits method or baseline ``name`` on (X, Y) (``kw`` as in :func:`score_fit`)."""
    if name in METHODS:
        res = fit(X, Y, method=name, lam=lam, **kw)
        arrays = map(np.asarray, (res.coef, res.selected, res.precision))
        return Fitted(*arrays, res.converged, res.n_iter, res.seconds)
    out = run_baseline(name, X, Y, lam, **kw)
    return Fitted(out.coef, out.selected, out.precision, out.converged, out.n_iter, out.seconds)


class HeldOut(NamedTuple):
    """Mean held-out MSE over the folds and the fraction of the folds' fits that converged."""

    mse: float
    converged: float


def heldout_mse(
    name: str, X: np.ndarray, Y: np.ndarray, lam: float, *, folds: int = 5, seed: int = 0, **kw
) -> HeldOut:
    """Mean squared error on held-out folds, on outputs standardised with training statistics."""
    n = X.shape[1]
    parts = np.array_split(np.random.default_rng(seed).permutation(n), folds)
    errs, converged = [], []
    for test in parts:
        train = np.setdiff1d(np.arange(n), test)
        x_tr, x_te = standardise(X[:, train], X[:, test])
        y_tr, y_te = standardise(Y[:, train], Y[:, test])
        res = fit_any(name, x_tr, y_tr, lam, **kw)
        errs.append(np.mean((y_te - res.coef @ x_te) ** 2))
        converged.append(res.converged)
    return HeldOut(float(np.mean(errs)), float(np.mean(converged)))
