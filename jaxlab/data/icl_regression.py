"""In-context linear regression prompts (Garg, Tsipras, Liang & Valiant, NeurIPS 2022, Sec. 2).

Each prompt draws its own task ``w ~ N(0, I_d)`` and points ``x_i ~ N(0, I_d / d)``,
``y_i = w^T x_i`` (the scaling of Kuang et al. 2025, Sec. 5.1, so that ``E[y^2] = 1`` and the
zero predictor's error is about 1). A curriculum may keep only the first ``active_dims``
coordinates of every ``x`` (the rest zero). :func:`regression_batch` is a pure function of
``(seed, index)``, so a pipeline that maps batch indices through it is deterministic and
resumable; :func:`least_squares_error` is the optimal estimator's error at the last query, the
floor (0 once there are ``d`` examples).
"""

from __future__ import annotations

import numpy as np

__all__ = ["least_squares_error", "regression_batch"]


def regression_batch(
    seed: int, index: int, batch_size: int, dim: int, n_points: int, active_dims: int | None = None
) -> dict[str, np.ndarray]:
    """``{"xs": (B, N, d), "ys": (B, N)}`` float32 for batch ``index`` of stream ``seed``."""
    rng = np.random.default_rng([seed, index])
    xs = rng.normal(size=(batch_size, n_points, dim)) / np.sqrt(dim)
    if active_dims is not None and active_dims < dim:
        xs[..., active_dims:] = 0.0
    w = rng.normal(size=(batch_size, dim))
    ys = np.einsum("bnd,bd->bn", xs, w)
    return {"xs": xs.astype(np.float32), "ys": ys.astype(np.float32)}


def least_squares_error(xs: np.ndarray, ys: np.ndarray) -> float:
    """Mean squared error at the last point of the least-squares (minimum-norm) fit to the
    points before it, over the batch."""
    errors = []
    for x, y in zip(np.float64(xs), np.float64(ys), strict=True):
        w, *_ = np.linalg.lstsq(x[:-1], y[:-1], rcond=None)
        errors.append((x[-1] @ w - y[-1]) ** 2)
    return float(np.mean(errors))
