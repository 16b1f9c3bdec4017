"""Power-law fits for scaling experiments: L(C) = a·C^(−b) + c, and plain log-log slopes.

Scaling laws in the Kaplan et al. (2020) / Hoffmann et al. (2022, eq. 2, one variable at a time)
form are fitted with ``scipy.optimize.curve_fit``. Compute budgets span many decades, so the fit is
done in a well-conditioned parametrisation: with ``u = log C − mean(log C)`` the model is
``exp(α − b·u) + c``, whose parameters are all O(1) whatever the units of C; ``a`` and its
uncertainty are mapped back afterwards (``log a = α + b·mean(log C)``, delta method). Bounds keep
``b ≥ 0`` and ``c ≥ 0``. The initial guess comes from straight-line fits of ``log(L − c₀)`` for a
few candidate offsets ``c₀`` below ``min L``. Uncertainties are the square roots of the covariance
diagonal, i.e. 1σ under a locally linear model with the residual variance as noise estimate. With
two or three points an offset cannot be identified: use ``with_offset=False``, a pure power law
fitted as a straight line in log-log space.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
from jaxtyping import Float
from numpy.typing import ArrayLike

__all__ = [
    "PowerLawFit",
    "fit_loglog_slope",
    "fit_power_law",
    "format_mean_sd",
    "mean_sd",
    "predict",
]


class PowerLawFit(NamedTuple):
    """A fitted ``L(C) = a·C^(−b) + c`` with 1σ uncertainties and R² on the loss values."""

    a: float
    b: float
    c: float
    a_err: float
    b_err: float
    c_err: float
    r2: float

    def predict(self, x: ArrayLike) -> Float[np.ndarray, "..."]:
        """Evaluates the fitted law at ``x`` (see :func:`predict`)."""
        return predict(self, x)


def mean_sd(values: ArrayLike) -> dict[str, float | int | None]:
    """Mean and *sample* standard deviation (ddof = 1) of repeated measurements, e.g. over seeds.

    Returns ``{"mean", "sd", "n"}``; the sd of one value is 0 and both are None for no value (a
    quantity that was never reached, say). Claims over seeds quote this spread.
    """
    arr = np.asarray(values, np.float64).ravel()
    if arr.size == 0:
        return {"mean": None, "sd": None, "n": 0}
    sd = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return {"mean": float(arr.mean()), "sd": sd, "n": int(arr.size)}


def format_mean_sd(stat: dict, paper: float | None = None) -> str:
    """``"mean ± sd (n=N)"`` of a :func:`mean_sd` result (``"not reached"`` without a value),
    followed by ``" (paper X)"`` when ``paper`` is given."""
    if stat["mean"] is None:
        text = "not reached"
    else:
        text = f"{stat['mean']:.3f} ± {stat['sd']:.3f} (n={stat['n']})"
    return text + (f" (paper {paper})" if paper is not None else "")


def predict(fit: PowerLawFit, x: ArrayLike) -> Float[np.ndarray, "..."]:
    """Evaluates ``a·x^(−b) + c``.

    Args:
        fit: A fitted law.
        x: Positive values of the scaling variable.

    Returns:
        The predicted losses, float64, shaped like ``x``.
    """
    x = np.asarray(x, np.float64)
    return fit.a * np.exp(-fit.b * np.log(x)) + fit.c


def _as_xy(x: ArrayLike, y: ArrayLike, min_points: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y differ in length: {x.size} vs {y.size}")
    if x.size < min_points:
        raise ValueError(f"need at least {min_points} points, got {x.size}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("x and y must be finite")
    if np.any(x <= 0):
        raise ValueError("x must be positive for a power law")
    return x, y


def _line_fit(u: np.ndarray, v: np.ndarray) -> tuple[float, float, float, float, float]:
    """Least-squares line ``v ≈ slope·u + intercept``; also the 1σ errors and the SSE."""
    n, mean_u = u.size, u.mean()
    sxx = np.sum((u - mean_u) ** 2)
    if sxx == 0:
        raise ValueError("all x values are equal; a slope cannot be fitted")
    slope = float(np.sum((u - mean_u) * (v - v.mean())) / sxx)
    intercept = float(v.mean() - slope * mean_u)
    sse = float(np.sum((v - slope * u - intercept) ** 2))
    if n > 2:
        s2 = sse / (n - 2)
        slope_err = float(np.sqrt(s2 / sxx))
        intercept_err = float(np.sqrt(s2 * (1.0 / n + mean_u**2 / sxx)))
    else:  # two points fit exactly and leave no residual to estimate the noise from
        slope_err = intercept_err = float("nan")
    return slope, intercept, slope_err, intercept_err, sse


def _r2(y: np.ndarray, y_hat: np.ndarray) -> float:
    ss_tot = np.sum((y - y.mean()) ** 2)
    return float(1.0 - np.sum((y - y_hat) ** 2) / ss_tot) if ss_tot > 0 else float("nan")


def fit_loglog_slope(x: ArrayLike, y: ArrayLike) -> tuple[float, float]:
    """Fits ``log y = slope·log x + intercept`` by least squares (natural logs).

    Used for timing-vs-size plots: a slope of 2 means the cost grows quadratically.

    Args:
        x: Positive sizes.
        y: Positive measurements.

    Returns:
        ``(slope, intercept)``, so that ``y ≈ exp(intercept)·x^slope``.
    """
    x, y = _as_xy(x, y, min_points=2)
    if np.any(y <= 0):
        raise ValueError("y must be positive for a log-log fit")
    slope, intercept, *_ = _line_fit(np.log(x), np.log(y))
    return slope, intercept


def _initial_guess(u: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(α, b, c) from straight-line fits of log(y − c₀) against u for a few offsets c₀."""
    best, best_sse = None, np.inf
    y_min = y.min()
    for frac in (0.0, 0.5, 0.8, 0.9, 0.95, 0.99):
        c0 = max(frac * y_min, 0.0)
        if np.any(y - c0 <= 0):
            continue
        slope, alpha, *_ = _line_fit(u, np.log(y - c0))
        if slope >= 0:  # loss not decreasing in C: this offset explains nothing
            continue
        sse = float(np.sum((np.exp(alpha + slope * u) + c0 - y) ** 2))
        if sse < best_sse:
            best, best_sse = (alpha, -slope, c0), sse
    if best is None:  # flat or increasing data: start from a weak decay to the minimum
        spread = max(float(np.ptp(y)), 1e-3 * max(abs(y_min), 1.0))
        best = (float(np.log(spread)), 0.1, max(float(y_min), 0.0))
    return best


