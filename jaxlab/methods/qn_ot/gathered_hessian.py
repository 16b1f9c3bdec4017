"""``H_Ω`` of SPLR in gathered (COO) form with a fixed capacity: the fast path for CG.

Wang & Qiu (ICML 2025), Section 3.1 keeps about ``ρ n (m-1)`` entries of the off-diagonal block
``T̃ / η`` (``ρ ≤ ρ_max = 0.01`` by default), so a conjugate-gradient step on the Schur complement
(Section 3.3) should cost ``O(|Ω|)``, not ``O(nm)`` as with the masked dense block of
:class:`jaxlab.methods.qn_ot.sparse_hessian.SparseHessian`. Here ``Ω`` is stored as ``capacity``
(static) triplets ``(row, col, value)`` in row-major order; unused slots at the end carry value 0
(at indices cycling through all rows and columns), so they add nothing to a product. The products
are a gather and a ``segment_sum``.

Construction (once per SPLR iteration): the threshold of :func:`sparse_hessian.sparsify` (the
``⌊ρ n(m-1)⌋``-th largest entry of ``T̃``), the mask ``T̃ ≥ threshold`` plus row and column 0,
and its compaction by :func:`compact` (gathers and bit counts only: on CPU the scatter inside
``jnp.nonzero``, and even a plain ``cumsum``, cost several times more). ``capacity`` defaults to
twice the largest kept count plus row and column 0; should the mask still hold more entries (ties,
or the sampled quantile of large problems), the last ones in row-major order are dropped. Any
``Ω`` keeps ``H_Ω + τI`` positive definite (Section 3.1), so a truncated ``Ω`` is still a valid
SPLR matrix. :class:`SparseHessian` is the oracle: ``tests/methods/qn_ot`` checks that the
products agree.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from jaxlab.methods.qn_ot.sparse_hessian import SAMPLE_CAP, quantile_sample, top_threshold

__all__ = [
    "GatheredHessian",
    "compact",
    "default_capacity",
    "gathered_above",
    "sparsify_gathered",
]


class GatheredHessian(NamedTuple):
    """``H_Ω = [[diag(h1), S], [Sᵀ, diag(h2)]]`` with ``S`` held as ``capacity`` triplets.

    Attributes:
      h1: ``T 1 / η`` (n), the exact first diagonal block.
      h2: ``T̃ᵀ 1 / η`` (m-1), the exact second diagonal block.
      rows, cols: indices of the stored entries of ``S`` (row-major, then the padding, whose
        indices cycle through all rows and columns).
      vals: ``T̃_ij / η`` at the stored entries, 0 in the padding.
      kept: how many entries the top-``ρ`` selection kept (before adding row and column 0).
    """

    h1: Float[Array, " n"]
    h2: Float[Array, " m1"]
    rows: Int[Array, " cap"]
    cols: Int[Array, " cap"]
    vals: Float[Array, " cap"]
    kept: Int[Array, ""]

    @property
    def size(self) -> int:
        return self.h1.shape[0] + self.h2.shape[0]

    def apply_S(self, v2: Float[Array, " m1"]) -> Float[Array, " n"]:
        """``S v2``."""
        return jax.ops.segment_sum(self.vals * v2[self.cols], self.rows, self.h1.shape[0])

    def apply_St(self, v1: Float[Array, " n"]) -> Float[Array, " m1"]:
        """``Sᵀ v1``."""
        return jax.ops.segment_sum(self.vals * v1[self.rows], self.cols, self.h2.shape[0])

    def col_sq_sum(self, w: Float[Array, " n"]) -> Float[Array, " m1"]:
        """``Σ_i S_ij² w_i`` (the diagonal of ``Sᵀ diag(w) S``, for the Jacobi preconditioner)."""
        return jax.ops.segment_sum(self.vals**2 * w[self.rows], self.cols, self.h2.shape[0])

    def matvec(self, v: Float[Array, " k"], shift=0.0) -> Float[Array, " k"]:
        """``(H_Ω + shift I) v``."""
        n = self.h1.shape[0]
        v1, v2 = v[:n], v[n:]
        top = (self.h1 + shift) * v1 + self.apply_S(v2)
        bottom = self.apply_St(v1) + (self.h2 + shift) * v2
        return jnp.concatenate([top, bottom])

    def dense_block(self) -> Float[Array, "n m1"]:
        """``S`` as a dense matrix (tests only)."""
        S = jnp.zeros((self.h1.shape[0], self.h2.shape[0]), self.vals.dtype)
        return S.at[self.rows, self.cols].add(self.vals)


def compact(
    mask: Bool[Array, " p"], capacity: int
) -> tuple[Int[Array, " cap"], Bool[Array, " cap"]]:
    """Positions of the first ``capacity`` True entries of ``mask``, and which slots are used.

    ``jnp.nonzero(mask, size=capacity)`` by gathers only: the mask is packed into 32-bit words,
    the running count of set bits per word (a cumulative sum 32× shorter than the mask, since
    XLA's CPU ``cumsum`` over the whole mask is slow) finds the word of each slot by binary search,
    and a 5-step binary search on ``popcount`` finds the bit inside the word.
    """
    p = mask.shape[0]
    pad = -p % 32
    bits = jnp.pad(mask, (0, pad)).reshape(-1, 32).astype(jnp.uint32)
    shifts = jnp.arange(32, dtype=jnp.uint32)
    words = jnp.sum(bits << shifts, axis=1, dtype=jnp.uint32)  # distinct bits: sum = or
    counts = lax.population_count(words).astype(jnp.int32)
    total = jnp.cumsum(counts)
    rank = jnp.arange(capacity, dtype=jnp.int32)  # slot s holds the (s+1)-th set bit
    word_idx = jnp.minimum(jnp.searchsorted(total, rank, side="right"), words.shape[0] - 1)
    word = words[word_idx]
    within = rank - (total[word_idx] - counts[word_idx])
    # Largest ``lo`` with at most ``within`` set bits below it: that bit is the one sought.
    lo = jnp.zeros(capacity, jnp.uint32)
    one = jnp.uint32(1)
    for width in (16, 8, 4, 2, 1):
        cand = lo + width
        below = lax.population_count(word & ((one << cand) - one)).astype(jnp.int32)
        lo = jnp.where(below <= within, cand, lo)
    idx = word_idx.astype(jnp.int32) * 32 + lo.astype(jnp.int32)
    return idx, rank < total[-1]


def default_capacity(n: int, m: int, density_max: float) -> int:
    """Twice the largest top-``ρ`` count plus row and column 0, at most ``n (m-1)``."""
    m1 = m - 1
    return min(n * m1, 2 * int(density_max * n * m1) + n + m1)


def sparsify_gathered(
    T: Float[Array, "n m"],
    epsilon,
    density,
    capacity: int,
    *,
    sums: tuple[Float[Array, " n"], Float[Array, " m1"]] | None = None,
    sample_cap: int = SAMPLE_CAP,
) -> GatheredHessian:
    """:func:`jaxlab.methods.qn_ot.sparse_hessian.sparsify` in gathered form (Section 3.1).

    Args:
      T: current plan ``exp((α ⊕ β - M) / η)``.
      epsilon: the regularisation ``η``.
      density: ``ρ``, the fraction of the ``n (m-1)`` entries of ``T̃`` to keep.
      capacity: number of stored triplets (static); see :func:`default_capacity`.
      sums: ``(T 1, T̃ᵀ 1)`` when the caller has them (``g + (a, b̃)``, as the authors' code
        does), which saves two passes over ``T``.
      sample_cap: above this many entries the quantile comes from a fixed random sample.
    """
    flat = T[:, :-1].reshape(-1)
    threshold = top_threshold(quantile_sample(flat, sample_cap), density)
    return gathered_above(T, epsilon, threshold, capacity, sums=sums)


def gathered_above(
    T: Float[Array, "n m"],
    epsilon,
    threshold,
    capacity: int,
    *,
    sums: tuple[Float[Array, " n"], Float[Array, " m1"]] | None = None,
) -> GatheredHessian:
    """``H_Ω`` as triplets keeping the entries of ``T̃`` that are ``≥ threshold`` (and row/column
    0): the assembly half of :func:`sparsify_gathered` (mask, :func:`compact`, gather)."""
    T_t = T[:, :-1]
    n, m1 = T_t.shape
    flat = T_t.reshape(-1)
    top = T_t >= threshold
    kept = jnp.sum(top, dtype=jnp.int32)
    # Row 0 and column 0 are always kept (Section 3.1; the authors' `preserve` option).
    mask = top.at[0, :].set(True).at[:, 0].set(True).reshape(-1)
    idx, used = compact(mask, capacity)
    vals = jnp.where(used, flat[jnp.where(used, idx, 0)], 0.0) / epsilon
    # The padding's zeros go to rows and columns spread over all of them: they add nothing
    # anywhere, whereas thousands of updates of one row or column serialise XLA's CPU scatter
    # (each product of a CG step was 2x slower with the padding in one row and column).
    slot = jnp.arange(capacity)
    rows = jnp.where(used, idx // m1, slot % n)
    cols = jnp.where(used, idx % m1, slot % m1)
    row_sums, col_sums = (T.sum(axis=1), T_t.sum(axis=0)) if sums is None else sums
    return GatheredHessian(
        h1=row_sums / epsilon,
        h2=col_sums / epsilon,
        rows=rows,
        cols=cols,
        vals=vals,
        kept=kept,
    )
