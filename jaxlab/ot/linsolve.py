"""Linear solves with a shifted, arrow-structured dual Hessian ``(H + τI) z = r``.

The Hessian of the entropic-OT dual (Wang & Qiu, ICML 2025, Eq. 4) and every sparsification of it
that keeps its diagonal blocks exact (SPLR's ``H_Ω``, Section 3.1; SSNS's thresholded Hessian)
has the block form ``[[diag(h1), S], [Sᵀ, diag(h2)]]``. Such a matrix is solved either by a
dense Cholesky factorisation (small problems) or by preconditioned conjugate gradients on the
Schur complement of the ``α`` block (Section 3.3):

    Δ = diag(h2) + τI - Sᵀ diag(h1 + τ)⁻¹ S

is symmetric positive definite, costs one product with ``S`` and one with ``Sᵀ`` per CG step, and
is preconditioned by its diagonal. The CG loop runs on :func:`jaxlab.core.iterate.iterate` with
the residual norm as its trace. Anything with the attributes of :class:`ArrowHessian` works:
a masked dense block, or triplets that make a CG step cost ``O(|Ω|)``.
"""

from __future__ import annotations

import enum
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float

from jaxlab.core.iterate import iterate

__all__ = ["ArrowHessian", "LinearSolver", "schur_cg", "solve_shifted"]


class LinearSolver(enum.StrEnum):
    """How ``(H + τI) z = r`` is solved.

    ``CHOLESKY``: dense factorisation of ``H + τI``. ``CG``: PCG on the Schur complement with
    ``S`` held as a masked dense block. ``SPARSE_CG``: the same PCG, for ``S`` held as triplets
    (``O(|Ω|)`` per CG step); which storage to build is the caller's choice.
    """

    CHOLESKY = "cholesky"
    CG = "cg"
    SPARSE_CG = "sparse_cg"


class ArrowHessian(Protocol):
    """``H = [[diag(h1), S], [Sᵀ, diag(h2)]]`` as the solvers here use it."""

    h1: Float[Array, " n"]
    h2: Float[Array, " m1"]

    def apply_S(self, v2: Float[Array, " m1"]) -> Float[Array, " n"]: ...

    def apply_St(self, v1: Float[Array, " n"]) -> Float[Array, " m1"]: ...

    def col_sq_sum(self, w: Float[Array, " n"]) -> Float[Array, " m1"]: ...

    def dense(self, shift=0.0) -> Float[Array, "k k"]: ...


class _CGState(NamedTuple):
    z: Array
    r: Array
    p: Array
    rz: Array


def schur_cg(H: ArrowHessian, tau, rhs: Float[Array, " k"], tol: float, max_iter: int):
    """Solves ``(H + τI) z = rhs`` by PCG on the Schur complement of the ``α`` block.

    Uses only ``S v``, ``Sᵀ v`` and ``Σ_i S_ij² w_i``. Stops when the residual of the Schur system
    is at most ``tol`` times its right-hand side's norm, or after ``max_iter`` steps. Returns the
    solution and the number of CG steps taken.
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
    p0 = precond * b

    def step(k, st: _CGState) -> tuple[_CGState, Array]:
        Ap = schur(st.p)
        step = st.rz / (st.p @ Ap)
        z = st.z + step * st.p
        r = st.r - step * Ap
        zr = precond * r
        # rᵀz and rᵀr in one matrix-vector product (one kernel instead of two reductions), at
        # full precision: a default-precision float32 product runs in bfloat16 / TF32 on TPU / GPU.
        rz, rr = jnp.matmul(jnp.stack([zr, r]), r, precision=lax.Precision.HIGHEST)
        p = zr + (rz / st.rz) * st.p
        return _CGState(z, r, p, rz), jnp.sqrt(rr)

    it = iterate(
        step,
        _CGState(jnp.zeros_like(b), b, p0, b @ p0),
        bnorm,
        max_iter=max_iter,
        stop=lambda previous, residual: residual <= tol * bnorm,
    )
    z2 = it.state.z
    z1 = (r1 - H.apply_S(z2)) / d1
    return jnp.concatenate([z1, z2]), it.n_iter


def solve_shifted(
    H: ArrowHessian,
    tau,
    rhs: Float[Array, " k"],
    solver: LinearSolver,
    *,
    cg_tol: float = 1e-10,
    cg_max_iter: int = 1000,
) -> Float[Array, " k"]:
    """Solves ``(H + τI) z = rhs`` with the chosen :class:`LinearSolver`.

    ``CG`` and ``SPARSE_CG`` run the same PCG; which storage of ``S`` it sees is the caller's
    choice.
    """
    if LinearSolver(solver) is LinearSolver.CHOLESKY:
        L = jnp.linalg.cholesky(H.dense(tau))
        return jax.scipy.linalg.cho_solve((L, True), rhs)
    return schur_cg(H, tau, rhs, cg_tol, cg_max_iter)[0]
