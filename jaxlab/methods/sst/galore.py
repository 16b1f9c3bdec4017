"""GaLore as an optax transformation: Adam on gradients projected onto a refreshed top-r subspace.

GaLore (Zhao, Zhang, Chen, Wang, Anandkumar & Tian, ICML 2024, Algorithm 2) keeps each weight
dense but runs Adam in a rank-``r`` projection of its gradient: for a ``(m, n)`` matrix with
``m <= n``, ``P`` holds the top-``r`` left singular vectors of the gradient ``G`` (refreshed every
``T`` steps, from that step's gradient), Adam sees ``R = Pᵀ G`` ``(r, n)`` and the update is
``α P · adam(R)``; for ``m > n`` the right singular vectors project from the other side. Adam's
moments are ``r x n`` and are kept across refreshes, as in the authors' code. Parameters that are
not matrices (norm scales), and the embeddings (any name in ``dense``), get plain Adam. Weight
decay and the learning rate come after it
(:func:`jaxlab.methods.sst.optim.make_method_optimizer`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxlab.methods.sst.moments import key_path

__all__ = ["GaLoreState", "scale_by_galore"]

DENSE = ("embed", "unembed")


class GaLoreState(NamedTuple):
    count: jax.Array
    projectors: Any  # per parameter: (m, r) or (n, r), or a (0,) placeholder for plain Adam
    adam: Any


def _projected(path, p, rank: int, dense) -> bool:
    return p.ndim == 2 and not any(str(k) in dense for k in key_path(path)) and rank < min(p.shape)


def _project(g, proj, left: bool):
    return proj.T @ g if left else g @ proj


def _back(r, proj, left: bool):
    return proj @ r if left else r @ proj.T


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

    def shapes(params):
        def one(path, p):
            if not _projected(path, p, rank, dense):
                return jnp.zeros((0,), p.dtype), jnp.zeros(p.shape, p.dtype)
            m, n = p.shape
            proj = jnp.zeros((m, rank) if m <= n else (n, rank), p.dtype)
            return proj, jnp.zeros((rank, n) if m <= n else (m, rank), p.dtype)

        pairs = jax.tree_util.tree_map_with_path(one, params)
        is_pair = lambda x: isinstance(x, tuple)  # noqa: E731
        return (
            jax.tree.map(lambda t: t[0], pairs, is_leaf=is_pair),
            jax.tree.map(lambda t: t[1], pairs, is_leaf=is_pair),
        )

    def init(params):
        projectors, reduced = shapes(params)
        return GaLoreState(jnp.zeros((), jnp.int32), projectors, adam.init(reduced))

    def update(updates, state, params=None):
        del params
        refresh = state.count % update_every == 0

        def new_projector(g, proj):
            if proj.shape == (0,):
                return proj
            left = g.shape[0] <= g.shape[1]

            def top():
                u, _, vt = jnp.linalg.svd(g.astype(jnp.float32), full_matrices=False)
                return (u[:, :rank] if left else vt[:rank].T).astype(proj.dtype)

            return jax.lax.cond(refresh, top, lambda: proj)

        projectors = jax.tree.map(new_projector, updates, state.projectors)

        def down(g, proj):
            return g if proj.shape == (0,) else _project(g, proj, g.shape[0] <= g.shape[1])

        reduced = jax.tree.map(down, updates, projectors)
        steps, adam_state = adam.update(reduced, state.adam)

        def up(step, g, proj):
            if proj.shape == (0,):
                return step
            return scale * _back(step, proj, g.shape[0] <= g.shape[1])

        out = jax.tree.map(up, steps, updates, projectors)
        return out, GaLoreState(state.count + 1, projectors, adam_state)

    return optax.GradientTransformation(init, update)
