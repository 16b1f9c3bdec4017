"""SPLR: the sparse-plus-low-rank quasi-Newton iteration for the entropic-OT dual.

Wang & Qiu (ICML 2025), Algorithm 1. From ``x_k = (α, β̃)`` with gradient ``g_k``:

1. ``H_Ω``: the Hessian (Eq. 4) with exact diagonals and the top-``ρ_k`` entries of ``T̃`` (plus row
   and column 0) off the diagonal (Section 3.1, :mod:`sparse_hessian`; for CG stored as
   fixed-capacity triplets, :mod:`gathered_hessian`);
2. ``B₀ = H_Ω + τ_k I`` with ``τ_k = min(‖g_k‖, τ_max)`` (Section 3.1);
3. ``B_k`` = BFGS update of ``B₀`` by ``s = x_k - x_{k-1}``, ``y = g_k - g_{k-1}`` when
   ``yᵀs > 10⁻⁶ yᵀy`` (Section 3.2), and ``d_k = -B_k⁻¹ g_k`` (:mod:`linsolve`);
4. ``x_{k+1} = x_k + t_k d_k`` with ``t_k`` from the strong-Wolfe search of Moré & Thuente started
   at ``min(1, 1.5 t_{k-1})`` (:mod:`line_search`); a trial's plan is the plan at ``x_k``
   rescaled by ``exp(t d / η)`` along rows and columns (Eq. 3,
   :func:`~jaxlab.ot.dual.dual_value_grad_rescaled`) while the exponents have moved by at most
   :data:`RESCALE_MAX_DRIFT` in all since the plan last came from the cost, else from the cost;
5. ``ρ_{k+1}`` = 0.9 ρ_k if ``‖g‖`` decreased else 2 ρ_k, clipped to ``[ρ_min, ρ_max]``
   (``density_rule="paper"``, the default; ``"regot"`` is the rule of the authors' C++ code since
   June 2025, regot 0.0.3: 1.1 ρ_k after a rise of ``‖g‖`` below its initial value, else 0.99 ρ_k).

Stop when ``‖g_k‖₂ < tol``. With ``low_rank=False`` this is the paper's ablation "sparse Newton"
(steps 1, 2, 4, 5 only). The start point, as in the authors' code, is ``α = 0`` and the exact
``β`` for it (one Sinkhorn half-step), moved to the gauge ``β_m = 0``
(:func:`jaxlab.ot.dual.initial_point`), or given potentials (warm start). The loop is
:func:`jaxlab.core.iterate.iterate` on ``‖g_k‖₂``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxlab.core.errors import ConfigError
from jaxlab.core.iterate import below, iterate
from jaxlab.methods.qn_ot.direction import (
    build_hessian,
    default_linear_solver,
    inverse_bfgs_direction,
    rank2_gate,
)
from jaxlab.methods.qn_ot.gathered_hessian import capacity_levels, default_capacity, on_level
from jaxlab.methods.qn_ot.sparse_hessian import next_density, next_density_regot
from jaxlab.ot.dual import dual_value_grad, dual_value_grad_rescaled, initial_point, join
from jaxlab.ot.line_search import more_thuente
from jaxlab.ot.linsolve import LinearSolver, solve_shifted
from jaxlab.ot.output import RawSolution, raw_solution

__all__ = ["splr"]


class _State(NamedTuple):
    x: jnp.ndarray
    x_prev: jnp.ndarray
    f: jnp.ndarray
    g: jnp.ndarray
    g_prev: jnp.ndarray
    gnorm: jnp.ndarray  # ‖g‖₂, also the driver's trace entry
    T: jnp.ndarray
    step: jnp.ndarray
    density: jnp.ndarray
    densities: jnp.ndarray
    n_evals: jnp.ndarray
    log_threshold: jnp.ndarray  # log of the last top-ρ threshold, the next search's start
    drift: jnp.ndarray  # Σ|t d / η| of the rescalings since T was last computed from the cost


# The plan at a line-search trial is the plan at x rescaled (ot.dual.dual_value_grad_rescaled)
# while the exponents moved by at most this much in all since the plan was last computed from the
# cost; None: half the exponent range of the dtype, -log(tiny) / 2 (354 in float64, 44 in float32),
# so that an entry that had underflowed (or lost digits below tiny) is still below √tiny (1e-154,
# 1e-19), nothing next to the marginals. Each rescaling adds a few ulps of rounding, and the
# exponents' own rounding adds at most drift · eps.
RESCALE_MAX_DRIFT: float | None = None


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
    linear_solver: LinearSolver | str | None = None,
    cg_tol: float = 1e-8,
    step_max: float = 1e10,
    init: tuple[jnp.ndarray, jnp.ndarray] | None = None,
    density_rule: str = "paper",
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
      linear_solver: how to solve with ``H_Ω + τI``; default by size (:mod:`.direction`).
      cg_tol: relative residual of the CG solves (the authors' 10⁻⁸).
      step_max: largest line-search step.
      init: initial potentials ``(α₀, β₀)`` (warm start); None starts from
        :func:`~jaxlab.ot.dual.initial_point`.
      density_rule: ``"paper"`` (Algorithm 1: ×0.9 / ×2) or ``"regot"`` (regot 0.0.3: ×0.99 /
        ×1.1 after a bad move), step 5 above.
    """
    if density_rule not in ("paper", "regot"):
        raise ConfigError(f"density_rule={density_rule!r}: choose 'paper' or 'regot'")
    n, m = cost.shape
    size = n + m - 1
    solver = default_linear_solver(size, density_max) if linear_solver is None else linear_solver
    solver = LinearSolver(solver)
    density_min = density_max / 100.0 if density_min is None else density_min
    levels = capacity_levels(default_capacity(n, m, density_max))

    def fun(x):
        f, g, T = dual_value_grad(x, cost, a, b, epsilon)
        return f, g, T

    x0 = initial_point(cost, a, b, epsilon) if init is None else join(*init)
    f0, g0, T0 = fun(x0)
    dtype = f0.dtype
    gnorm0 = jnp.linalg.norm(g0)
    init_state = _State(
        x=x0,
        x_prev=x0,
        f=f0,
        g=g0,
        g_prev=g0,
        gnorm=gnorm0,
        T=T0,
        step=jnp.ones((), dtype),
        density=jnp.asarray(0.1 * density_max if density_init is None else density_init, dtype),
        densities=jnp.full(max_iter, jnp.nan, dtype),
        n_evals=jnp.ones((), jnp.int32),
        log_threshold=jnp.full((), jnp.nan, dtype),
        drift=jnp.zeros((), dtype),
    )

    max_drift = (
        -0.5 * float(np.log(np.finfo(dtype).tiny))
        if RESCALE_MAX_DRIFT is None
        else RESCALE_MAX_DRIFT
    )

    def step(k, st: _State) -> tuple[_State, jnp.ndarray]:
        # The diagonals T1 and T̃ᵀ1 are the gradient plus the marginals (Eq. 4).
        sums = (st.g[:n] + a, st.g[n:] + b[:-1])
        H, threshold = build_hessian(
            st.T, epsilon, st.density, solver, levels, sums, guess=st.log_threshold
        )
        tau = jnp.minimum(st.gnorm, shift_max)
        s, y = st.x - st.x_prev, st.g - st.g_prev
        use_low_rank = low_rank & rank2_gate(k, s, y)
        # One solve per iteration, on the smallest triplet level that holds Ω.
        d = on_level(
            H,
            lambda Hl, g: inverse_bfgs_direction(
                lambda r: solve_shifted(Hl, tau, r, solver, cg_tol=cg_tol), g, s, y, use_low_rank
            ),
            st.g,
        )
        # A failed inner solve could give an ascent direction: fall back to steepest descent.
        d = jnp.where((st.g @ d < 0) & jnp.all(jnp.isfinite(d)), d, -st.g)
        # A trial's plan: the current one rescaled while the exponents have moved little since
        # the cost last entered (a multiplication pass instead of an exp pass), else from the
        # cost. aux = (plan, its drift).
        rate = (jnp.max(jnp.abs(d[:n])) + jnp.max(jnp.abs(d[n:]))) * (1.0 / epsilon)

        def along(t):
            drift = st.drift + jnp.abs(t) * rate

            def rescaled():
                f, g, T = dual_value_grad_rescaled(st.x, d, t, st.T, a, b, epsilon)
                return f, g, (T, drift)

            def exact():
                f, g, T = fun(st.x + t * d)
                return f, g, (T, jnp.zeros_like(drift))

            return lax.cond(drift <= max_drift, rescaled, exact)

        ls = more_thuente(
            fun,
            st.x,
            d,
            st.f,
            st.g,
            (st.T, st.drift),
            jnp.minimum(1.0, 1.5 * st.step),
            step_max=step_max,
            along=along,
        )
        T_new, drift_new = ls.aux
        gnorm_new = jnp.linalg.norm(ls.grad)
        new = _State(
            x=st.x + ls.step * d,
            x_prev=st.x,
            f=ls.value,
            g=ls.grad,
            g_prev=st.g,
            gnorm=gnorm_new,
            T=T_new,
            step=jnp.where(ls.step > 0, ls.step, st.step),
            density=(
                next_density(st.density, gnorm_new < st.gnorm, density_min, density_max)
                if density_rule == "paper"
                else next_density_regot(
                    st.density,
                    (st.gnorm < gnorm0) & (gnorm_new > st.gnorm),
                    density_min,
                    density_max,
                )
            ),
            densities=st.densities.at[k].set(st.density),
            n_evals=st.n_evals + ls.n_evals,
            log_threshold=jnp.log(threshold),
            drift=drift_new,
        )
        return new, gnorm_new

    it = iterate(step, init_state, gnorm0, max_iter=max_iter, stop=below(tol))
    return raw_solution(it, it.state.x, it.state.n_evals, it.state.densities)
