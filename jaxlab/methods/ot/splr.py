"""SPLR: the sparse-plus-low-rank quasi-Newton iteration for the entropic-OT dual.

Wang & Qiu (ICML 2025), Algorithm 1. From ``x_k = (α, β̃)`` with gradient ``g_k``:

1. ``H_Ω``: the Hessian (Eq. 4) with exact diagonals and the top-``ρ_k`` entries of ``T̃`` (plus row
   and column 0) off the diagonal (Section 3.1, :mod:`sparse_hessian`; for CG stored as
   fixed-capacity triplets, :mod:`gathered_hessian`);
2. ``B₀ = H_Ω + τ_k I`` with ``τ_k = min(‖g_k‖, τ_max)`` (Section 3.1);
3. ``B_k`` = BFGS update of ``B₀`` by ``s = x_k - x_{k-1}``, ``y = g_k - g_{k-1}`` when
   ``yᵀs > 10⁻⁶ yᵀy`` (Section 3.2), and ``d_k = -B_k⁻¹ g_k`` (:mod:`linsolve`);
4. ``x_{k+1} = x_k + t_k d_k`` with ``t_k`` from the strong-Wolfe search of Moré & Thuente started
   at ``min(1, 1.5 t_{k-1})`` (:mod:`line_search`);
5. ``ρ_{k+1}`` = 0.9 ρ_k if ``‖g‖`` decreased else 2 ρ_k, clipped to ``[ρ_min, ρ_max]``.

Stop when ``‖g_k‖₂ < tol``. With ``low_rank=False`` this is the paper's ablation "sparse Newton"
(steps 1, 2, 4, 5 only). The start point, as in the authors' code, is ``α = 0`` and the exact
``β`` for it (one Sinkhorn half-step), moved to the gauge ``β_m = 0``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp

from jaxlab.methods.ot.dual import dual_value_grad, join
from jaxlab.methods.ot.gathered_hessian import default_capacity
from jaxlab.methods.ot.line_search import more_thuente
from jaxlab.methods.ot.linsolve import (
    LinearSolver,
    build_hessian,
    default_linear_solver,
    inverse_bfgs_direction,
    solve_shifted,
)
from jaxlab.methods.ot.sparse_hessian import next_density

__all__ = ["RawSolution", "initial_point", "splr"]


class RawSolution(NamedTuple):
    """What every solver in this package returns before :func:`jaxlab.methods.ot.solve` wraps it.

    Attributes:
      x: final ``(α, β̃)`` with ``β_m = 0``.
      errors: ``‖g‖₂`` after 0, 1, ... iterations, ``nan`` past ``n_iters``.
      densities: ``ρ`` used at each iteration (``nan`` where not applicable).
      n_iters: iterations run.
      converged: ``‖g‖₂ < tol`` reached.
      n_evals: objective/gradient evaluations (line-search trials included).
    """

    x: jnp.ndarray
    errors: jnp.ndarray
    densities: jnp.ndarray
    n_iters: jnp.ndarray
    converged: jnp.ndarray
    n_evals: jnp.ndarray


def initial_point(cost, a, b, epsilon):
    """``α = 0`` and ``β = η log b - η LSE_i(-M_ij/η)`` (exact column marginals), gauged."""
    alpha = jnp.zeros(cost.shape[0], cost.dtype)
    beta = epsilon * (jnp.log(b) - logsumexp(-cost / epsilon, axis=0))
    return join(alpha, beta)


class _State(NamedTuple):
    x: jnp.ndarray
    x_prev: jnp.ndarray
    f: jnp.ndarray
    g: jnp.ndarray
    g_prev: jnp.ndarray
    T: jnp.ndarray
    step: jnp.ndarray
    density: jnp.ndarray
    k: jnp.ndarray
    errors: jnp.ndarray
    densities: jnp.ndarray
    n_evals: jnp.ndarray


def splr(
    cost,
    a,
    b,
    epsilon,
    *,
    tol: float = 1e-8,
    max_iter: int = 500,
    density_max: float = 0.01,
    density_min: float | None = None,
    density_init: float | None = None,
    shift_max: float = 1e-3,
    low_rank: bool = True,
    linear_solver: LinearSolver | None = None,
    cg_tol: float = 1e-8,
    step_max: float = 1e10,
) -> RawSolution:
    """Runs SPLR (Algorithm 1) on the dual of the entropic OT problem ``(M, a, b, η)``.

    Args:
      cost: cost matrix ``M`` (n × m).
      a, b: positive marginals with equal mass.
      epsilon: regularisation ``η``.
      tol: stop at ``‖g‖₂ < tol``.
      max_iter: iteration budget.
      density_max: ``ρ_max``; ``ρ_min`` defaults to ``ρ_max / 100`` and ``ρ₀`` is ``ρ_max / 10``
        (the authors' defaults).
      density_min: ``ρ_min``.
      density_init: ``ρ₀`` (default ``ρ_max / 10``).
      shift_max: ``τ_max`` in ``τ = min(‖g‖, τ_max)``.
      low_rank: apply the rank-2 correction (False gives the sparse-Newton ablation).
      linear_solver: how to solve with ``H_Ω + τI``; default by size (:mod:`linsolve`).
      cg_tol: relative residual of the CG solves (the authors' 10⁻⁸).
      step_max: largest line-search step.
    """
    n, m = cost.shape
    size = n + m - 1
    solver = linear_solver or default_linear_solver(size, density_max)
    density_min = density_max / 100.0 if density_min is None else density_min
    capacity = default_capacity(n, m, density_max)

    def fun(x):
        f, g, T = dual_value_grad(x, cost, a, b, epsilon)
        return f, g, T

    x0 = initial_point(cost, a, b, epsilon)
    f0, g0, T0 = fun(x0)
    dtype = f0.dtype
    errors = jnp.full(max_iter + 1, jnp.nan, dtype).at[0].set(jnp.linalg.norm(g0))
    init = _State(
        x=x0,
        x_prev=x0,
        f=f0,
        g=g0,
        g_prev=g0,
        T=T0,
        step=jnp.ones((), dtype),
        density=jnp.asarray(0.1 * density_max if density_init is None else density_init, dtype),
        k=jnp.zeros((), jnp.int32),
        errors=errors,
        densities=jnp.full(max_iter, jnp.nan, dtype),
        n_evals=jnp.ones((), jnp.int32),
    )

    def cond(st):
        gnorm = st.errors[st.k]
        return (gnorm >= tol) & jnp.isfinite(st.f) & (st.k < max_iter)

    def body(st):
        gnorm = st.errors[st.k]
        # The diagonals T1 and T̃ᵀ1 are the gradient plus the marginals (Eq. 4).
        sums = (st.g[:n] + a, st.g[n:] + b[:-1])
        H = build_hessian(st.T, epsilon, st.density, solver, capacity, sums)
        tau = jnp.minimum(gnorm, shift_max)
        s, y = st.x - st.x_prev, st.g - st.g_prev
        use_low_rank = low_rank & (st.k > 0) & (y @ s > 1e-6 * (y @ y))
        d = inverse_bfgs_direction(
            lambda r: solve_shifted(H, tau, r, solver, cg_tol=cg_tol), st.g, s, y, use_low_rank
        )
        # A failed inner solve could give an ascent direction: fall back to steepest descent.
        d = jnp.where((st.g @ d < 0) & jnp.all(jnp.isfinite(d)), d, -st.g)
        ls = more_thuente(
            fun, st.x, d, st.f, st.g, st.T, jnp.minimum(1.0, 1.5 * st.step), step_max=step_max
        )
        x_new = st.x + ls.step * d
        gnorm_new = jnp.linalg.norm(ls.grad)
        return _State(
            x=x_new,
            x_prev=st.x,
            f=ls.value,
            g=ls.grad,
            g_prev=st.g,
            T=ls.aux,
            step=jnp.where(ls.step > 0, ls.step, st.step),
            density=next_density(st.density, gnorm_new < gnorm, density_min, density_max),
            k=st.k + 1,
            errors=st.errors.at[st.k + 1].set(gnorm_new),
            densities=st.densities.at[st.k].set(st.density),
            n_evals=st.n_evals + ls.n_evals,
        )

    st = lax.while_loop(cond, body, init)
    return RawSolution(st.x, st.errors, st.densities, st.k, st.errors[st.k] < tol, st.n_evals)
