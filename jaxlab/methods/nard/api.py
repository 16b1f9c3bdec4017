"""``fit``: the user-facing entry point of Network ARD, with input checks, timing and selection.

``fit(X, Y, method=...)`` validates the data (user mistakes raise
:class:`~jaxlab.core.errors.ConfigError` with a one-line fix), computes the sufficient statistics,
compiles the chosen solver once per (method, options, shapes) — cached, so repeated fits of the same
size do not recompile — runs it, and times the run alone so that ``seconds_per_iter`` excludes both
compilation and the one-off ``XXᵀ``. Arrays follow the paper: X is d×N, Y is m×N (columns are
samples). Nothing is centred or scaled here: centre Y and X (no intercept in the model) and scale X
to unit variance before calling, as the experiments do. ``lam="cv"`` picks λ by K-fold
cross-validation (:mod:`~jaxlab.methods.nard.cv`).
"""

from __future__ import annotations

import difflib
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxlab.core.errors import ConfigError
from jaxlab.methods.nard.model import suff_stats
from jaxlab.methods.nard.nard import solve_nard
from jaxlab.methods.nard.output import SolverOutput
from jaxlab.methods.nard.sequential import solve_sequential
from jaxlab.methods.nard.sequential_surrogate import solve_sequential_surrogate
from jaxlab.methods.nard.surrogate import solve_surrogate

__all__ = ["METHODS", "NARDResult", "fit", "run_solver", "validate"]

METHODS = ("nard", "sequential", "surrogate", "sequential_surrogate")
DEFAULT_MAX_ITER = {
    "nard": 500,
    "surrogate": 1000,
    "sequential": 2000,
    "sequential_surrogate": 3000,
}


class NARDResult(NamedTuple):
    """Result of :func:`fit`.

    Attributes:
      coef: W (m×d), the posterior mean of the coefficients (0 for pruned features).
      alpha: prior precisions α (d,); ``inf`` for pruned features.
      precision: the output precision Ω (m×m), sparse through the graphical lasso.
      selected: features with ``‖x_i‖² / α_i ≥ threshold`` (default 10): the prior variance of
        ``w_i`` is at least ``threshold`` times the variance ``1/‖x_i‖²`` of its single-feature
        least-squares estimate. For unit-variance inputs this is ``α_i ≤ N / threshold``. (Exact ARD
        maxima keep many irrelevant features at large but finite α, ~N; a fixed α cut would not.)
      objective: the ascended objective after each iteration (``n_iter + 1`` values): the penalised
        log marginal likelihood for ``nard``/``sequential``, its surrogate lower bound for the
        surrogate methods.
      n_iter: iterations run.
      seconds_per_iter: wall time of the solver loop divided by ``n_iter`` (no compilation).
      converged: whether the relative objective change fell below ``tol`` within ``max_iter``.
    """

    coef: Float[Array, "m d"]
    alpha: Float[Array, " d"]
    precision: Float[Array, "m m"]
    selected: Bool[Array, " d"]
    objective: Float[Array, " T"]
    n_iter: int
    seconds_per_iter: float
    converged: bool


