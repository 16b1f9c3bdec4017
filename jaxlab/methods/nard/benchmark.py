"""One fit of a NARD variant or baseline on a problem, scored: the unit of the NARD experiments.

``score_fit`` runs ``name`` (one of :data:`~jaxlab.methods.nard.api.METHODS` or
:data:`~jaxlab.methods.nard.baselines.BASELINES`) on a
:class:`~jaxlab.data.nard_synthetic.NardProblem` and returns a flat dict of JSON-ready numbers:
TPR, FPR, Ω's relative and edge errors (NaN where the method has no output network), coefficient
RMSE, wall seconds, iterations and seconds per iteration.
NARD's seconds exclude compilation (see :func:`~jaxlab.methods.nard.api.fit`).
"""

from __future__ import annotations

import time

import numpy as np

from jaxlab.data.nard_synthetic import NardProblem
from jaxlab.methods.nard.api import METHODS, fit
from jaxlab.methods.nard.baselines import run_baseline
from jaxlab.methods.nard.scores import network_errors, support_rates

__all__ = ["fit_any", "heldout_mse", "score_fit"]


def score_fit(name: str, problem: NardProblem, lam: float, **fit_kwargs) -> dict[str, float]:
    """Fits method or baseline ``name`` on ``problem`` and scores it against the truth."""
    if name in METHODS:
        start = time.perf_counter()
        res = fit(problem.X, problem.Y, method=name, lam=lam, **fit_kwargs)
        wall = time.perf_counter() - start  # includes compilation on the first call of a shape
        coef, selected, prec = map(np.asarray, (res.coef, res.selected, res.precision))
        n_iter, per_iter = res.n_iter, res.seconds_per_iter
        seconds = per_iter * max(n_iter, 1)
        extra = {"converged": float(res.converged), "wall_seconds": wall}
    else:
        out = run_baseline(name, problem.X, problem.Y, lam)
        coef, selected, prec = out.coef, out.selected, out.precision
        n_iter, seconds, per_iter = out.n_iter, out.seconds, out.seconds / out.n_iter
        extra = {"converged": float("nan"), "wall_seconds": seconds}
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
        "seconds_per_iter": per_iter,
        **extra,
    }


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = train.mean(1, keepdims=True), train.std(1, keepdims=True)
    sd = np.where(sd > 0, sd, 1.0)
    return (train - mu) / sd, (test - mu) / sd


def fit_any(name: str, X: np.ndarray, Y: np.ndarray, lam: float, **kw):
    """(coef, selected, precision or None) of method or baseline ``name`` on (X, Y)."""
    if name in METHODS:
        res = fit(X, Y, method=name, lam=lam, **kw)
        return np.asarray(res.coef), np.asarray(res.selected), np.asarray(res.precision)
    out = run_baseline(name, X, Y, lam, **kw)
    return out.coef, out.selected, out.precision


def heldout_mse(
    name: str, X: np.ndarray, Y: np.ndarray, lam: float, *, folds: int = 5, seed: int = 0, **kw
) -> float:
    """Mean squared error on held-out folds, on outputs standardised with training statistics."""
    n = X.shape[1]
    parts = np.array_split(np.random.default_rng(seed).permutation(n), folds)
    errs = []
    for test in parts:
        train = np.setdiff1d(np.arange(n), test)
        x_tr, x_te = _standardise(X[:, train], X[:, test])
        y_tr, y_te = _standardise(Y[:, train], Y[:, test])
        coef, _, _ = fit_any(name, x_tr, y_tr, lam, **kw)
        errs.append(np.mean((y_te - coef @ x_te) ** 2))
    return float(np.mean(errs))
