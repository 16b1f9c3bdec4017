"""The SPLR search direction: which storage of ``H_Ω``, which solver, and the rank-2 correction.

Wang & Qiu (ICML 2025), Section 3.2: the SPLR matrix is ``B = B₀ - B₀ssᵀB₀/(sᵀB₀s) + yyᵀ/(yᵀs)``
with ``B₀ = H_Ω + τI`` (the BFGS update of ``B₀`` by the last pair ``s = x_k - x_{k-1}``,
``y = g_k - g_{k-1}``), and the search direction is ``d = -B⁻¹g``. The paper applies
Sherman–Morrison–Woodbury, which needs ``B₀⁻¹g`` and ``B₀⁻¹y`` (two solves with one operator). We
use the algebraically identical inverse-BFGS form

    B⁻¹ = (I - ρ s yᵀ) B₀⁻¹ (I - ρ y sᵀ) + ρ s sᵀ,      ρ = 1 / (yᵀs),

which needs a single solve with ``B₀`` per iteration; ``tests/methods/qn_ot/test_direction.py``
checks it against the Woodbury form and the secant condition ``B⁻¹y = s``. ``B₀`` itself is solved
by :func:`jaxlab.ot.linsolve.solve_shifted` (Cholesky for small problems, PCG on the Schur
complement otherwise, Section 3.3) on ``H_Ω`` stored as a masked dense block
(:mod:`.sparse_hessian`) or as triplets (:mod:`.gathered_hessian`).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.methods.qn_ot.gathered_hessian import gathered_levels
from jaxlab.methods.qn_ot.sparse_hessian import (
    SAMPLE_CAP,
    quantile_sample,
    sparsify,
    threshold_search,
)
from jaxlab.ot.linsolve import LinearSolver

__all__ = [
    "build_hessian",
    "default_linear_solver",
    "density_threshold",
    "inverse_bfgs_direction",
    "rank2_gate",
]

# Above this many unknowns the O(k³) factorisation costs more than CG on the Schur complement.
CHOLESKY_MAX_SIZE = 128
# Above this ρ_max the gathered triplets cost more than the masked dense block.
SPARSE_MAX_DENSITY = 0.1


def default_linear_solver(size: int, density_max: float = 1.0) -> LinearSolver:
    """Cholesky up to :data:`CHOLESKY_MAX_SIZE` unknowns; beyond, gathered CG for sparse ``Ω``."""
    if size <= CHOLESKY_MAX_SIZE:
        return LinearSolver.CHOLESKY
    return LinearSolver.SPARSE_CG if density_max <= SPARSE_MAX_DENSITY else LinearSolver.CG


def density_threshold(T, density, guess=None):
    """The threshold of SPLR's top-``density`` entries of ``T̃ = T[:, :-1]`` (Section 3.1) and the
    counting passes it took: ``T̃ ≥`` it holds the ``⌊ρ n(m-1)⌋`` largest entries.

    Up to :data:`~jaxlab.methods.qn_ot.sparse_hessian.SAMPLE_CAP` entries the search runs on all
    of ``T̃``, read in place from ``T`` by each pass (``columns``); beyond, on the fixed random
    sample of :func:`~jaxlab.methods.qn_ot.sparse_hessian.quantile_sample`. It returns the
    separating value of :func:`~jaxlab.methods.qn_ot.sparse_hessian.threshold_search` with
    ``exact=False``, not the k-th largest itself: the same mask, one pass fewer. ``guess``:
    ``log`` of a nearby threshold (the previous iteration's), where the search starts.
    """
    n, m = T.shape
    if n * (m - 1) <= SAMPLE_CAP:
        return threshold_search(T, density, guess=guess, exact=False, columns=m - 1)
    sample = quantile_sample(T[:, :-1].reshape(-1))
    return threshold_search(sample, density, guess=guess, exact=False)


def build_hessian(
    T, epsilon, density, solver: LinearSolver, levels: tuple[int, ...], sums=None, guess=None
):
    """``H_Ω`` of the top-``density`` entries in the storage ``solver`` works on (Section 3.1),
    and the threshold it kept the entries at or above (NaN for the masked block).

    For ``SPARSE_CG``, triplets whose products use the smallest of the capacity ``levels`` that
    holds ``Ω`` (:func:`~jaxlab.methods.qn_ot.gathered_hessian.gathered_levels`); ``sums``:
    optional ``(T 1, T̃ᵀ 1)``, reused there; ``guess``: ``log`` of a nearby threshold (the
    previous iteration's) to start the threshold's search from
    (:func:`density_threshold`).
    """
    if solver is LinearSolver.SPARSE_CG:
        threshold, _ = density_threshold(T, density, guess)
        return gathered_levels(T, epsilon, threshold, levels, sums=sums), threshold
    return sparsify(T, epsilon, density), jnp.asarray(jnp.nan, T.dtype)


def rank2_gate(k, s: Float[Array, " k"], y: Float[Array, " k"]):
    """Whether iteration ``k`` applies the rank-2 correction: not at the first iteration (no pair
    yet) and only with enough curvature, ``yᵀs > 10⁻⁶ yᵀy`` (the authors' ``sinkhorn_splr.cpp``:
    ``low_rank = (i > 0) && (ys > eps * yy)``, ``eps = 1e-6``), which keeps ``ρ = 1/(yᵀs)`` finite
    and ``B`` positive definite (Section 3.2). Traceable; a boolean scalar."""
    return (k > 0) & (y @ s > 1e-6 * (y @ y))


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
