"""``H_Ω`` of SPLR in gathered (COO) form with a fixed capacity: the fast path for CG.

Wang & Qiu (ICML 2025), Section 3.1 keeps about ``ρ n (m-1)`` entries of the off-diagonal block
``T̃ / η`` (``ρ ≤ ρ_max = 0.01`` by default), so a conjugate-gradient step on the Schur complement
(Section 3.3) should cost ``O(|Ω|)``, not ``O(nm)`` as with the masked dense block of
:class:`jaxlab.methods.qn_ot.sparse_hessian.SparseHessian`. Here row 0 and column 0 of ``S``
(always in ``Ω``) are held as dense vectors, and the rest of ``Ω`` as ``capacity`` (static)
triplets ``(row, col, value)`` in row-major order; unused slots at the end carry value 0 (at
indices cycling through all rows and columns), so they add nothing to a product. The products are
a gather and a ``segment_sum`` over the triplets plus two dense dot products.

Construction (once per SPLR iteration): the threshold of :func:`sparse_hessian.sparsify` (the
``⌊ρ n(m-1)⌋``-th largest entry of ``T̃``), the mask ``T̃ ≥ threshold`` outside row and column 0
packed into 32-bit words in one pass over ``T`` (:func:`pack_above`), and its compaction by
:func:`compact_words` (gathers and bit counts only: on CPU the scatter inside ``jnp.nonzero``,
and even a plain ``cumsum``, cost several times more). ``capacity`` defaults to twice the largest
kept count; should the mask still hold more entries (ties, or the sampled quantile of large
problems), the last ones in row-major order are dropped. Any ``Ω`` keeps ``H_Ω + τI`` positive
definite (Section 3.1), so a truncated ``Ω`` is still a valid SPLR matrix. A CG step costs what
its triplets hold, and the density ``ρ`` moves between ``ρ_max / 100`` and ``ρ_max`` during a
solve, so :func:`gathered_levels` returns a :class:`LevelledHessian` whose products run on the
shortest prefix of the triplets (one of :func:`capacity_levels`) that holds ``Ω``; its triplets
are row-major within each band between two levels, interleaved (:func:`band_order`).
:class:`SparseHessian` is the oracle: ``tests/methods/qn_ot`` checks that the products agree, and
a numpy ``H_Ω`` written from Section 3.1.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Bool, Float, Int, UInt32

from jaxlab.methods.qn_ot.sparse_hessian import SAMPLE_CAP, quantile_sample, top_threshold

__all__ = [
    "GatheredHessian",
    "LevelledHessian",
    "PackedMask",
    "band_order",
    "capacity_levels",
    "compact",
    "compact_words",
    "default_capacity",
    "gathered_above",
    "gathered_levels",
    "on_level",
    "pack_above",
    "sparsify_gathered",
]


def _take(v: Float[Array, " k"], idx: Int[Array, " cap"]) -> Float[Array, " cap"]:
    """``v[idx]`` without bounds handling: the triplets' indices are in range by construction
    (used slots from the mask, padding cycling through the rows and columns), and on CPU the
    checks are a measurable part of a CG product (the qn_ot README)."""
    return v.at[idx].get(mode="promise_in_bounds")


def _segment_sum(values, idx: Int[Array, " cap"], size: int):
    """``segment_sum`` over in-range indices (as :func:`_take`)."""
    return jax.ops.segment_sum(values, idx, size, mode="promise_in_bounds")


class GatheredHessian(NamedTuple):
    """``H_Ω = [[diag(h1), S], [Sᵀ, diag(h2)]]`` with ``S`` held as row 0 and column 0 (dense)
    plus ``capacity`` triplets for the rest of ``Ω``.

    Attributes:
      h1: ``T 1 / η`` (n), the exact first diagonal block.
      h2: ``T̃ᵀ 1 / η`` (m-1), the exact second diagonal block.
      row0: ``S[0, :] = T̃[0, :] / η`` (m-1), always in ``Ω``.
      col0: ``S[:, 0] = T̃[:, 0] / η`` (n) with its entry 0 set to 0 (it is in ``row0``).
      rows, cols: indices of the other stored entries of ``S`` (row-major, then the padding,
        whose indices cycle through all rows and columns).
      vals: ``T̃_ij / η`` at those entries, 0 in the padding.
      kept: how many entries the top-``ρ`` selection kept (before adding row and column 0).
    """

    h1: Float[Array, " n"]
    h2: Float[Array, " m1"]
    row0: Float[Array, " m1"]
    col0: Float[Array, " n"]
    rows: Int[Array, " cap"]
    cols: Int[Array, " cap"]
    vals: Float[Array, " cap"]
    kept: Int[Array, ""]

    @property
    def size(self) -> int:
        return self.h1.shape[0] + self.h2.shape[0]

    def apply_S(self, v2: Float[Array, " m1"]) -> Float[Array, " n"]:
        """``S v2``."""
        out = _segment_sum(self.vals * _take(v2, self.cols), self.rows, self.h1.shape[0])
        return (out + self.col0 * v2[0]).at[0].add(self.row0 @ v2)

    def apply_St(self, v1: Float[Array, " n"]) -> Float[Array, " m1"]:
        """``Sᵀ v1``."""
        out = _segment_sum(self.vals * _take(v1, self.rows), self.cols, self.h2.shape[0])
        return (out + self.row0 * v1[0]).at[0].add(self.col0 @ v1)

    def col_sq_sum(self, w: Float[Array, " n"]) -> Float[Array, " m1"]:
        """``Σ_i S_ij² w_i`` (the diagonal of ``Sᵀ diag(w) S``, for the Jacobi preconditioner)."""
        out = _segment_sum(self.vals**2 * _take(w, self.rows), self.cols, self.h2.shape[0])
        return (out + self.row0**2 * w[0]).at[0].add(self.col0**2 @ w)

    def matvec(self, v: Float[Array, " k"], shift=0.0) -> Float[Array, " k"]:
        """``(H_Ω + shift I) v``."""
        n = self.h1.shape[0]
        v1, v2 = v[:n], v[n:]
        top = (self.h1 + shift) * v1 + self.apply_S(v2)
        bottom = self.apply_St(v1) + (self.h2 + shift) * v2
        return jnp.concatenate([top, bottom])

    def prefix(self, capacity: int) -> GatheredHessian:
        """The first ``capacity`` triplets (all of ``Ω`` when it holds at most that many)."""
        return self._replace(
            rows=self.rows[:capacity], cols=self.cols[:capacity], vals=self.vals[:capacity]
        )

    def dense_block(self) -> Float[Array, "n m1"]:
        """``S`` as a dense matrix (tests only)."""
        S = jnp.zeros((self.h1.shape[0], self.h2.shape[0]), self.vals.dtype)
        S = S.at[0, :].add(self.row0).at[:, 0].add(self.col0)
        return S.at[self.rows, self.cols].add(self.vals)


def _word_bits(bits: Bool[Array, "... 32"]) -> UInt32[Array, " ..."]:
    """Packs the last axis (32 booleans) into one 32-bit word, bit ``j`` = entry ``j``."""
    shifts = jnp.arange(32, dtype=jnp.uint32)
    return jnp.sum(bits.astype(jnp.uint32) << shifts, axis=-1, dtype=jnp.uint32)  # sum = or


@functools.partial(jax.jit, static_argnums=1)
def compact_words(
    words: UInt32[Array, " w"], capacity: int
) -> tuple[Int[Array, " cap"], Bool[Array, " cap"]]:
    """Bit positions (``32 · word + bit``) of the first ``capacity`` set bits of ``words``, and
    which slots are used: :func:`compact` on a mask already packed into words.

    The running count of set bits per word (a cumulative sum 32× shorter than the mask, since
    XLA's CPU ``cumsum`` over the whole mask is slow) gives the first slot of each word, a running
    maximum the word of each slot, and a 5-step binary search on ``popcount`` the bit inside the
    word. Both running scans are ``lax.associative_scan``s: ``jnp.cumsum`` and ``lax.cummax``
    lower to a ``reduce_window``, which XLA's CPU backend runs slower at these lengths (the qn_ot
    README has the measurement). Jitted (``capacity`` static), so that an eager call compiles one
    program rather than each of the scans' many small operations.
    """
    counts = lax.population_count(words).astype(jnp.int32)
    total = lax.associative_scan(jnp.add, counts)
    rank = np.arange(capacity, dtype=np.int32)  # slot s holds the (s+1)-th set bit
    # The word of each slot: every non-empty word marks the slot of its first set bit, and a
    # running maximum carries the mark over the word's other bits (a binary search of the
    # running counts per slot costs more).
    start = total - counts
    marks = jnp.where((counts > 0) & (start < capacity), start, capacity)
    owner = (
        jnp.zeros(capacity, jnp.int32)
        .at[marks]
        .set(np.arange(words.shape[0], dtype=np.int32), mode="drop")
    )
    word_idx = lax.associative_scan(jnp.maximum, owner)
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


def compact(
    mask: Bool[Array, " p"], capacity: int
) -> tuple[Int[Array, " cap"], Bool[Array, " cap"]]:
    """Positions of the first ``capacity`` True entries of ``mask``, and which slots are used.

    ``jnp.nonzero(mask, size=capacity)`` by gathers only: the mask is packed into 32-bit words
    and :func:`compact_words` finds the set bits.
    """
    pad = -mask.shape[0] % 32
    return compact_words(_word_bits(jnp.pad(mask, (0, pad)).reshape(-1, 32)), capacity)


class PackedMask(NamedTuple):
    """``Ω`` of ``T̃`` less row and column 0, as bits: row ``i`` of ``T̃`` (``m - 1`` entries)
    is ``words[i]``, its column ``j`` bit ``j % 32`` of word ``j // 32`` (the row padded to
    ``32 · words.shape[1]`` columns, the padding's bits clear).

    Attributes:
      words: ``(n, ⌈(m-1)/32⌉)`` 32-bit words; row 0 and column 0 clear (held densely).
      kept: entries of ``T̃`` at or above the threshold, row and column 0 included.
      total: set bits of ``words`` (the triplets needed).
    """

    words: UInt32[Array, "n w"]
    kept: Int[Array, ""]
    total: Int[Array, ""]


def pack_above(T: Float[Array, "n m"], threshold) -> PackedMask:
    """The mask ``T̃ ≥ threshold`` outside row and column 0, packed row by row.

    One pass over ``T`` (compare and pack fused; no ``n (m-1)`` boolean array, no copy of ``T̃``).
    """
    n, m = T.shape
    m1 = m - 1
    w = -(-m1 // 32)
    width = 32 * w
    # T̃ padded to whole words; padding and the last column (not in T̃) are masked off below.
    Tp = jnp.pad(T[:, : min(m, width)], ((0, 0), (0, width - min(m, width))))
    in_t = (jnp.arange(width) < m1).reshape(w, 32)
    top = _word_bits((Tp.reshape(n, w, 32) >= threshold) & in_t)
    kept = jnp.sum(lax.population_count(top), dtype=jnp.int32)
    # Row 0 and column 0 (always in Ω, Section 3.1) are held densely, outside the triplets.
    words = top.at[0].set(0)
    words = words.at[:, 0].set(words[:, 0] & ~jnp.uint32(1))
    total = jnp.sum(lax.population_count(words), dtype=jnp.int32)
    return PackedMask(words, kept, total)


def capacity_levels(capacity: int, smallest: int = 1024) -> tuple[int, ...]:
    """Storage sizes for the triplets: ``capacity``, then each ``√2`` times smaller while it holds
    at least ``smallest`` triplets (below that a CG product's scatter costs less than its fixed
    work).

    :class:`LevelledHessian` runs each product on the smallest level that holds ``Ω``, so the
    triplets (and every CG product) cost at most ``√2`` times the entries kept rather than
    ``capacity``; each level adds one gather and one ``segment_sum`` per product to the program.
    """
    levels = [capacity]
    while levels[-1] / math.sqrt(2) >= smallest:
        levels.append(math.ceil(levels[-1] / math.sqrt(2)))
    return tuple(levels)


def default_capacity(n: int, m: int, density_max: float) -> int:
    """Twice the largest top-``ρ`` count, at most the ``(n-1)(m-2)`` entries outside row and
    column 0 of ``T̃`` (and at least 1)."""
    return max(1, min((n - 1) * (m - 2), 2 * int(density_max * n * (m - 1))))


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


# Stride of the interleaved slot order of gathered_levels (larger than the entries of a row of Ω).
INTERLEAVE = 64


def band_order(levels: tuple[int, ...], stride: int = INTERLEAVE) -> np.ndarray:
    """The slot order of :func:`gathered_levels`' triplets: slot ``j`` holds the ``order[j]``-th
    entry of ``Ω`` in row-major order, the entries of each band between consecutive ``levels``
    (and below the smallest) interleaved with ``stride``: ``lo, lo + stride, lo + 2 stride, ...,
    lo + 1, lo + 1 + stride, ...``.

    Every level's prefix still holds the first ``level`` entries (a band maps onto itself), but
    consecutive triplets now fall in different rows of ``S``: ``segment_sum`` into the row-sorted
    indices of ``S v`` updates one row several times in a row, a chain of dependent
    read-modify-writes that makes XLA's CPU scatter about 1.5 times slower (the qn_ot README has
    the measurement). A static numpy array.
    """
    bounds = (*levels, 0)
    order = np.empty(levels[0], np.int32)
    for hi, lo in zip(bounds[:-1], bounds[1:], strict=True):
        r = np.arange(hi - lo)
        order[lo:hi] = lo + np.lexsort((r // stride, r % stride))
    return order


def _gathered_from_words(
    T: Float[Array, "n m"],
    epsilon,
    packed: PackedMask,
    capacity: int,
    sums: tuple[Float[Array, " n"], Float[Array, " m1"]] | None,
    order: np.ndarray | None = None,
) -> GatheredHessian:
    n, m = T.shape
    m1 = m - 1
    width = 32 * packed.words.shape[1]
    pos, used = compact_words(packed.words.reshape(-1), capacity)
    if order is not None:  # the slots in band_order (a static permutation)
        pos, used = pos[order], used[order]
    row, col = pos // width, pos % width
    vals = jnp.where(used, T[jnp.where(used, row, 0), jnp.where(used, col, 0)], 0.0) / epsilon
    # The padding's zeros go to rows and columns spread over all of them: they add nothing
    # anywhere, whereas thousands of updates of one row or column serialise XLA's CPU scatter
    # (each product of a CG step was 2x slower with the padding in one row and column).
    # (numpy constants: the program does not recompute them every iteration)
    slot = np.arange(capacity, dtype=np.int32)
    rows = jnp.where(used, row, slot % n)
    cols = jnp.where(used, col, slot % m1)
    row_sums, col_sums = (T.sum(axis=1), T[:, :m1].sum(axis=0)) if sums is None else sums
    return GatheredHessian(
        h1=row_sums / epsilon,
        h2=col_sums / epsilon,
        row0=T[0, :m1] / epsilon,
        col0=T[:, 0].at[0].set(0.0) / epsilon,
        rows=rows,
        cols=cols,
        vals=vals,
        kept=packed.kept,
    )


def gathered_above(
    T: Float[Array, "n m"],
    epsilon,
    threshold,
    capacity: int,
    *,
    sums: tuple[Float[Array, " n"], Float[Array, " m1"]] | None = None,
) -> GatheredHessian:
    """``H_Ω`` as triplets keeping the entries of ``T̃`` that are ``≥ threshold`` (and row/column
    0): the assembly half of :func:`sparsify_gathered` (:func:`pack_above`,
    :func:`compact_words`, gather)."""
    return _gathered_from_words(T, epsilon, pack_above(T, threshold), capacity, sums)


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["H", "index"], meta_fields=["levels"]
)
@dataclasses.dataclass(frozen=True)
class LevelledHessian:
    """A :class:`GatheredHessian` whose products run on the first ``levels[index]`` triplets.

    ``index`` is traced (a pytree leaf), ``levels`` static; each product is a ``lax.switch`` over
    the levels, one gather and one ``segment_sum`` per level, so one compiled CG loop serves
    every level.
    """

    H: GatheredHessian
    index: Int[Array, ""]
    levels: tuple[int, ...]

    @property
    def h1(self) -> Float[Array, " n"]:
        return self.H.h1

    @property
    def h2(self) -> Float[Array, " m1"]:
        return self.H.h2

    def _switch(self, method: str, v: Float[Array, " k"]) -> Float[Array, " k"]:
        return on_level(self, lambda G, v: getattr(G, method)(v), v)

    def apply_S(self, v2: Float[Array, " m1"]) -> Float[Array, " n"]:
        """``S v2``."""
        return self._switch("apply_S", v2)

    def apply_St(self, v1: Float[Array, " n"]) -> Float[Array, " m1"]:
        """``Sᵀ v1``."""
        return self._switch("apply_St", v1)

    def col_sq_sum(self, w: Float[Array, " n"]) -> Float[Array, " m1"]:
        """``Σ_i S_ij² w_i``."""
        return self._switch("col_sq_sum", w)

    def matvec(self, v: Float[Array, " k"], shift=0.0) -> Float[Array, " k"]:
        """``(H_Ω + shift I) v``."""
        return GatheredHessian.matvec(self, v, shift)  # type: ignore[arg-type]


def on_level(H: GatheredHessian | LevelledHessian, fn, *args):
    """``fn(G, *args)`` with ``G`` the :class:`GatheredHessian` of ``H``'s level (``H`` itself
    when it has no levels).

    For a whole CG solve: one ``lax.switch`` around the solve, each branch a CG loop on one
    level's prefix, instead of a switch in every product of every CG step (a large part of a
    step on CPU; the qn_ot README has the measurement). Each level adds one copy of ``fn`` to the
    compiled program.
    """
    if not isinstance(H, LevelledHessian):
        return fn(H, *args)
    branches = [lambda *a, cap=cap: fn(H.H.prefix(cap), *a) for cap in H.levels]
    return lax.switch(H.index, branches, *args)


def gathered_levels(
    T: Float[Array, "n m"],
    epsilon,
    threshold,
    levels: tuple[int, ...],
    *,
    sums: tuple[Float[Array, " n"], Float[Array, " m1"]] | None = None,
) -> GatheredHessian | LevelledHessian:
    """``H_Ω`` (as :func:`gathered_above`) whose products use the smallest of ``levels``
    (static, descending, see :func:`capacity_levels`) that holds all of ``Ω``, or ``levels[0]``
    (truncated) when none does.

    The triplets are compacted once at ``levels[0]``; the used slots come first, so a level that
    holds ``Ω`` is a prefix of them, and a CG step (two scatters) costs what that prefix holds
    instead of the largest capacity. With one level this is :func:`gathered_above`.
    """
    packed = pack_above(T, threshold)
    if len(levels) == 1:
        return _gathered_from_words(T, epsilon, packed, levels[0], sums)
    H = _gathered_from_words(T, epsilon, packed, levels[0], sums, band_order(levels))
    fits = jnp.asarray(levels, jnp.int32) >= packed.total
    index = jnp.maximum(jnp.sum(fits, dtype=jnp.int32) - 1, 0)
    return LevelledHessian(H, index, tuple(levels))