def fit_power_law(x: ArrayLike, loss: ArrayLike, *, with_offset: bool = True) -> PowerLawFit:
    """Fits ``loss ≈ a·x^(−b) + c`` (or ``a·x^(−b)`` without offset).

    Args:
        x: Positive values of the scaling variable (compute, parameters, tokens), at least 4
            points with the offset, at least 2 without.
        loss: The measured losses.
        with_offset: Fit the irreducible loss ``c ≥ 0``; if False, ``c = 0`` and the law is a
            straight line in log-log space (losses must then be positive).

    Returns:
        The fit with 1σ errors (``nan`` where there is no residual to estimate them from,
        ``inf`` where a parameter is not identifiable) and R² of the fitted curve on ``loss``.

    Raises:
        ValueError: Too few points, non-positive ``x`` (or ``loss`` without offset), non-finite
            values.
    """
    if not with_offset:
        x, y = _as_xy(x, loss, min_points=2)
        if np.any(y <= 0):
            raise ValueError("losses must be positive for a power law without offset")
        slope, intercept, slope_err, intercept_err, _ = _line_fit(np.log(x), np.log(y))
        a = float(np.exp(intercept))
        fit = PowerLawFit(a, -slope, 0.0, a * intercept_err, slope_err, 0.0, float("nan"))
        return fit._replace(r2=_r2(y, predict(fit, x)))

    if np.asarray(loss).size < 4:
        raise ValueError(
            f"fitting a·x^(-b) + c needs at least 4 points, got {np.asarray(loss).size}; "
            "use with_offset=False for a pure power law"
        )
    x, y = _as_xy(x, loss, min_points=4)
    log_x = np.log(x)
    shift = float(log_x.mean())
    u = log_x - shift

    def model(u, alpha, b, c):
        return np.exp(alpha - b * u) + c

    def jac(u, alpha, b, c):
        e = np.exp(alpha - b * u)
        return np.stack([e, -u * e, np.ones_like(u)], axis=-1)

    alpha0, b0, c0 = _initial_guess(u, y)
    import scipy.optimize  # deferred: start-up time of runs that fit nothing

    with warnings.catch_warnings():
        # A singular covariance comes back as inf entries, which the caller sees in the errors.
        warnings.simplefilter("ignore", scipy.optimize.OptimizeWarning)
        params, cov = scipy.optimize.curve_fit(
            model,
            u,
            y,
            p0=(alpha0, max(b0, 1e-6), c0),
            jac=jac,
            bounds=([-np.inf, 0.0, 0.0], [np.inf, np.inf, np.inf]),
            maxfev=20_000,
        )
    alpha, b, c = (float(p) for p in params)
    log_a = alpha + b * shift
    var_log_a = cov[0, 0] + shift**2 * cov[1, 1] + 2 * shift * cov[0, 1]
    a = float(np.exp(log_a))
    fit = PowerLawFit(
        a=a,
        b=b,
        c=c,
        a_err=float(a * np.sqrt(max(var_log_a, 0.0))),
        b_err=float(np.sqrt(cov[1, 1])),
        c_err=float(np.sqrt(cov[2, 2])),
        r2=float("nan"),
    )
    return fit._replace(r2=_r2(y, predict(fit, x)))
