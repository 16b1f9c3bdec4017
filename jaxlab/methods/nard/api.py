"""``fit``: the user-facing entry point of Network ARD, with input checks, timing and selection.

``fit(X, Y, method=...)`` checks the data and options (:mod:`~jaxlab.methods.nard.checks`: user
mistakes raise :class:`~jaxlab.core.errors.ConfigError` with a one-line fix), then
:func:`~jaxlab.methods.nard.solve.fit_arrays` centres, scales, computes the method's statistics
and runs its solver. Arrays follow the paper: X is d×N, Y is m×N (columns are samples).

Intercept. The model ``Y = W X + E`` has none, so by default (``fit_intercept=True``, as
scikit-learn's linear models) X and Y are centred, the model is fitted on the centred data and
the intercept ``b = ȳ − W x̄`` is returned in ``NARDResult.intercept``. Uncentred data fitted
without it select features that merely correlate with the means (the mean acts like a shared
feature that every w_i tries to explain). ``fit_intercept=False`` fits the model as it stands, for
data that are centred by construction.

Precision. As JAX computes: in the inputs' dtype promoted to at least float32 (float64 only with
x64 enabled), and every array of the result in that dtype. ``tol`` defaults by that dtype
(:data:`~jaxlab.methods.nard.solve.DEFAULT_TOL`), and a ``tol`` below its ``eps`` is refused.

Scale. Every solver runs on the features divided by their root mean square, ``x_i / rms(x_i)``,
and the result is mapped back (``coef_i / rms_i``, ``γ_i / rms_i²``). ARD is equivariant under a
rescaling of a feature (the prior variance of ``w_i`` absorbs it), so this changes nothing but
rounding for ``nard`` and ``sequential``; the surrogate methods are not: their Lipschitz bound
``ρ ≥ λ_max(XXᵀ)`` is isotropic, so one feature 5 times larger than the others (or a constant row
at 5 without centring) raised ρ until every other feature was pruned, and they stopped at once
with an empty support marked converged. On unit-RMS rows they recover the same support as
``nard``.

Transformations. ``jax.jit(fit, static_argnames=(...))`` and ``jax.vmap`` (over datasets of one
shape, or over λ) trace the same solvers (``lax.while_loop`` inside; under ``vmap`` each member
stops on its own test). The options that choose or size the compiled program (``method``,
``fit_intercept``, ``max_iter``, ``alpha_update``, ``max_active``) must be static; ``lam``,
``tol`` and ``threshold`` may be traced. Under a transformation values cannot be inspected: the
value checks (NaN, constant outputs) are skipped (a bad value gives a non-finite objective and
``converged=False``), the trace keeps its ``max_iter + 1`` entries padded with NaN, ``n_iter`` and
``converged`` are arrays and nothing is timed (``seconds`` is None). ``lam="cv"`` cannot be traced
(it chooses λ in Python): run :func:`~jaxlab.methods.nard.cv.select_lam` outside and pass its λ.
"""

from __future__ import annotations

from jaxtyping import Array, ArrayLike, Float

from jaxlab.core.checks import not_differentiable
from jaxlab.core.errors import ConfigError
from jaxlab.methods.nard.checks import check_lam, check_options, validate
from jaxlab.methods.nard.cv import select_lam
from jaxlab.methods.nard.output import NARDResult
from jaxlab.methods.nard.solve import METHODS, Method, fit_arrays

__all__ = ["METHODS", "Method", "fit"]

# What jax.grad through fit says (its solvers are while-loops that prune features; JAX cannot
# reverse them, and the support they choose is piecewise constant in the data).
NOT_DIFFERENTIABLE = (
    "nard.fit is not differentiable in X, Y or lam (its solvers are while-loops that prune "
    "features); differentiate jaxlab.methods.nard.log_marginal_likelihood(X, Y, result.alpha, "
    "result.precision) at a fit's hyperparameters instead"
)


def fit(
    X: Float[ArrayLike, "d N"],
    Y: Float[ArrayLike, "m N"],
    *,
    method: str = "nard",
    lam: float | Float[Array, ""] | str = 0.1,
    fit_intercept: bool = True,
    max_iter: int | None = None,
    tol: float | None = None,
    alpha_update: str = "mackay",
    max_active: int | None = None,
    threshold: float = 10.0,
    lams: tuple[float, ...] | None = None,
    cv_folds: int = 5,
    seed: int = 0,
) -> NARDResult:
    """Fits Network ARD: sparse W (through α) and a sparse output network Ω.

    Args:
      X: inputs, d×N (features on very different scales are fine: see the module docstring).
      Y: outputs, m×N.
      method: ``"nard"``, ``"sequential"``, ``"surrogate"`` or ``"sequential_surrogate"``.
      lam: graphical-lasso penalty λ ≥ 0 on Ω's off-diagonal (scikit-learn's ``alpha``), or
        ``"cv"`` to choose it from ``lams`` by ``cv_folds``-fold held-out log-likelihood.
      fit_intercept: centre X and Y and return the intercept ``ȳ − W x̄`` (module docstring);
        ``False`` fits ``Y = W X + E`` on the data as given.
      max_iter: iteration cap (default per method: 500, 2000, 1000, 3000 in the order above).
      tol: stop when the relative change of the objective is at most ``tol`` (default
        :data:`~jaxlab.methods.nard.solve.DEFAULT_TOL` of the compute dtype: 1e-5 in float32,
        1e-6 in float64); it must be at least the dtype's ``eps``.
      alpha_update: α-step of ``method="nard"``: ``"mackay"`` (fast) or ``"em"`` (monotone).
      max_active: active-set capacity of the sequential methods (default ``min(d, N, 100)``).
      threshold: selection threshold, see
        :class:`~jaxlab.methods.nard.output.NARDResult`'s ``selected``.
      lams: candidate λ values for ``lam="cv"`` (default :data:`~jaxlab.methods.nard.cv.LAMS`
        times the mean output variance).
      cv_folds: number of folds for ``lam="cv"``.
      seed: seed of the fold assignment for ``lam="cv"``.

    Returns:
      A :class:`~jaxlab.methods.nard.output.NARDResult` in the compute dtype with the features
      selected, the intercept, the objective trace cut to its ``n_iter + 1`` values, and the
      times (under ``jit``/``vmap``: see the module docstring).

    Raises:
      ConfigError: bad data (see :func:`~jaxlab.methods.nard.checks.validate`) or options (an
        unknown method, λ that is not a finite number >= 0 or "cv", a tol that is not finite, not
        positive or below the dtype's eps, a traced max_iter, ...).
    """
    Xj, Yj = validate(X, Y, fit_intercept=fit_intercept)
    opts = dict(
        fit_intercept=fit_intercept,
        max_iter=max_iter,
        tol=tol,
        alpha_update=alpha_update,
        max_active=max_active,
    )
    check_options(method, Xj.dtype, threshold=threshold, **opts)
    if isinstance(lam, str) and lam == "cv":  # select_lam refuses traced arrays in one line
        lam = select_lam(Xj, Yj, method, lams=lams, folds=cv_folds, seed=seed, **opts).best
    elif isinstance(lam, str):
        raise ConfigError(f"lam must be a finite number >= 0 or 'cv', got {lam!r}")
    lam = check_lam(lam)
    Xj, Yj, lam = (not_differentiable(x, NOT_DIFFERENTIABLE) for x in (Xj, Yj, lam))
    return fit_arrays(method, Xj, Yj, lam, threshold=threshold, **opts)
