"""``fit``: the user-facing entry point of Network ARD, with input checks, timing and selection.

``fit(X, Y, method=...)`` validates the data and options (user mistakes raise
:class:`~jaxlab.core.errors.ConfigError` with a one-line fix), then
:func:`~jaxlab.methods.nard.solve.run_solver` computes the method's statistics and runs its solver,
both compiled once per (method, options, shapes) and timed without compilation: ``seconds`` is the
total time to convergence including the statistics (the d×d Gram matrix for the exact methods),
``seconds_per_iter`` is that total over the iterations. Arrays follow the paper: X is d×N, Y is
m×N (columns are samples). Nothing is centred here: centre Y and X before calling (the model has no
intercept), as the experiments do. ``lam="cv"`` picks λ by K-fold cross-validation
(:mod:`~jaxlab.methods.nard.cv`).

Scale. Every solver runs on the features divided by their root mean square, ``x_i / rms(x_i)``,
and the result is mapped back (``coef_i / rms_i``, ``γ_i / rms_i²``). ARD is equivariant under a
rescaling of a feature (the prior variance of ``w_i`` absorbs it), so this changes nothing but
rounding for ``nard`` and ``sequential``; the surrogate methods are not: their Lipschitz bound
``ρ ≥ λ_max(XXᵀ)`` is isotropic, so one feature 5 times larger than the others (or a constant row
at 5) raised ρ until every other feature was pruned, and they stopped at once with an empty
support marked converged. On unit-RMS rows they recover the same support as ``nard``.
"""

from __future__ import annotations

import difflib
import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxlab.core.errors import ConfigError
from jaxlab.methods.nard.cv import check_lam, select_lam
from jaxlab.methods.nard.output import NARDResult
from jaxlab.methods.nard.solve import METHODS, Method, run_solver

__all__ = ["METHODS", "Method", "fit", "validate"]

DEFAULT_MAX_ITER = {
    "nard": 500,
    "surrogate": 1000,
    "sequential": 2000,
    "sequential_surrogate": 3000,
}


def validate(X: ArrayLike, Y: ArrayLike) -> tuple[Array, Array]:
    """Checks shapes and values of (X, Y) and returns them as JAX arrays of the default float type.

    Raises:
      ConfigError: on non-2-D input, zero features/outputs, fewer than 2 samples, mismatched sample
        counts, non-finite values, or a feature or output row that is identically zero (a zero
        feature carries no information, and its γ₀ and the surrogate bound are infinite).
    """
    X, Y = np.asarray(X), np.asarray(Y)
    if X.ndim != 2 or Y.ndim != 2:
        raise ConfigError(
            f"X and Y must be 2-D (features × samples, outputs × samples); got "
            f"X.ndim={X.ndim}, Y.ndim={Y.ndim}"
        )
    (d, n), (m, n_y) = X.shape, Y.shape
    if n != n_y:
        raise ConfigError(
            f"X has N={n} samples (columns) but Y has N={n_y}; pass X as d×N and Y "
            "as m×N with the same samples"
        )
    if d == 0 or m == 0:
        raise ConfigError(f"need at least one feature and one output, got d={d}, m={m}")
    if n < 2:
        raise ConfigError(f"need at least 2 samples, got N={n}")
    for name, a in (("X", X), ("Y", Y)):
        if not np.all(np.isfinite(a)):
            raise ConfigError(f"{name} contains NaN or inf; drop or impute those samples first")
    for name, a, what in (("X", X, "feature"), ("Y", Y, "output")):
        zero = np.flatnonzero(np.sum(a.astype(np.float64) ** 2, axis=1) == 0)
        if zero.size:
            rows = ", ".join(map(str, zero[:10])) + (", ..." if zero.size > 10 else "")
            raise ConfigError(
                f"{what} rows {rows} of {name} are identically zero ({zero.size} of "
                f"{a.shape[0]}); remove them"
            )
    dtype = jnp.result_type(float)  # float64 under jax_enable_x64, else float32
    return jnp.asarray(X, dtype), jnp.asarray(Y, dtype)


