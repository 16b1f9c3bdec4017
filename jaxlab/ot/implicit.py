"""Implicit differentiation of a dual solution: gradients through any solver, none through its loop.

A solver returns ``x* = (α*, β̃*)`` (gauge ``β_m = 0``) at which the gradient of the dual (Wang &
Qiu, ICML 2025, Eq. 3) vanishes,

    F(x*, θ) = ∇ₓ f(x*; θ) = (T 1 - a, T̃ᵀ 1 - b̃) = 0,      θ = (M, a, b, η)          (Eq. 4)

and ``F`` is smooth with ``∂ₓF = ∇²ₓ f = H``, the dual Hessian of Eq. 4, positive definite once the
gauge is fixed. By the implicit-function theorem the solution moves with the problem as

    ẋ = -H⁻¹ ∂_θ F(x*, θ) θ̇,

the linear system at the solution that ott-jax's ``ImplicitDiff`` solves for its Sinkhorn potentials
(Cuturi et al., 2020; Blondel et al., 2022), here in the gauged variables, where ``H`` is
nonsingular, so no ridge is needed. :func:`implicit_solution` attaches this tangent to any
solver's :class:`~jaxlab.ot.output.RawSolution` as a ``jax.custom_jvp``, so forward and reverse
mode (``jax.jvp``, ``jax.grad``, ``jax.jacrev``) work and no derivative flows through the solver's
iterations (whose ``while_loop`` JAX cannot reverse). ``∂_θ F θ̇`` is a JVP of Eq. 4; the system
is solved by :func:`jax.lax.custom_linear_solve` (symmetric, so its transpose is itself) with a
Cholesky factorisation of ``H`` up to :data:`DENSE_MAX_SIZE` unknowns and conjugate gradients on
its Schur complement beyond (:mod:`.linsolve`, as SPLR's own solves, Section 3.3). The gradient
in ``a, b`` is defined along directions that keep ``Σa = Σb`` (the only feasible ones): ``b_m``
does not enter ``F``, so its derivative is 0 by convention.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

from jaxlab.ot.dual import dual_value_grad, plan, split
from jaxlab.ot.linsolve import LinearSolver, solve_shifted
from jaxlab.ot.output import RawSolution

__all__ = ["DENSE_MAX_SIZE", "PlanHessian", "implicit_solution", "solution_tangent"]

# Up to this many unknowns (n + m - 1) the Hessian is factorised densely (k² numbers, k³/3 flops);
# beyond, CG on the Schur complement needs only products with the plan.
DENSE_MAX_SIZE = 2048


class PlanHessian(NamedTuple):
    """The dual Hessian at a plan ``T`` (Eq. 4) in the arrow form :mod:`.linsolve` solves.

    ``H = [[diag(h1), S], [Sᵀ, diag(h2)]]`` with ``h1 = T 1 / η``, ``h2 = T̃ᵀ 1 / η``, ``S = T̃ / η``.
    """

    h1: Float[Array, " n"]
    h2: Float[Array, " m1"]
    S: Float[Array, "n m1"]

    @classmethod
    def at(cls, T: Float[Array, "n m"], epsilon) -> PlanHessian:
        T_t = T[:, :-1]
        return cls(T.sum(axis=1) / epsilon, T_t.sum(axis=0) / epsilon, T_t / epsilon)

    def apply_S(self, v2):
        return self.S @ v2

    def apply_St(self, v1):
        return self.S.T @ v1

    def col_sq_sum(self, w):
        return w @ self.S**2

    def dense(self, shift=0.0):
        top = jnp.concatenate([jnp.diag(self.h1 + shift), self.S], axis=1)
        bottom = jnp.concatenate([self.S.T, jnp.diag(self.h2 + shift)], axis=1)
        return jnp.concatenate([top, bottom], axis=0)

    def matvec(self, v: Float[Array, " k"]) -> Float[Array, " k"]:
        n = self.h1.shape[0]
        v1, v2 = v[:n], v[n:]
        return jnp.concatenate([self.h1 * v1 + self.S @ v2, self.S.T @ v1 + self.h2 * v2])


def _cg_tol(dtype) -> float:
    # Relative residual of the Schur CG: far below the solution's own accuracy in either dtype.
    return 1e-10 if jnp.dtype(dtype) == jnp.float64 else 1e-5


@jax.jit
def solution_tangent(
    x: Float[Array, " k"], cost, a, b, epsilon, d_cost, d_a, d_b, d_epsilon
) -> Float[Array, " k"]:
    """``ẋ = -H⁻¹ ∂_θF θ̇`` at the solution ``x`` of the problem ``θ = (cost, a, b, ε)``.

    Linear in the tangents ``θ̇ = (d_cost, d_a, d_b, d_epsilon)`` (and transposable: reverse mode
    transposes it). One program: traced once per shape and dtype.
    """

    def optimality(cost, a, b, epsilon):  # F(x, θ) with x held at the solution (Eq. 4)
        return dual_value_grad(x, cost, a, b, epsilon)[1]

    _, rhs = jax.jvp(optimality, (cost, a, b, epsilon), (d_cost, d_a, d_b, d_epsilon))
    H = PlanHessian.at(plan(*split(x, cost.shape[0]), cost, epsilon), epsilon)
    size = x.shape[0]
    solver = LinearSolver.CHOLESKY if size <= DENSE_MAX_SIZE else LinearSolver.CG
    tol = _cg_tol(x.dtype)

    def solve(_, r):
        return solve_shifted(H, 0.0, r, solver, cg_tol=tol, cg_max_iter=size)

    return -lax.custom_linear_solve(H.matvec, rhs, solve, symmetric=True)


def _zero_tangent(v: Any) -> Any:
    v = jnp.asarray(v)
    if jnp.issubdtype(v.dtype, jnp.inexact):
        return jnp.zeros_like(v)
    return np.zeros(v.shape, jax.dtypes.float0)  # integer and boolean outputs have no tangent


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def implicit_solution(
    solver: Callable[..., RawSolution], cost, a, b, epsilon, init=None
) -> RawSolution:
    """``solver(cost, a, b, epsilon, init)``, differentiable in ``cost, a, b, epsilon``.

    Args:
      solver: any dual solver ``(cost, a, b, ε, init) -> RawSolution`` (the loop may be a
        compiled program when its inputs are concrete, as under an eager ``jax.grad``).
      cost, a, b, epsilon: the problem, all arrays of one float dtype.
      init: warm-start potentials or None; the solution does not depend on them (tangent 0).

    Returns:
      The solver's :class:`RawSolution`; ``x`` carries the implicit tangent (module docstring),
      every other field a zero tangent.
    """
    return solver(cost, a, b, epsilon, init)


@implicit_solution.defjvp
def _implicit_solution_jvp(solver, primals, tangents):
    cost, a, b, epsilon, init = primals
    d_cost, d_a, d_b, d_epsilon, _ = tangents
    raw = solver(cost, a, b, epsilon, init)
    dx = solution_tangent(raw.x, cost, a, b, epsilon, d_cost, d_a, d_b, d_epsilon)
    return raw, jax.tree.map(_zero_tangent, raw)._replace(x=dx)
