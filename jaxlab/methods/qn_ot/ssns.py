"""SSNS: the safe and sparse Newton method (Tang & Qiu, NeurIPS 2024), baseline of Section 5.

Each iteration sparsifies the Hessian with ``δ_k = ν₀ ‖g_k‖`` (Tang & Qiu, Section 3, as the
authors' ``sparsify_mat3``: the entries of ``T̃`` dropped sum to at most δ per column and 2δ per
row, :func:`~.sparse_hessian.sparsify_budget`; diagonals kept exactly), shifts it by
``μ_k ‖g_k‖`` (a Levenberg–Marquardt shift), and solves ``(H_δ + μ_k ‖g_k‖ I) d = -g``. The step
``t`` is the first of ``{1, 1/2, 1/4, 1/10}`` that decreases ``f`` (else the best of them); the
trust-region ratio ``r = (f(x) - f(x + td)) / (-gᵀ(td) - ½ (td)ᵀ H_δ (td))`` decides whether to
move (``r > 0``) and how ``μ`` changes: ``×4`` when ``r < 1/4``, ``×1/2`` (floored at ``κ``) when
``r > 3/4`` (their Algorithm 1). Constants ``ν₀ = 0.01``, ``κ = 10⁻³``, ``μ₀ = 1`` follow the
authors' C++ code. Shares :mod:`.sparse_hessian` and :mod:`jaxlab.ot.linsolve` with SPLR; the loop
is :func:`jaxlab.core.iterate.iterate` on ``‖g_k‖₂``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from jaxlab.core.iterate import below, iterate
from jaxlab.methods.qn_ot.direction import default_linear_solver
from jaxlab.methods.qn_ot.sparse_hessian import sparsify_budget
from jaxlab.ot.dual import dual_value_grad, initial_point, join
from jaxlab.ot.linsolve import LinearSolver, solve_shifted
from jaxlab.ot.output import RawSolution, raw_solution

__all__ = ["ssns", "update_shift"]

STEPS = (1.0, 0.5, 0.25, 0.1)


class _State(NamedTuple):
    x: jnp.ndarray
    f: jnp.ndarray
    g: jnp.ndarray
    gnorm: jnp.ndarray  # ‖g‖₂, also the driver's trace entry
    T: jnp.ndarray
    mu: jnp.ndarray
    densities: jnp.ndarray
    n_evals: jnp.ndarray


def update_shift(ratio, mu, kappa):
    """The shift factor's trust-region update (Tang & Qiu, Algorithm 1; the authors' C++:
    ``rho_t1 = 0.25``, ``rho_t2 = 0.75``, ``mu_s1 = 4``, ``mu_s2 = 0.5``): ``μ ← 4μ`` when
    ``r < 1/4``, ``μ ← max(μ/2, κ)`` when ``r > 3/4``, unchanged otherwise (the thresholds
    themselves included). Scalars or arrays of one shape; traceable."""
    mu = jnp.where(ratio < 0.25, 4.0 * mu, mu)
    return jnp.where(ratio > 0.75, jnp.maximum(0.5 * mu, kappa), mu)


def ssns(
    cost,
    a,
    b,
    epsilon,
    *,
    tol: float = 1e-8,
    max_iter: int = 500,
    mu0: float = 1.0,
    nu0: float = 0.01,
    kappa: float = 1e-3,
    linear_solver: LinearSolver | str | None = None,
    init: tuple[jnp.ndarray, jnp.ndarray] | None = None,
) -> RawSolution:
    """Runs SSNS until ``‖g‖₂ < tol`` (arguments as in :func:`jaxlab.methods.qn_ot.splr.splr`)."""
    n, m = cost.shape
    solver = LinearSolver(linear_solver or default_linear_solver(n + m - 1))

    def fun(x):
        return dual_value_grad(x, cost, a, b, epsilon)

    x0 = initial_point(cost, a, b, epsilon) if init is None else join(*init)
    f0, g0, T0 = fun(x0)
    dtype = f0.dtype
    gnorm0 = jnp.linalg.norm(g0)
    init_state = _State(
        x0,
        f0,
        g0,
        gnorm0,
        T0,
        jnp.asarray(mu0, dtype),
        jnp.full(max_iter, jnp.nan, dtype),
        jnp.ones((), jnp.int32),
    )

    def step(k, st: _State) -> tuple[_State, jnp.ndarray]:
        H = sparsify_budget(st.T, epsilon, nu0 * st.gnorm)
        d = solve_shifted(H, st.mu * st.gnorm, -st.g, solver)
        # Step selection over the fixed candidates: stop at the first decrease, else the best.
        steps = jnp.asarray(STEPS, dtype)

        def trial_cond(c):
            return (c[0] < len(STEPS)) & ~(c[1] < st.f)

        def trial(c):
            i, best_f, best_g, best_T, best_t = c
            f, g, T = fun(st.x + steps[i] * d)
            better = jnp.isfinite(f) & (f < best_f)
            return (
                i + 1,
                jnp.where(better, f, best_f),
                jnp.where(better, g, best_g),
                jnp.where(better, T, best_T),
                jnp.where(better, steps[i], best_t),
            )

        inf = jnp.asarray(jnp.inf, dtype)
        n_tried, f_new, g_new, T_new, t = lax.while_loop(
            trial_cond, trial, (jnp.zeros((), jnp.int32), inf, st.g, st.T, steps[-1])
        )
        step = t * d
        model = -(st.g @ step) - 0.5 * (step @ H.matvec(step))
        ratio = (st.f - f_new) / model
        move = ratio > 0
        mu = update_shift(ratio, st.mu, kappa)
        g = jnp.where(move, g_new, st.g)
        gnorm = jnp.linalg.norm(g)
        n_kept = H.kept / (n * (m - 1))
        new = _State(
            jnp.where(move, st.x + step, st.x),
            jnp.where(move, f_new, st.f),
            g,
            gnorm,
            jnp.where(move, T_new, st.T),
            mu,
            st.densities.at[k].set(n_kept),
            st.n_evals + n_tried,
        )
        return new, gnorm

    it = iterate(step, init_state, gnorm0, max_iter=max_iter, stop=below(tol))
    return raw_solution(it, it.state.x, it.state.n_evals, it.state.densities)
