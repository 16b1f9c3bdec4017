"""``solve``: one entry point for SPLR and its baselines, with input checks and timing.

``solve(a, b, cost, epsilon=η, method=...)`` takes a cost matrix or an ott-jax ``Geometry``, checks
the marginals (finite, positive, equal mass) when they are concrete, runs the chosen solver (all of
them jit-compiled ``lax.while_loop`` programs sharing the stopping rule ``‖g‖₂ < tol`` of Wang &
Qiu, ICML 2025, Section 5) and returns an :class:`OTOutput` with the plan, the potentials in the
gauge ``β_m = 0``, the ``‖g‖₂`` trace and the wall-clock seconds of the compiled run. Called under
``jax.jit`` it skips the checks (the values are not known) and reports ``seconds = nan``.
"""

from __future__ import annotations

import enum
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core.errors import ConfigError
from jaxlab.methods.ot.dual import plan, split
from jaxlab.methods.ot.lbfgs import lbfgs
from jaxlab.methods.ot.linsolve import LinearSolver
from jaxlab.methods.ot.sinkhorn import sinkhorn
from jaxlab.methods.ot.splr import RawSolution, splr
from jaxlab.methods.ot.ssns import ssns

__all__ = ["Method", "OTOutput", "solve"]


class Method(enum.Enum):
    """Solvers of the entropic-OT dual; ``SPLR`` is the default."""

    SPLR = "splr"
    SINKHORN = "sinkhorn"
    LBFGS = "lbfgs"
    NEWTON = "newton"
    SPARSE_NEWTON = "sparse_newton"
    SSNS = "ssns"


DEFAULT_MAX_ITER = {
    Method.SPLR: 1_000,
    Method.SINKHORN: 20_000,
    Method.LBFGS: 10_000,
    Method.NEWTON: 500,
    Method.SPARSE_NEWTON: 2_000,
    Method.SSNS: 2_000,
}


class OTOutput(NamedTuple):
    """Result of :func:`solve`.

    Attributes:
      matrix: the plan ``T = exp((α ⊕ β - M)/η)`` (n × m).
      potentials: ``(α, β)`` with ``β_m = 0``.
      errors: ``‖g‖₂`` (marginal residual) after 0, 1, ... iterations; ``nan`` past ``n_iters``.
      n_iters: iterations run.
      seconds: wall-clock seconds of the compiled solve (``nan`` when traced under ``jax.jit``).
      densities: ``ρ`` of the sparsified Hessian per iteration (``nan`` for dense / first-order).
      converged: ``‖g‖₂ < tol`` reached.
      hit_max_iter: stopped by the ``max_iter`` budget without converging.
      n_evals: objective/gradient evaluations, line-search trials included.
    """

    matrix: Float[Array, "n m"]
    potentials: tuple[Float[Array, " n"], Float[Array, " m"]]
    errors: Float[Array, " iters"]
    n_iters: Int[Array, ""]
    seconds: Any
    densities: Float[Array, " iters"]
    converged: Bool[Array, ""]
    hit_max_iter: Bool[Array, ""]
    n_evals: Int[Array, ""]

    @property
    def error(self):
        """Final ``‖g‖₂``."""
        return self.errors[self.n_iters]


def _run(method: Method, cost, a, b, epsilon, tol, max_iter, options) -> RawSolution:
    """Dispatches to the solver of ``method`` (the one place that maps names to solvers)."""
    kw = dict(options)
    if method is Method.SPLR:
        return splr(cost, a, b, epsilon, tol=tol, max_iter=max_iter, **kw)
    if method is Method.SPARSE_NEWTON:
        return splr(cost, a, b, epsilon, tol=tol, max_iter=max_iter, low_rank=False, **kw)
    if method is Method.NEWTON:
        # Full mask and no shift: H_Ω = H, so this is Newton's method with a Wolfe search.
        dense = dict(density_max=1.0, density_min=1.0, density_init=1.0, shift_max=0.0)
        dense.update(low_rank=False, linear_solver=LinearSolver.CHOLESKY)
        return splr(cost, a, b, epsilon, tol=tol, max_iter=max_iter, **{**dense, **kw})
    if method is Method.SINKHORN:
        return sinkhorn(cost, a, b, epsilon, tol=tol, max_iter=max_iter, **kw)
    if method is Method.LBFGS:
        return lbfgs(cost, a, b, epsilon, tol=tol, max_iter=max_iter, **kw)
    return ssns(cost, a, b, epsilon, tol=tol, max_iter=max_iter, **kw)


