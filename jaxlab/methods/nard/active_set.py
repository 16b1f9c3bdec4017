"""Fixed-capacity active sets and the one-feature decision of the sequential NARD algorithms.

JAX needs static shapes, so the active set is ``p = max_active`` slots holding feature indices
(``d`` marks an empty slot) and their prior variances ``γ = 1/α`` (0 in empty slots). Everything the
sequential solvers do with it is O(p³) or O(p·d) regardless of how many features are pruned.

The decision (Tipping & Faul, 2003, generalised to m outputs sharing α under output precision Ω):
with ``ℓ_i(γ) = ½[−m log(1 + γ s_i) + γ Q_i / (1 + γ s_i)]`` the change of the objective when
feature i's variance goes from 0 to γ (s_i its sparsity factor, ``Q_i = q_iᵀ Ω q_i`` its quality),
the best γ for feature i alone is ``γ* = (Q_i − m s_i) / (m s_i²)`` when ``Q_i > m s_i`` (that is
``α* = m s_i² / (Q_i − m s_i)``, setting ``ℓ'(γ) = 0``: ``m s (1 + γ s) = Q``) and 0 otherwise
(prune). Adding, re-estimating and deleting feature i change the objective by
``ℓ_i(γ*) − ℓ_i(γ_i)``; the feature with the largest gain is updated, so the objective never
decreases. The surrogate variant uses the same ℓ with ``s = ρ``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

__all__ = [
    "ActiveSet",
    "apply_best",
    "coordinate_gain",
    "empty",
    "gather",
    "scatter",
    "single_feature_change",
]


class ActiveSet(NamedTuple):
    """``slots``: feature index per slot (``d`` = empty); ``gamma``: its variance (0 if empty)."""

    slots: Int[Array, " p"]
    gamma: Float[Array, " p"]


def empty(capacity: int, d: int, dtype) -> ActiveSet:
    """An active set with no features."""
    return ActiveSet(jnp.full((capacity,), d, jnp.int32), jnp.zeros((capacity,), dtype))


def gather(active: ActiveSet, d: int) -> tuple[Int[Array, " p"], Float[Array, " p"]]:
    """Safe gather indices (empty slots point at feature 0) and the 0/1 mask of used slots."""
    valid = active.slots < d
    return jnp.where(valid, active.slots, 0), valid.astype(active.gamma.dtype)


def gather_blocks(active: ActiveSet, rows: Float[Array, "p d"], cross: Float[Array, "m d"]):
    """Slot indices, slot mask, the Gram block ``G_AA`` (p×p) and the cross block ``P_A`` (m×p) of
    the active features, zero on empty slots.

    ``rows`` holds the Gram rows ``G_{A,:} = X_A Xᵀ`` of the slots (any values on empty slots):
    ``sequential`` slices them from the d×d Gram matrix, ``sequential_surrogate`` keeps them in its
    state and never forms that matrix.
    """
    idx, vf = gather(active, cross.shape[1])
    g_aa = rows[:, idx] * vf[:, None] * vf[None, :]
    return idx, vf, g_aa, cross[:, idx] * vf[None, :]


def scatter(values: Float[Array, "... p"], active: ActiveSet, d: int) -> Float[Array, "... d"]:
    """Places per-slot values at their features' positions (zeros elsewhere)."""
    idx, vf = gather(active, d)
    out = jnp.zeros(values.shape[:-1] + (d,), values.dtype)
    return out.at[..., idx].add(values * vf)


def single_feature_change(
    quality: Float[Array, " d"], sparsity: Float[Array, " d"], gamma: Float[Array, " d"], m: int
) -> Float[Array, " d"]:
    """``ℓ_i(γ_i) = ½[−m log(1 + γ_i s_i) + γ_i Q_i / (1 + γ_i s_i)]``: the objective's change when
    feature i's variance goes from 0 (pruned) to ``γ_i``, all else fixed."""
    return 0.5 * (-m * jnp.log1p(gamma * sparsity) + quality * gamma / (1 + gamma * sparsity))


def coordinate_gain(
    quality: Float[Array, " d"],
    sparsity: Float[Array, " d"],
    gamma: Float[Array, " d"],
    m: int,
) -> tuple[Float[Array, " d"], Float[Array, " d"]]:
    """Best single-feature variances ``γ*`` and the gains ``ℓ(γ*) − ℓ(γ)`` (module docstring)."""
    s = jnp.maximum(sparsity, jnp.finfo(sparsity.dtype).tiny)
    g_star = jnp.where(quality > m * s, (quality - m * s) / (m * s * s), 0.0)
    gain = single_feature_change(quality, s, g_star, m) - single_feature_change(
        quality, s, gamma, m
    )
    return g_star, gain


def apply_best(
    active: ActiveSet, g_star: Float[Array, " d"], gain: Float[Array, " d"]
) -> tuple[ActiveSet, Float[Array, ""], Int[Array, ""]]:
    """Applies the add / re-estimate / delete with the largest positive gain.

    Adding needs a free slot: when the set is full, additions are not considered.

    Returns:
      The new active set, the gain taken (0 when nothing improved), and the feature index.
    """
    d = g_star.shape[0]
    idx, vf = gather(active, d)
    is_active = jnp.zeros((d,), bool).at[idx].max(vf > 0)
    full = jnp.all(active.slots < d)
    gain = jnp.where(~is_active & (g_star > 0) & full, -jnp.inf, gain)
    gain = jnp.where(~is_active & (g_star == 0), 0.0, gain)
    i = jnp.argmax(gain)
    best = gain[i]
    slot = jnp.where(is_active[i], jnp.argmax(active.slots == i), jnp.argmax(active.slots == d))
    new_g = g_star[i]
    slots = active.slots.at[slot].set(jnp.where(new_g > 0, i, d).astype(jnp.int32))
    gammas = active.gamma.at[slot].set(new_g)
    take = best > 0
    new = ActiveSet(jnp.where(take, slots, active.slots), jnp.where(take, gammas, active.gamma))
    return new, jnp.where(take, best, 0.0), i
