"""The sparsified dual Hessian ``H_Ω`` of SPLR and its density schedule.

Wang & Qiu (ICML 2025), Section 3.1: ``H_Ω`` keeps both diagonal blocks of the Hessian (Eq. 4)
exactly and, of the off-diagonal block ``T̃ / η``, only the entries in a set ``Ω``: the largest
``⌊ρ n (m-1)⌋`` entries of ``T̃`` plus its whole first row and first column (the authors' C++ code
keeps those so that every row and column of ``H_Ω`` stays coupled to the rest). Keeping the
diagonals exact makes ``H_Ω`` diagonally dominant, hence ``H_Ω + τI`` positive definite for any
``τ > 0`` and any ``Ω`` (Section 3.1, Proposition 1).

``Ω`` is stored here as a masked dense ``n × (m-1)`` block: the oracle, and the form used by the
Cholesky path, SSNS and large densities; :mod:`gathered_hessian` holds the same ``H_Ω`` as
fixed-capacity triplets, which the CG path of SPLR uses (a CG step then costs ``O(|Ω|)``).
The ``ρ``-quantile of ``T̃`` is exact when ``T̃`` has at most ``sample_cap`` entries and is
estimated from a fixed random sample beyond that (a full sort of 10⁶ entries costs more than the
rest of an iteration); the density actually kept is returned so the caller can report it.

Density schedule (Algorithm 1 and the authors' code as of February 2025): start at ``ρ_max / 10``,
multiply by 0.9 after an iteration that reduced ``‖g‖`` and by 2 after one that did not, clipped
to ``[ρ_min, ρ_max]``. The authors changed it in June 2025 (regot 0.0.3, the C++ SPLR the
benchmark runs): ×1.1 after a "bad move" (``‖g‖`` rose while already below its initial value),
×0.99 otherwise (:func:`next_density_regot`; SPLR's ``density_rule="regot"``). The default
stays Algorithm 1's.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, Int

__all__ = [
    "SparseHessian",
    "next_density",
    "next_density_regot",
    "quantile_sample",
    "sparsify",
    "sparsify_above",
    "sparsify_budget",
    "threshold_search",
    "top_threshold",
]

SAMPLE_CAP = 40_000


class SparseHessian(NamedTuple):
    """``H_Ω = [[diag(h1), S], [Sᵀ, diag(h2)]]`` with ``S = (T̃ / η) ⊙ 1_Ω``.

    Attributes:
      h1: ``T 1 / η`` (n), the exact first diagonal block.
      h2: ``T̃ᵀ 1 / η`` (m-1), the exact second diagonal block.
      S: ``(T̃ / η) ⊙ 1_Ω`` (n × (m-1)), the sparsified off-diagonal block.
      kept: how many entries the top-``ρ`` selection kept (before adding row and column 0).
    """

    h1: Float[Array, " n"]
    h2: Float[Array, " m1"]
    S: Float[Array, "n m1"]
    kept: Int[Array, ""]

    @property
    def size(self) -> int:
        return self.h1.shape[0] + self.h2.shape[0]

    def apply_S(self, v2: Float[Array, " m1"]) -> Float[Array, " n"]:
        """``S v2``."""
        return self.S @ v2

    def apply_St(self, v1: Float[Array, " n"]) -> Float[Array, " m1"]:
        """``Sᵀ v1``."""
        return self.S.T @ v1

    def col_sq_sum(self, w: Float[Array, " n"]) -> Float[Array, " m1"]:
        """``Σ_i S_ij² w_i`` (the diagonal of ``Sᵀ diag(w) S``, for the Jacobi preconditioner)."""
        return w @ self.S**2

    def matvec(self, v: Float[Array, " k"], shift=0.0) -> Float[Array, " k"]:
        """``(H_Ω + shift I) v``."""
        n = self.h1.shape[0]
        v1, v2 = v[:n], v[n:]
        top = (self.h1 + shift) * v1 + self.S @ v2
        bottom = self.S.T @ v1 + (self.h2 + shift) * v2
        return jnp.concatenate([top, bottom])

    def dense(self, shift=0.0) -> Float[Array, "k k"]:
        """The dense matrix ``H_Ω + shift I`` (for the Cholesky path and for tests)."""
        top = jnp.concatenate([jnp.diag(self.h1 + shift), self.S], axis=1)
        bottom = jnp.concatenate([self.S.T, jnp.diag(self.h2 + shift)], axis=1)
        return jnp.concatenate([top, bottom], axis=0)


def quantile_sample(flat: Float[Array, " p"], sample_cap: int = SAMPLE_CAP) -> Float[Array, " s"]:
    """All of ``flat`` when it has at most ``sample_cap`` entries, else a fixed random subset.

    The subset is drawn once per shape (numpy, seed 0) and is static under ``jit``. A strided
    sample would be biased: for a square cost whose plan concentrates near the diagonal (MNIST
    pairs), ``flat[::s]`` of the row-major ``T̃`` hits the diagonal in every row, overestimates the
    quantile and keeps a fraction of the intended ``ρ``, so SPLR needs many more iterations.
    """
    p = flat.shape[0]
    if p <= sample_cap:
        return flat
    idx = np.random.default_rng(0).choice(p, size=sample_cap, replace=False)
    return flat[np.sort(idx)]


def top_threshold(
    values: Float[Array, " p"], density, max_trips: int = 80, guess=None
) -> Float[Array, ""]:
    """The ``⌊density · p⌋``-th largest of ``values`` (``inf`` when none is kept).

    See :func:`threshold_search`, which also returns its number of counting passes.
    """
    return threshold_search(values, density, max_trips, guess)[0]


def threshold_search(
    values: Float[Array, "..."],
    density,
    max_trips: int = 80,
    guess=None,
    exact: bool = True,
    columns: int | None = None,
) -> tuple[Float[Array, ""], Int[Array, ""]]:
    """The ``⌊density · p⌋``-th largest of ``values`` (``inf`` if none) and the passes it took.

    Found by counting passes (XLA's CPU sort of 4·10⁴ numbers costs more than a whole SPLR
    iteration; one compare-and-count pass does not). A bracket ``[lo, hi]`` of ``log`` thresholds
    keeps ``#{v ≥ e^lo} ≥ k > #{v ≥ e^hi}``; the next trial interpolates the two counts linearly
    (regula falsi: ``log T̃`` is spread nearly uniformly near the top, so the count is nearly
    linear in the log threshold), kept inside the inner 62/64 of the bracket, and every fourth trial
    bisects, so the bracket at least halves every four trials. The search stops once
    ``#{v ≥ e^lo} = k``; the answer is then the smallest value ``≥ e^lo``, the exact k-th
    largest whatever trials led there. Interpolation needs about half the passes of plain
    bisection on SPLR's iterates, and the values are compared directly (no ``log`` of every entry).

    ``guess``: optional ``log`` of a nearby threshold (SPLR passes its previous iteration's). Its
    count is the first trial, and it replaces one end of the starting bracket ``[log min, log max
    + 1]``, so that end's pass is skipped and the bracket starts narrower; a non-finite guess is
    ignored. The answer does not depend on it.

    ``values`` may have any shape (``p`` = its size; the passes count over all axes).
    ``columns``: search only ``values[:, :columns]`` of a 2-D ``values`` (``T̃`` of ``T`` is
    ``columns = m - 1``), sliced inside each pass: the loop carries ``values`` as it is, where a
    sliced argument would be copied out before the loop.
    ``exact=False`` skips the last pass (the smallest value ``≥ e^lo``) and returns ``e^lo``
    itself: a threshold with exactly ``k`` of ``values`` at or above it (when the search ends
    on its count), so ``values ≥`` it is the same top-``k`` mask as with the exact k-th largest;
    SPLR's iteration uses it (on ``T̃`` of up to :data:`SAMPLE_CAP` entries the last pass costs
    about as much as the whole search, the qn_ot README has the measurement). On a sample of a
    larger ``T̃`` the two thresholds bound the same sample entries but may keep different
    unsampled ones; either estimates the ``ρ``-quantile of ``T̃``.
    """

    def view():  # called inside each loop and branch, so that the slice fuses into its pass
        return values if columns is None else values[:, :columns]

    p = values.size if columns is None else values.shape[0] * columns
    dtype = values.dtype
    k = jnp.floor(density * p).astype(jnp.int32)
    kf = k.astype(dtype)
    tiny = jnp.finfo(dtype).tiny

    # e^hi counts nothing above the maximum; log(min) counts everything through its value
    # threshold min itself (exp(log(min)) may round above min).
    def low_end():
        vmin = jnp.min(view())
        return jnp.log(jnp.maximum(vmin, tiny)), vmin, jnp.int32(p)

    def high_end():
        return jnp.log(jnp.maximum(jnp.max(view()), tiny)) + 1.0

    def cold():
        lo, t_lo, c_lo = low_end()
        return lo, high_end(), t_lo, c_lo, jnp.int32(0), jnp.int32(0)

    def warm():
        g = jnp.asarray(guess, dtype)
        t_g = jnp.exp(g)
        c_g = jnp.sum(view() >= t_g, dtype=jnp.int32)

        def below():  # the k-th largest is under e^g: bracket [log min, g]
            lo, t_lo, c_lo = low_end()
            return lo, g, t_lo, c_lo, c_g, jnp.int32(1)

        def above():  # at or over e^g: bracket [g, log max + 1]
            return g, high_end(), t_g, c_g, jnp.int32(0), jnp.int32(1)

        return lax.cond(c_g >= k, above, below)

    def cond(state):
        *_, c_lo, _, trip = state
        return (c_lo != k) & (k > 0) & (trip < max_trips)

    def body(state):
        lo, hi, t_lo, c_lo, c_hi, trip = state
        u = (c_lo.astype(dtype) - kf) / (c_lo - c_hi).astype(dtype)
        u = jnp.where(trip % 4 == 3, 0.5, jnp.clip(u, 1.0 / 64, 63.0 / 64))
        mid = lo + u * (hi - lo)
        t_mid = jnp.exp(mid)
        c_mid = jnp.sum(view() >= t_mid, dtype=jnp.int32)
        above = c_mid >= k
        return (
            jnp.where(above, mid, lo),
            jnp.where(above, hi, mid),
            jnp.where(above, t_mid, t_lo),
            jnp.where(above, c_mid, c_lo),
            jnp.where(above, c_hi, c_mid),
            trip + 1,
        )

    if guess is None:
        init = cold()
    else:
        init = lax.cond(jnp.isfinite(guess) & (k > 0), warm, cold)
    _, _, t_lo, _, _, trips = lax.while_loop(cond, body, init)
    if not exact:
        return jnp.where(k > 0, t_lo, jnp.inf), trips
    thresh = jnp.min(jnp.where(view() >= t_lo, view(), jnp.inf))
    return jnp.where(k > 0, thresh, jnp.inf), trips


def sparsify(
    T: Float[Array, "n m"], epsilon, density, *, sample_cap: int = SAMPLE_CAP
) -> SparseHessian:
    """Builds ``H_Ω`` from the plan ``T`` keeping a fraction ``density`` of ``T̃`` (Section 3.1).

    Args:
      T: current plan ``exp((α ⊕ β - M) / η)``.
      epsilon: the regularisation ``η``.
      density: ``ρ ∈ (0, 1]``, the fraction of the ``n (m-1)`` entries of ``T̃`` to keep.
      sample_cap: above this many entries the quantile comes from a fixed random sample this big.
    """
    T_t = T[:, :-1]
    flat = T_t.reshape(-1)
    return sparsify_above(T, epsilon, top_threshold(quantile_sample(flat, sample_cap), density))


def sparsify_above(T: Float[Array, "n m"], epsilon, threshold) -> SparseHessian:
    """Builds ``H_Ω`` keeping the entries of ``T̃`` that are ``≥ threshold`` (and row/column 0).

    The second half of :func:`sparsify`.
    """
    T_t = T[:, :-1]
    n, m1 = T_t.shape
    top = T_t >= threshold
    kept = jnp.sum(top, dtype=jnp.int32)
    # Row 0 and column 0 are always kept (Section 3.1; authors' `preserve` option).
    rows = jnp.arange(n)[:, None] == 0
    cols = jnp.arange(m1)[None, :] == 0
    S = jnp.where(top | rows | cols, T_t, 0.0) / epsilon
    return SparseHessian(T.sum(axis=1) / epsilon, T_t.sum(axis=0) / epsilon, S, kept)


def _budget_keep(D, budget, axis):
    """Along ``axis``, which entries of ``D ≥ 0`` stay: all but the smallest ones whose sum is at
    most ``budget``. An entry ``x`` goes exactly when the entries ``≤ x`` of its column (row) sum to
    at most ``budget`` (a tie group goes or stays whole, as after a sort the tied entries after the
    first survivor stay).

    No sort (XLA's CPU sort dominated an SSNS iteration): the largest threshold ``t`` with
    ``Σ_{y ≤ t} y ≤ budget`` is found per column (row) by bisection on the bit patterns of the
    entries, which order non-negative floats as integers, so the threshold is exact after as many
    passes as the float has bits.
    """
    itype = jnp.int64 if D.dtype == jnp.float64 else jnp.int32
    bits = lax.bitcast_convert_type(D, itype)
    # lo: a threshold whose sum fits (-1: nothing dropped); hi: one above every entry.
    lo = jnp.full(jnp.sum(D, axis=axis, keepdims=True).shape, -1, itype)
    hi = jnp.max(bits, axis=axis, keepdims=True) + 1

    def bisect(_, bounds):
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        fits = jnp.sum(jnp.where(bits <= mid, D, 0.0), axis=axis, keepdims=True) <= budget
        return jnp.where(fits, mid, lo), jnp.where(fits, hi, mid)

    lo, _ = lax.fori_loop(0, jnp.iinfo(itype).bits, bisect, (lo, hi))
    return bits > lo


def sparsify_budget(T: Float[Array, "n m"], epsilon, delta) -> SparseHessian:
    """Builds SSNS's ``H_δ``: the entries of ``T̃`` dropped sum to at most δ per column, 2δ per row.

    Tang & Qiu (NeurIPS 2024), Section 3, as the authors' ``sparsify_mat3``
    (``src/sinkhorn_sparsify3.cpp`` in yixuan/regot-python) computes it: in each column of ``T̃``
    drop the smallest entries whose sum stays ``≤ δ``; then, in each row whose dropped entries sum
    to more than ``2δ``, keep the largest of them again until what is dropped sums to ``≤ 2δ``.
    The dropped part has bounded row and column sums (the error control of the scheme), not
    merely entries below δ. Diagonals are exact; no row or column is kept by default (unlike
    SPLR's ``H_Ω``), as in their code.
    """
    T_t = T[:, :-1]
    n, m1 = T_t.shape
    dropped = jnp.where(_budget_keep(T_t, delta, axis=0), 0.0, T_t)
    dropped = jnp.where(_budget_keep(dropped, 2.0 * delta, axis=1), 0.0, dropped)
    keep = dropped == 0  # the authors' test: an entry is in H_δ where nothing was dropped
    S = jnp.where(keep, T_t, 0.0) / epsilon
    kept = jnp.sum(keep, dtype=jnp.int32)
    return SparseHessian(T.sum(axis=1) / epsilon, T_t.sum(axis=0) / epsilon, S, kept)


def next_density(density, improved, density_min, density_max):
    """Density schedule: ``ρ ← 0.9 ρ`` if ``‖g‖`` decreased else ``2 ρ``, clipped (Alg. 1)."""
    density = jnp.where(improved, 0.9 * density, 2.0 * density)
    return jnp.clip(density, density_min, density_max)


def next_density_regot(density, bad_move, density_min, density_max):
    """regot 0.0.3's schedule: ``ρ ← 1.1 ρ`` after a bad move (``‖g‖`` rose while already below
    its initial value), else ``0.99 ρ``, clipped (``sinkhorn_splr.cpp`` since June 2025)."""
    density = jnp.where(bad_move, 1.1 * density, 0.99 * density)
    return jnp.clip(density, density_min, density_max)
