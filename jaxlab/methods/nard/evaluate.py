"""Fitting any NARD algorithm or baseline by name, and scoring the fit: the unit of the experiments.

:func:`fit_any` is the family's one dispatcher: it runs ``name`` (one of
:data:`~jaxlab.methods.nard.api.METHODS` or :data:`~jaxlab.methods.nard.baselines.BASELINES`) and
returns its :class:`~jaxlab.methods.nard.output.NARDResult` with numpy arrays, so methods and
baselines are read the same way. :func:`score_fit` scores one fit on a
:class:`~jaxlab.data.nard_synthetic.NardProblem` against the truth as a flat dict of JSON-ready
numbers: TPR, FPR, Ω's relative and edge errors (NaN where the method has no output network),
coefficient RMSE, ``seconds`` (total time to convergence), ``n_iter``, ``seconds_per_iter``
(``seconds / n_iter``), ``stats_seconds`` (NARD's statistics; NaN for the baselines) and
``converged`` (1 or 0). NARD's seconds include its statistics and exclude compilation (see
:func:`~jaxlab.methods.nard.api.fit`); ``wall_seconds`` is the whole call, compilation included.
:func:`heldout_mse` is the real-data score: the mean held-out error over folds.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from jaxlab.data.nard_synthetic import NardProblem
from jaxlab.methods.nard.api import METHODS, fit
from jaxlab.methods.nard.baselines import run_baseline
from jaxlab.methods.nard.output import NARDResult
from jaxlab.methods.nard.scores import network_errors, support_rates

__all__ = ["HeldOut", "fit_any", "heldout_mse", "score_fit", "standardise"]


def fit_any(name: str, X: np.ndarray, Y: np.ndarray, lam: float, **kw) -> NARDResult:
    """Fits method or baseline ``name`` on X (d×N), Y (m×N) with penalty ``lam``.

    ``kw`` go to :func:`~jaxlab.methods.nard.api.fit` for a NARD method and to
    :func:`~jaxlab.methods.nard.baselines.run_baseline` for a baseline. The result's arrays are
    numpy arrays in both cases.
    """
    if name in METHODS:
        res = fit(X, Y, method=name, lam=lam, **kw)
        arrays = ("coef", "gamma", "precision", "objective", "selected", "intercept")
        return res._replace(**{key: np.asarray(getattr(res, key)) for key in arrays})
    return run_baseline(name, X, Y, lam, **kw)


def score_fit(name: str, problem: NardProblem, lam: float, **kw) -> dict[str, float]:
    """Fits ``name`` on ``problem`` (``kw`` as in :func:`fit_any`) and scores it on the truth."""
    start = time.perf_counter()
    res = fit_any(name, problem.X, problem.Y, lam, **kw)
    wall = time.perf_counter() - start  # includes compilation on the first call of a shape
    tpr, fpr = support_rates(res.selected, problem.support)
    if res.precision is None:
        frob, edge = np.nan, np.nan
    else:
        frob, edge = network_errors(res.precision, problem.precision)
    return {
        "tpr": tpr,
        "fpr": fpr,
        "omega_rel_error": frob,
        "edge_error": edge,
        "coef_rmse": float(np.sqrt(np.mean((res.coef - problem.coef) ** 2))),
        "seconds": res.seconds,
        "n_iter": res.n_iter,
        "seconds_per_iter": res.seconds_per_iter,
        "converged": float(res.converged),
        "stats_seconds": res.stats_seconds,
        "wall_seconds": wall,
    }


def standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres and scales the rows of ``train`` and ``test`` with ``train``'s mean and standard
    deviation (rows that are constant in ``train`` are only centred)."""
    mu, sd = train.mean(1, keepdims=True), train.std(1, keepdims=True)
    sd = np.where(sd > 0, sd, 1.0)
    return (train - mu) / sd, (test - mu) / sd


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
        errs.append(np.mean((y_te - res.predict(x_te)) ** 2))
        converged.append(res.converged)
    return HeldOut(float(np.mean(errs)), float(np.mean(converged)))
