"""Editing an optimizer's per-parameter state by parameter path, for the state hooks.

optax keeps its moments in trees shaped like the parameters (``mu``, ``nu`` of Adam, inside any
chain or ``multi_transform``). A hook that changes which columns a parameter holds (SST's redraw) or
restarts a parameter (ReLoRA*'s merge, a re-SVD) edits the matching entries of every such tree:
:func:`edit_param_state` finds each optimizer-state leaf whose path ends with a parameter's path
and has the given shape, and replaces it by ``fn(leaf)``. A shared scalar such as ``optax.adam``'s
step count is never touched; per-column counts (shaped ``(1, r)``) are edited by asking for that
shape.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from flax import nnx

__all__ = ["edit_param_state", "key_path"]


def key_path(path) -> tuple:
    """A JAX key path as plain names and indices, without a trailing ``value``."""
    keys = tuple(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))) for k in path)
    return keys[:-1] if keys and keys[-1] == "value" else keys


def edit_param_state(
    optimizer: nnx.Optimizer, param_path: tuple, shape: tuple, fn: Callable[[jax.Array], jax.Array]
) -> int:
    """Replaces every optimizer-state leaf of parameter ``param_path`` by ``fn(leaf)`` (in place);
    returns how many leaves were edited."""
    edited = 0
    leaves = jax.tree_util.tree_leaves_with_path(
        optimizer.opt_state, is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    n = len(param_path)
    for path, var in leaves:
        keys = key_path(path)
        if keys[-n:] == tuple(param_path) and isinstance(var, nnx.Variable):
            if tuple(var.shape) == tuple(shape):
                var[...] = fn(var[...])
                edited += 1
    return edited
