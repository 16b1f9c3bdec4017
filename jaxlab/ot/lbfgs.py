"""L-BFGS on the entropic-OT dual (baseline of Wang & Qiu, ICML 2025, Section 5).

The limited-memory BFGS direction ``d = -H_k g`` comes from the two-loop recursion (Nocedal &
Wright, *Numerical Optimization*, Algorithm 7.4) over the last ``memory`` pairs
``(s_i, y_i)``, with initial matrix ``γ I``, ``γ = sᵀy / yᵀy`` of the newest pair (their Eq. 7.20).
The step comes from the same strong-Wolfe search as SPLR (:mod:`line_search`); pairs with
``yᵀs ≤ 10⁻¹⁰ yᵀy`` are skipped so ``H_k`` stays positive definite. Same start point and the same
stopping rule ``‖g‖₂ < tol`` as SPLR, run by :func:`jaxlab.core.iterate.iterate`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from jaxlab.core.iterate import below, iterate
from jaxlab.ot.dual import dual_value_grad, initial_point, join
from jaxlab.ot.line_search import more_thuente
from jaxlab.ot.output import RawSolution, raw_solution
from jaxlab.ot.problem import check_solver_call

__all__ = ["lbfgs"]


class _State(NamedTuple):
    x: jnp.ndarray
    f: jnp.ndarray
    g: jnp.ndarray
    T: jnp.ndarray
    S: jnp.ndarray  # (memory, k) ring buffer of steps
    Y: jnp.ndarray  # (memory, k) ring buffer of gradient changes
    count: jnp.ndarray  # pairs stored so far
    n_evals: jnp.ndarray


def _two_loop(g, S, Y, count, memory: int):
    """``H_k g`` by the two-loop recursion (Nocedal & Wright, Algorithm 7.4)."""
    used = jnp.minimum(count, memory)
    rho = 1.0 / jnp.where(jnp.sum(S * Y, axis=1) == 0, 1.0, jnp.sum(S * Y, axis=1))

    def newest_first(i, carry):
        q, coef = carry
        j = (count - 1 - i) % memory
        c = jnp.where(i < used, rho[j] * (S[j] @ q), 0.0)
        return q - c * Y[j], coef.at[j].set(c)

    q, coef = lax.fori_loop(0, memory, newest_first, (g, jnp.zeros(memory, g.dtype)))
    last = (count - 1) % memory
    yy = Y[last] @ Y[last]
    gamma = jnp.where(count > 0, (S[last] @ Y[last]) / jnp.where(yy == 0, 1.0, yy), 1.0)

    def oldest_first(i, r):
        j = (count - used + i) % memory
        c = jnp.where(i < used, coef[j] - rho[j] * (Y[j] @ r), 0.0)
        return r + c * S[j]

    return lax.fori_loop(0, memory, oldest_first, gamma * q)


def lbfgs(
    cost,
    a,
    b,
    epsilon,
    *,
    tol: float | None = None,
    max_iter: int = 5_000,
    memory: int = 10,
    init: tuple[jnp.ndarray, jnp.ndarray] | None = None,
) -> RawSolution:
    """Runs L-BFGS with a strong-Wolfe line search on the dual until ``‖g‖₂ < tol``.

    Args:
      cost: cost matrix ``M`` (n × m).
      a, b: positive marginals with equal mass.
      epsilon: regularisation ``η``.
      tol: stop at ``‖g‖₂ < tol``; None: the default of the inputs' dtype
        (:data:`~jaxlab.ot.problem.DEFAULT_TOL`).
      max_iter: iteration budget.
      memory: number of stored ``(s, y)`` pairs.
      init: initial potentials ``(α₀, β₀)`` (warm start); None starts from
        :func:`~jaxlab.ot.dual.initial_point`.

    Raises:
      ConfigError: on concrete bad input (:func:`~jaxlab.ot.problem.check_solver_call`).
    """
    tol = check_solver_call(a, b, cost, epsilon, init, tol=tol, max_iter=max_iter)

    def fun(x):
        return dual_value_grad(x, cost, a, b, epsilon)

    x0 = initial_point(cost, a, b, epsilon) if init is None else join(*init)
    f0, g0, T0 = fun(x0)
    size, dtype = x0.shape[0], f0.dtype
    zeros = jnp.zeros((memory, size), dtype)
    zero = jnp.zeros((), jnp.int32)
    init_state = _State(x0, f0, g0, T0, zeros, zeros, zero, zero + 1)

    def step(k, st: _State) -> tuple[_State, jnp.ndarray]:
        d = -_two_loop(st.g, st.S, st.Y, st.count, memory)
        d = jnp.where(st.g @ d < 0, d, -st.g)
        # The first step has no curvature information: scale it to unit length.
        step0 = jnp.where(st.count > 0, 1.0, jnp.minimum(1.0, 1.0 / jnp.linalg.norm(st.g)))
        ls = more_thuente(fun, st.x, d, st.f, st.g, st.T, step0)
        s, y = ls.step * d, ls.grad - st.g
        keep = (y @ s) > 1e-10 * (y @ y)
        slot = st.count % memory
        S = jnp.where(keep, st.S.at[slot].set(s), st.S)
        Y = jnp.where(keep, st.Y.at[slot].set(y), st.Y)
        new = _State(
            st.x + s, ls.value, ls.grad, ls.aux, S, Y, st.count + keep, st.n_evals + ls.n_evals
        )
        return new, jnp.linalg.norm(ls.grad)

    it = iterate(step, init_state, jnp.linalg.norm(g0), max_iter=max_iter, stop=below(tol))
    return raw_solution(it, it.state.x, it.state.n_evals)