def _is_traced(*xs) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def _check_inputs(a, b, cost, epsilon) -> None:
    """Raises :class:`ConfigError` for marginals/costs the dual cannot handle."""
    a, b, cost = np.asarray(a), np.asarray(b), np.asarray(cost)
    if cost.ndim != 2 or min(cost.shape) < 2:
        raise ConfigError(f"cost must be an (n, m) matrix with n, m >= 2, got shape {cost.shape}")
    if a.shape != (cost.shape[0],) or b.shape != (cost.shape[1],):
        raise ConfigError(
            f"marginals of shapes {a.shape}, {b.shape} do not fit a cost of shape {cost.shape}"
        )
    for name, x in (("a", a), ("b", b), ("cost", cost)):
        if not np.all(np.isfinite(x)):
            raise ConfigError(f"{name} contains NaN or inf; pass finite values")
    for name, x in (("a", a), ("b", b)):
        if np.any(x < 0):
            raise ConfigError(f"marginal {name} has negative entries; pass non-negative weights")
        if np.any(x == 0):
            raise ConfigError(
                f"marginal {name} has zero entries; drop zero-mass points or add a small constant"
            )
    if abs(a.sum() - b.sum()) > 1e-6 * max(a.sum(), b.sum()):
        raise ConfigError(f"marginals have different mass ({a.sum():.6g} vs {b.sum():.6g})")
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise ConfigError(f"epsilon must be a positive number, got {epsilon}")


def _unpack_cost(cost, epsilon):
    try:
        from ott.geometry.geometry import Geometry
    except ImportError:  # ott-jax is a dependency, but keep the matrix path independent of it
        Geometry = ()  # noqa: N806
    if isinstance(cost, Geometry):
        return cost.cost_matrix, cost.epsilon if epsilon is None else epsilon
    if epsilon is None:
        raise ConfigError("epsilon is required when cost is a matrix (pass epsilon=...)")
    return cost, epsilon


def solve(
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    cost: Any,
    *,
    epsilon: float | None = None,
    method: str | Method = Method.SPLR,
    tol: float = 1e-8,
    max_iter: int | None = None,
    **options: Any,
) -> OTOutput:
    """Solves entropic OT ``min <T, M> - η h(T)`` s.t. ``T1 = a, Tᵀ1 = b`` through its dual.

    Args:
      a, b: marginals (positive, equal mass).
      cost: cost matrix ``M`` (n × m) or an ott-jax ``Geometry`` (its ``epsilon`` is used when
        ``epsilon`` is None).
      epsilon: regularisation ``η``.
      method: one of ``"splr"``, ``"sinkhorn"``, ``"lbfgs"``, ``"newton"``, ``"sparse_newton"``,
        ``"ssns"``.
      tol: stop at ``‖g‖₂ < tol`` (the marginal error).
      max_iter: iteration budget (default depends on the method).
      **options: solver-specific settings, e.g. ``density_max``, ``shift_max`` for SPLR.

    Returns:
      :class:`OTOutput`; ``converged`` is False and ``hit_max_iter`` True when the budget ran out.
    """
    try:
        method = Method(method)
    except ValueError:
        names = ", ".join(m.value for m in Method)
        raise ConfigError(f"unknown OT method {method!r}; choose one of {names}") from None
    max_iter = DEFAULT_MAX_ITER[method] if max_iter is None else max_iter
    if not (isinstance(max_iter, int | np.integer) and max_iter >= 1):
        raise ConfigError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not tol > 0:
        raise ConfigError(f"tol must be positive, got {tol}")
    cost, epsilon = _unpack_cost(cost, epsilon)
    traced = _is_traced(a, b, cost, epsilon)
    if not traced:
        _check_inputs(a, b, cost, epsilon)
    dtype = jnp.result_type(float)
    a, b, cost = (jnp.asarray(x, dtype) for x in (a, b, cost))
    opts = tuple(sorted(options.items()))
    args = (cost, a, b, jnp.asarray(epsilon, dtype))
    if traced:
        raw, seconds = _run(method, *args, tol, int(max_iter), opts), jnp.nan
    else:
        compiled = _compiled(method, tol, int(max_iter), opts, *args)
        start = time.perf_counter()
        raw = jax.block_until_ready(compiled(*args))
        seconds = time.perf_counter() - start
    alpha, beta = split(raw.x, cost.shape[0])
    return OTOutput(
        matrix=plan(alpha, beta, cost, args[3]),
        potentials=(alpha, beta),
        errors=raw.errors,
        n_iters=raw.n_iters,
        seconds=seconds,
        densities=raw.densities,
        converged=raw.converged,
        hit_max_iter=~raw.converged & (raw.n_iters >= max_iter),
        n_evals=raw.n_evals,
    )


_CACHE: dict[Any, Any] = {}


def _compiled(method, tol, max_iter, opts, *args):
    """AOT-compiles the solver once per (settings, shapes) so ``seconds`` excludes compilation."""
    key = (method, tol, max_iter, opts, jax.config.jax_enable_x64) + tuple(
        (x.shape, x.dtype) for x in args
    )
    if key not in _CACHE:

        def run(cost, a, b, epsilon):
            return _run(method, cost, a, b, epsilon, tol, max_iter, opts)

        _CACHE[key] = jax.jit(run).lower(*args).compile()
    return _CACHE[key]