def validate(X: ArrayLike, Y: ArrayLike) -> tuple[Array, Array]:
    """Checks shapes and values of (X, Y) and returns them as JAX arrays of the default float type.

    Raises:
      ConfigError: on non-2-D input, zero features/outputs, fewer than 2 samples, mismatched sample
        counts, non-finite values, or an output that is identically zero.
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
    if np.any(np.sum(Y.astype(np.float64) ** 2, axis=1) == 0):
        raise ConfigError("an output row of Y is identically zero; remove it")
    dtype = jnp.result_type(float)  # float64 under jax_enable_x64, else float32
    return jnp.asarray(X, dtype), jnp.asarray(Y, dtype)


_COMPILED: dict = {}


def run_solver(
    method: str,
    X: Array,
    Y: Array,
    lam: float,
    *,
    max_iter: int,
    tol: float,
    alpha_update: str = "mackay",
    max_active: int = 100,
) -> tuple[SolverOutput, float]:
    """Runs one solver on validated arrays; returns its output and the loop's wall time."""
    stats = jax.jit(suff_stats)(X, Y)
    lam = jnp.asarray(lam, X.dtype)
    # γ₀ = N / (d ‖x_i‖²): the prior explains about one noise variance in total. Starting with every
    # feature at unit prior variance instead lets d > N features explain Y exactly at first, and
    # the ascent then needs ~5x more iterations (d = 400, N = 200) to prune them again.
    d = X.shape[0]
    gamma0 = stats.n / (d * jnp.maximum(jnp.diagonal(stats.gram), jnp.finfo(X.dtype).tiny))
    opts = {"max_iter": max_iter, "tol": tol}
    if method == "surrogate":  # the only solver that reads X and Y themselves (O(mdN) steps)

        def solve(stats, lam, gamma0, X, Y):
            return solve_surrogate(X, Y, stats, lam, gamma0, **opts)

        args, static = (stats, lam, gamma0, X, Y), (max_iter, tol)
    elif method == "nard":

        def solve(stats, lam, gamma0):
            return solve_nard(stats, lam, gamma0, rule=alpha_update, **opts)

        args, static = (stats, lam, gamma0), (max_iter, tol, alpha_update)
    else:
        solver = solve_sequential if method == "sequential" else solve_sequential_surrogate

        def solve(stats, lam):
            return solver(stats, lam, max_active=max_active, **opts)

        args, static = (stats, lam), (max_iter, tol, max_active)
    # The statistics do not depend on N, so only the surrogate recompiles for a new sample count.
    key = (method, static, tuple((a.shape, str(a.dtype)) for a in jax.tree.leaves(args)))
    if key not in _COMPILED:
        _COMPILED[key] = jax.jit(solve).lower(*args).compile()
    jax.block_until_ready(args)
    start = time.perf_counter()
    out = jax.block_until_ready(_COMPILED[key](*args))
    return out, time.perf_counter() - start


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
      threshold: selection threshold, see :class:`NARDResult`.
      lams: candidate λ values for ``lam="cv"`` (default :data:`~jaxlab.methods.nard.cv.LAMS`).
      cv_folds: number of folds for ``lam="cv"``.
      seed: seed of the fold assignment for ``lam="cv"``.

    Returns:
      A :class:`NARDResult`.

    Raises:
      ConfigError: bad data (see :func:`validate`) or options.
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
    if max_iter < 1 or not tol > 0 or not threshold > 0:
        raise ConfigError(
            f"need max_iter >= 1, tol > 0, threshold > 0; got {max_iter}, {tol}, {threshold}"
        )
    d, n = Xj.shape
    max_active = min(d, n, 100) if max_active is None else max_active
    if max_active < 1:
        raise ConfigError(f"max_active must be >= 1, got {max_active}")
    opts = dict(max_iter=max_iter, tol=tol, alpha_update=alpha_update, max_active=max_active)
    if isinstance(lam, str):
        if lam != "cv":
            raise ConfigError(f"lam must be a number >= 0 or 'cv', got {lam!r}")
        from jaxlab.methods.nard.cv import select_lam

        lam = select_lam(Xj, Yj, method, lams=lams, folds=cv_folds, seed=seed, **opts).best
    if not float(lam) >= 0:
        raise ConfigError(f"lam must be >= 0, got {lam}")
    out, seconds = run_solver(method, Xj, Yj, float(lam), **opts)
    n_iter = int(out.n_iter)
    gamma = out.gamma
    norms = jnp.sum(Xj * Xj, axis=1)
    return NARDResult(
        coef=out.coef,
        alpha=jnp.where(gamma > 0, 1.0 / jnp.where(gamma > 0, gamma, 1.0), jnp.inf),
        precision=out.precision,
        selected=gamma * norms >= threshold,
        objective=out.objective[: n_iter + 1],
        n_iter=n_iter,
        seconds_per_iter=seconds / max(n_iter, 1),
        converged=bool(out.converged),
    )