def fit(
    X: Float[ArrayLike, "d N"],
    Y: Float[ArrayLike, "m N"],
    *,
    method: str = "nard",
    lam: float | str = 0.1,
    max_iter: int | None = None,
    tol: float = 1e-6,
    alpha_update: str = "mackay",
    max_active: int | None = None,
    threshold: float = 10.0,
    lams: tuple[float, ...] | None = None,
    cv_folds: int = 5,
    seed: int = 0,
) -> NARDResult:
    """Fits Network ARD: sparse W (through α) and a sparse output network Ω.

    Args:
      X: inputs, d×N (centred, unit-variance features recommended).
      Y: outputs, m×N (centred).
      method: ``"nard"``, ``"sequential"``, ``"surrogate"`` or ``"sequential_surrogate"``.
      lam: graphical-lasso penalty λ ≥ 0 on Ω's off-diagonal (scikit-learn's ``alpha``), or
        ``"cv"`` to choose it from ``lams`` by ``cv_folds``-fold held-out log-likelihood.
      max_iter: iteration cap (default per method: 500, 2000, 1000, 3000 in the order above).
      tol: stop when the relative change of the objective is at most ``tol``.
      alpha_update: α-step of ``method="nard"``: ``"mackay"`` (fast) or ``"em"`` (monotone).
      max_active: active-set capacity of the sequential methods (default ``min(d, N, 100)``).
      threshold: selection threshold, see
        :class:`~jaxlab.methods.nard.output.NARDResult`'s ``selected``.
      lams: candidate λ values for ``lam="cv"`` (default :data:`~jaxlab.methods.nard.cv.LAMS`).
      cv_folds: number of folds for ``lam="cv"``.
      seed: seed of the fold assignment for ``lam="cv"``.

    Returns:
      A :class:`~jaxlab.methods.nard.output.NARDResult` with the features selected, the objective
      trace cut to its ``n_iter + 1`` values, and the times.

    Raises:
      ConfigError: bad data (see :func:`validate`) or options (an unknown method, λ that is not a
        finite number >= 0 or "cv", a non-positive or non-finite tol or threshold, ...).
    """
    Xj, Yj = validate(X, Y)
    if method not in METHODS:
        close = difflib.get_close_matches(str(method), METHODS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown method {method!r}: use one of {', '.join(METHODS)}{hint}")
    if alpha_update not in ("mackay", "em"):
        raise ConfigError(f"alpha_update must be 'mackay' or 'em', got {alpha_update!r}")
    if max_iter is None:
        max_iter = DEFAULT_MAX_ITER[method]
    d, n = Xj.shape
    max_active = min(d, n, 100) if max_active is None else max_active
    for name, value in (("max_iter", max_iter), ("max_active", max_active)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    for name, value in (("tol", tol), ("threshold", threshold)):
        if not _positive(value):
            raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    opts = dict(max_iter=max_iter, tol=tol, alpha_update=alpha_update, max_active=max_active)
    rms = jnp.sqrt(jnp.mean(Xj * Xj, axis=1))  # > 0: validate refuses all-zero rows
    Xs = Xj / rms[:, None]
    if isinstance(lam, str) and lam == "cv":
        lam = select_lam(Xs, Yj, method, lams=lams, folds=cv_folds, seed=seed, **opts).best
    elif isinstance(lam, str):
        raise ConfigError(f"lam must be a finite number >= 0 or 'cv', got {lam!r}")
    out = run_solver(method, Xs, Yj, check_lam(lam), **opts)
    n_iter = int(out.n_iter)
    norms = jnp.sum(Xs * Xs, axis=1)
    return out._replace(
        coef=out.coef / rms[None, :],
        gamma=out.gamma / rms**2,
        selected=out.gamma * norms >= threshold,
        objective=out.objective[: n_iter + 1],
        n_iter=n_iter,
        converged=bool(out.converged),
    )


def _positive(value: object) -> bool:
    """A finite real number > 0 (not a bool or a string)."""
    if isinstance(value, (str, bool)):
        return False
    try:
        value = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and value > 0
