"""The established methods NARD is compared with (scikit-learn, float64 numpy).

* ``ard``: per-output ARD (scikit-learn ``ARDRegression``, one fit per output, no shared α, run to
  its own tolerance ``ard_tol`` on the change of the coefficients, at most ``ard_iter`` iterations
  each). A feature is selected when, for any output, it passes NARD's rule (see ``_ard``);
  scikit-learn's own pruning (``λ > 1e4``) keeps almost every feature here. No output network.
* ``mtlasso``: ``MultiTaskLassoCV`` (a group lasso over the outputs, λ by 3-fold CV). Selected: the
  features with a non-zero row. No output network.
* ``two_stage``: an MRCE-like two-stage estimator (Rothman et al., 2010, without the joint
  iterations): ``LassoCV`` per output (3-fold), then the graphical lasso (scikit-learn) on the
  residual covariance with the same λ as NARD. Selected: union of the per-output supports.

Every baseline returns the family's :class:`~jaxlab.methods.nard.output.NARDResult` (no ``gamma``
and no objective trace; ``stats_seconds`` NaN) with the wall time, its own iteration count (ARD's
evidence iterations summed over outputs; for the lasso methods the coordinate-descent sweeps of the
final refits, the cross-validation path being counted in ``seconds`` only) and whether it
converged: ARD when every output stopped on its tolerance before ``ard_iter``; the lasso methods
when no fit of the cross-validation path, the refits or the graphical lasso warned that it did not
(scikit-learn's ``ConvergenceWarning``), with coordinate descent allowed ``lasso_iter`` sweeps.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from sklearn.covariance import graphical_lasso
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ARDRegression, LassoCV, MultiTaskLassoCV
from threadpoolctl import threadpool_limits

from jaxlab.methods.nard.output import NARDResult

__all__ = ["BASELINES", "run_baseline"]

BASELINES = ("ard", "mtlasso", "two_stage")


def _ard(X, Y, max_iter, tol):
    coef, keep, iters, converged = [], [], 0, True
    norms = np.sum(X * X, axis=1)
    for y in Y:
        model = ARDRegression(fit_intercept=False, max_iter=max_iter, tol=tol).fit(X.T, y)
        coef.append(model.coef_)
        iters += int(model.n_iter_)
        # scikit-learn breaks out of its loop on convergence; a fit that used every iteration
        # is counted as not converged (even if its last one happened to pass the test).
        converged &= int(model.n_iter_) < max_iter
        # NARD's selection rule (prior variance ≥ 10x the single-feature LS variance): with
        # weight precision λ_i and noise precision β this is β‖x_i‖²/λ_i ≥ 10.
        keep.append(model.alpha_ * norms / model.lambda_ >= 10.0)
    return np.array(coef), np.any(keep, axis=0), None, iters, converged


def _mtlasso(X, Y, max_iter):
    model = MultiTaskLassoCV(cv=3, fit_intercept=False, alphas=20, max_iter=max_iter)
    model.fit(X.T, Y.T)
    return model.coef_, np.any(model.coef_ != 0, axis=0), None, int(model.n_iter_), True


def _two_stage(X, Y, lam, max_iter):
    coef, iters = [], 0
    for y in Y:
        model = LassoCV(cv=3, fit_intercept=False, alphas=20, max_iter=max_iter).fit(X.T, y)
        coef.append(model.coef_)
        iters += int(model.n_iter_)
    coef = np.array(coef)
    r = Y - coef @ X
    _, prec, gl_iter = graphical_lasso(r @ r.T / r.shape[1], lam, return_n_iter=True)
    return coef, np.any(coef != 0, axis=0), prec, iters + int(gl_iter), True


def run_baseline(
    name: str,
    X: np.ndarray,
    Y: np.ndarray,
    lam: float,
    *,
    ard_iter: int = 1000,
    ard_tol: float = 1e-3,
    lasso_iter: int = 10000,
) -> NARDResult:
    """Fits baseline ``name`` (one of :data:`BASELINES`) on X (d×N), Y (m×N) and times it.

    Args:
      name: the baseline.
      X: inputs (d×N).
      Y: outputs (m×N).
      lam: the graphical-lasso penalty of ``two_stage``.
      ard_iter: ARDRegression's iteration cap per output.
      ard_tol: ARDRegression's tolerance on ``Σ_i |Δw_i|`` between iterations (scikit-learn's
        default).
      lasso_iter: the coordinate-descent cap of every lasso fit.
    """
    X, Y = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    start = time.perf_counter()
    # One BLAS thread: on a shared 2-core machine OpenBLAS's spinning threads made ARDRegression
    # far slower than single-threaded.
    with (
        warnings.catch_warnings(record=True) as caught,
        threadpool_limits(limits=1, user_api="blas"),
    ):
        warnings.simplefilter("always", ConvergenceWarning)
        if name == "ard":
            out = _ard(X, Y, ard_iter, ard_tol)
        elif name == "mtlasso":
            out = _mtlasso(X, Y, lasso_iter)
        elif name == "two_stage":
            out = _two_stage(X, Y, lam, lasso_iter)
        else:
            raise ValueError(f"unknown baseline {name!r}; use one of {BASELINES}")
    seconds = time.perf_counter() - start
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    coef, selected, precision, n_iter, converged = out
    return NARDResult(
        coef=coef,
        gamma=None,
        precision=precision,
        objective=None,
        n_iter=max(int(n_iter), 1),
        converged=bool(converged) and not warned,
        selected=selected,
        seconds=seconds,
        stats_seconds=float("nan"),
    )
