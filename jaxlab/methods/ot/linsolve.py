"""Linear solves with ``H_Ω + τI`` and the rank-2 BFGS correction applied in inverse form.

Wang & Qiu (ICML 2025), Section 3.2: the SPLR matrix is ``B = B₀ - B₀ssᵀB₀/(sᵀB₀s) + yyᵀ/(yᵀs)``
with ``B₀ = H_Ω + τI`` (the BFGS update of ``B₀`` by the last pair ``s = x_k - x_{k-1}``,
``y = g_k - g_{k-1}``), and the search direction is ``d = -B⁻¹g``. The paper applies
Sherman–Morrison–Woodbury, which needs ``B₀⁻¹g`` and ``B₀⁻¹y`` (two solves with one operator). We
use the algebraically identical inverse-BFGS form

    B⁻¹ = (I - ρ s yᵀ) B₀⁻¹ (I - ρ y sᵀ) + ρ s sᵀ,      ρ = 1 / (yᵀs),

which needs a single solve with ``B₀`` per iteration; ``tests/methods/ot`` checks it against the
Woodbury form and the secant condition ``B⁻¹y = s``.

``B₀`` is solved either by a dense Cholesky factorisation (small problems) or by preconditioned
conjugate gradients on the Schur complement of the ``α`` block (Section 3.3):
``Δ = diag(h2) + τI - Sᵀ diag(h1 + τ)⁻¹ S`` is symmetric positive definite, costs one product
with ``S`` and one with ``Sᵀ`` per CG step, and is preconditioned by its diagonal.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float

from jaxlab.methods.ot.gathered_hessian import GatheredHessian, sparsify_gathered
from jaxlab.methods.ot.sparse_hessian import SparseHessian, sparsify

__all__ = [
    "LinearSolver",
    "build_hessian",
    "default_linear_solver",
    "inverse_bfgs_direction",
    "solve_shifted",
]

# Above this many unknowns the O(k³) factorisation costs more than CG on the Schur complement.
CHOLESKY_MAX_SIZE = 128
# Above this ρ_max the gathered triplets cost more than the masked dense block.
SPARSE_MAX_DENSITY = 0.1


class LinearSolver(enum.Enum):
    """How ``(H_Ω + τI) z = r`` is solved.

    ``CHOLESKY``: dense factorisation of ``H_Ω + τI``. ``CG``: PCG on the Schur complement with
    ``H_Ω`` as a masked dense block (:class:`SparseHessian`). ``SPARSE_CG``: the same PCG with
    ``H_Ω`` as fixed-capacity triplets (:class:`GatheredHessian`, ``O(|Ω|)`` per CG step).
    """

    CHOLESKY = "cholesky"
    CG = "cg"
    SPARSE_CG = "sparse_cg"


def default_linear_solver(size: int, density_max: float = 1.0) -> LinearSolver:
    """Cholesky up to :data:`CHOLESKY_MAX_SIZE` unknowns; beyond, gathered CG for sparse ``Ω``."""
    if size <= CHOLESKY_MAX_SIZE:
        return LinearSolver.CHOLESKY
    return LinearSolver.SPARSE_CG if density_max <= SPARSE_MAX_DENSITY else LinearSolver.CG


class _CGState(NamedTuple):
    z: Array
    r: Array
    p: Array
    rz: Array
    it: Array


def _schur_cg(H: SparseHessian | GatheredHessian, tau, rhs, tol: float, max_iter: int):
    """Solves ``(H_Ω + τI) z = rhs`` by PCG on the Schur complement of the ``α`` block.

    Works on either storage of ``H_Ω``: it only uses ``S v``, ``Sᵀ v`` and ``Σ_i S_ij² w_i``.
    """
    n = H.h1.shape[0]
    r1, r2 = rhs[:n], rhs[n:]
    d1 = H.h1 + tau
    d2 = H.h2 + tau

    def schur(v):
        return d2 * v - H.apply_St(H.apply_S(v) / d1)

    precond = 1.0 / jnp.maximum(d2 - H.col_sq_sum(1.0 / d1), tau)
    b = r2 - H.apply_St(r1 / d1)
    bnorm = jnp.linalg.norm(b)
    z0 = jnp.zeros_like(b)
    p0 = precond * b
    init = _CGState(z0, b, p0, b @ p0, jnp.zeros((), jnp.int32))

    def cond(st):
        return (jnp.linalg.norm(st.r) > tol * bnorm) & (st.it < max_iter)

    def body(st):
        Ap = schur(st.p)
        step = st.rz / (st.p @ Ap)
        z = st.z + step * st.p
        r = st.r - step * Ap
        zr = precond * r
        rz = r @ zr
        p = zr + (rz / st.rz) * st.p
        return _CGState(z, r, p, rz, st.it + 1)

    z2 = lax.while_loop(cond, body, init).z
    z1 = (r1 - H.apply_S(z2)) / d1
    return jnp.concatenate([z1, z2])


def solve_shifted(
    H: SparseHessian | GatheredHessian,
    tau,
    rhs: Float[Array, " k"],
    solver: LinearSolver,
    *,
    cg_tol: float = 1e-10,
    cg_max_iter: int = 1000,
) -> Float[Array, " k"]:
    """Solves ``(H_Ω + τI) z = rhs`` with the chosen :class:`LinearSolver`.

    ``CG`` and ``SPARSE_CG`` run the same PCG; which storage of ``H_Ω`` it sees is the caller's
    choice (:func:`build_hessian`).
    """
    if solver is LinearSolver.CHOLESKY:
        L = jnp.linalg.cholesky(H.dense(tau))
        return jax.scipy.linalg.cho_solve((L, True), rhs)
    return _schur_cg(H, tau, rhs, cg_tol, cg_max_iter)


def build_hessian(
    T, epsilon, density, solver: LinearSolver, capacity: int, sums=None
) -> SparseHessian | GatheredHessian:
    """``H_Ω`` of top-``density`` entries in the storage ``solver`` works on (Section 3.1).

    ``sums``: optional ``(T 1, T̃ᵀ 1)``, reused by the gathered form.
    """
    if solver is LinearSolver.SPARSE_CG:
        return sparsify_gathered(T, epsilon, density, capacity, sums=sums)
    return sparsify(T, epsilon, density)


def inverse_bfgs_direction(
    solve,
    g: Float[Array, " k"],
    s: Float[Array, " k"],
    y: Float[Array, " k"],
    use_low_rank,
) -> Float[Array, " k"]:
    """``d = -B⁻¹g`` with ``B`` the BFGS update of ``B₀`` by ``(s, y)`` (Section 3.2).

    Args:
      solve: ``r ↦ B₀⁻¹ r``.
      g: gradient.
      s, y: last step and gradient change.
      use_low_rank: traced bool; when false ``d = -B₀⁻¹g`` (first iteration, or ``yᵀs`` too small).
    """
    ys = y @ s
    rho = jnp.where(use_low_rank, 1.0 / jnp.where(ys == 0, 1.0, ys), 0.0)
    sg = s @ g
    w = solve(g - rho * sg * y)
    return -(w - rho * (y @ w) * s + rho * sg * s)
