"""GaLore as an optax transformation: Adam on gradients projected onto a refreshed top-r subspace.

GaLore (Zhao, Zhang, Chen, Wang, Anandkumar & Tian, ICML 2024, Algorithm 2) keeps each weight
dense but runs Adam in a rank-``r`` projection of its gradient: for a ``(m, n)`` matrix with
``m <= n``, ``P`` holds the top-``r`` left singular vectors of the gradient ``G`` (refreshed every
``T`` steps, from that step's gradient), Adam sees ``R = Pᵀ G`` ``(r, n)`` and the update is
``α P · adam(R)``; for ``m > n`` the right singular vectors project from the other side. Adam's
moments are ``r x n`` and are kept across refreshes, as in the authors' code. Parameters that are
not matrices (norm scales), and the embeddings (any name in ``dense``), get plain Adam. Weight
decay and the learning rate come after it. Its state is replicated over the mesh (its shapes are not
the parameters', so it carries no logical axes); sharding it is left for accelerator runs
(:func:`jaxlab.methods.sst.optim.make_method_optimizer`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.methods.sst.moments import key_path

__all__ = ["GaLoreState", "scale_by_galore"]

DENSE = ("embed", "unembed")


class GaLoreState(NamedTuple):
    count: jax.Array
    projectors: dict[str, jax.Array]  # "a/b/c" path of each projected matrix -> (m, r) or (n, r)
    adam: Any


def _name(path) -> str:
    return "/".join(str(k) for k in key_path(path))


def _projected(path, p, rank: int, dense) -> bool:
    return p.ndim == 2 and not any(str(k) in dense for k in key_path(path)) and rank < min(p.shape)


def scale_by_galore(
    rank: int,
    update_every: int,
    scale: float,
    *,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    dense: tuple[str, ...] = DENSE,
) -> optax.GradientTransformation:
    """GaLore's projected Adam (module docstring); returns the update before the learning rate."""
    adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

    def left(p) -> bool:
        return p.shape[0] <= p.shape[1]

    def down(path, g, projectors):
        proj = projectors.get(_name(path))
        if proj is None:
            return g
        return proj.T @ g if left(g) else g @ proj

    def init(params):
        # Plain arrays: the state's shapes are not the parameters', so their logical-axis
        # annotations (NNX variables' metadata) must not be inherited; the state is replicated.
        params = nnx.as_pure(params)
        projectors = {
            _name(path): jnp.zeros((p.shape[0] if left(p) else p.shape[1], rank), p.dtype)
            for path, p in jax.tree_util.tree_leaves_with_path(params)
            if _projected(path, p, rank, dense)
        }
        reduced = jax.tree_util.tree_map_with_path(
            lambda path, p: down(path, jnp.zeros_like(p), projectors), params
        )
        return GaLoreState(jnp.zeros((), jnp.int32), projectors, adam.init(reduced))

    def update(updates, state, params=None):
        del params
        refresh = state.count % update_every == 0
        grads = {_name(p): g for p, g in jax.tree_util.tree_leaves_with_path(updates)}

        def new_projector(name, proj):
            g = grads[name]

            def top():
                u, _, vt = jnp.linalg.svd(g.astype(jnp.float32), full_matrices=False)
                return (u[:, :rank] if left(g) else vt[:rank].T).astype(proj.dtype)

            return jax.lax.cond(refresh, top, lambda: proj)

        projectors = {name: new_projector(name, p) for name, p in state.projectors.items()}
        reduced = jax.tree_util.tree_map_with_path(lambda p, g: down(p, g, projectors), updates)
        steps, adam_state = adam.update(reduced, state.adam)

        def up(path, step, g):
            proj = projectors.get(_name(path))
            if proj is None:
                return step
            return scale * (proj @ step if left(g) else step @ proj.T)

        out = jax.tree_util.tree_map_with_path(up, steps, updates)
        return out, GaLoreState(state.count + 1, projectors, adam_state)

    return optax.GradientTransformation(init, update)
