"""Editing an optimizer's per-parameter state by parameter path, for the state hooks.

optax keeps its moments in trees shaped like the parameters (``mu``, ``nu`` of Adam, inside any
chain or ``multi_transform``). A hook that changes which columns a parameter holds (SST's redraw) or
restarts a parameter (ReLoRA*'s merge, a re-SVD) edits the matching entries of every such tree:
:func:`edit_param_state` finds each optimizer-state leaf whose key path ends with one of the given
parameter paths and returns a copy of the state with ``fn(path, leaf)`` in its place. ``fn`` picks
by shape which leaves to change: a shared scalar such as ``optax.adam``'s step count (shape ``()``)
is left alone, per-column counts (shaped ``(1, r)``) are edited with their columns.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import jax

__all__ = ["by_path", "edit_param_state", "key_path"]


def key_path(path) -> tuple:
    """A JAX key path as plain names and indices, without a trailing ``value``."""
    keys = tuple(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))) for k in path)
    return keys[:-1] if keys and keys[-1] == "value" else keys


def by_path(tree: Any) -> dict[tuple, jax.Array]:
    """``{key_path: leaf}`` of a pytree (NNX variables are read through to their arrays)."""
    return {key_path(p): x for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def edit_param_state(
    opt_state: Any, paths: Collection[tuple], fn: Callable[[tuple, jax.Array], jax.Array]
) -> Any:
    """``opt_state`` with each leaf of a parameter in ``paths`` replaced by ``fn(path, leaf)``.

    A leaf belongs to the parameter whose path is the longest suffix of the leaf's key path (an
    optimizer state holds the parameter trees below its own fields: ``mu/<path>``). Leaves of other
    parameters and the state's own fields (counts, schedules) are returned unchanged.
    """
    paths = {tuple(p) for p in paths}

    def one(leaf_path, leaf):
        keys = key_path(leaf_path)
        for j in range(len(keys)):
            if keys[j:] in paths:
                return fn(keys[j:], leaf)
        return leaf

    return jax.tree_util.tree_map_with_path(one, opt_state)
