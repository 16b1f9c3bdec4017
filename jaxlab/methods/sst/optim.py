"""SST's optax transformations and the optimizers of SST and its baselines.

* :func:`enhanced_gradient` — SST's update direction for the singular vectors (Zhao et al., ICML
  2025, Sec. 4.2, Eq. 3 and App. D): with ``M = Σ_i s_i u_i v_iᵀ`` and ``G = ∂L/∂M``, autodiff
  gives ``∂L/∂u_i = s_i G v_i`` and ``∂L/∂v_i = s_i Gᵀ u_i``; SST divides by ``s_i`` and feeds
  ``G v_i`` (resp. ``Gᵀ u_i``) to the optimizer, so a pair's direction learns at a rate that does
  not shrink with its singular value. ``∂L/∂s_i = u_iᵀ G v_i`` is used as it is. A pair whose
  ``s_i`` is 0 has a zero column gradient, which is passed on unchanged.
* :func:`spectral_projection` — after the optimizer: ``s ← max(s, 0)`` (singular values stay
  non-negative) and each updated ``u_i``, ``v_i`` back to unit length (Algorithm 1). Written as an
  update ``new - old``; ``old + (max(q, 0) - old)`` is exactly non-negative in floating point.
* :func:`make_method_optimizer` — the optimizer of each method at one recipe (the loop's schedule,
  clipping, AdamW's betas and weight decay): AdamW for ``full``, ``lora`` and ``relora`` (only the
  trainable arrays have state), SST's chain, GaLore's (:mod:`jaxlab.methods.sst.galore`).

The transformations find a spectral layer's arrays by their parameter names (``s``, ``u_active``,
``v_active``, siblings in the tree), so they work on any model and leave other parameters alone.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlab.core.config import TrainConfig
from jaxlab.methods.sst.config import SSTConfig
from jaxlab.methods.sst.galore import scale_by_galore
from jaxlab.methods.sst.moments import key_path

__all__ = [
    "enhanced_gradient",
    "make_method_optimizer",
    "optimizer_state_bytes",
    "spectral_projection",
]

VECTORS = ("u_active", "v_active")


def _by_path(tree: Any) -> dict[tuple, jax.Array]:
    return {key_path(p): x for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def _map_spectral(fn, updates: Any, params: Any) -> Any:
    """``fn(name, update, param, s)`` on every spectral-layer leaf (others unchanged)."""
    if params is None:
        raise ValueError("SST's transformations need the parameters: call update(g, state, params)")
    flat = _by_path(params)

    def one(path, g):
        keys = key_path(path)
        parent, name = keys[:-1], keys[-1] if keys else None
        if name in (*VECTORS, "s") and parent + ("s",) in flat and parent + (VECTORS[0],) in flat:
            return fn(name, g, flat[keys], flat[parent + ("s",)])
        return g

    return jax.tree_util.tree_map_with_path(one, updates)


def enhanced_gradient(eps: float = 1e-30) -> optax.GradientTransformation:
    """Divides the active singular-vector columns' gradients by their singular values."""

    def update(updates, state, params=None):
        def fn(name, g, p, s):
            if name == "s":
                return g
            s_r = s[: g.shape[1]].astype(g.dtype)
            return g / jnp.where(s_r > eps, s_r, 1.0)

        return _map_spectral(fn, updates, params), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def spectral_projection() -> optax.GradientTransformation:
    """Makes ``params + updates`` have ``s >= 0`` and unit-norm active columns."""

    def update(updates, state, params=None):
        def fn(name, g, p, s):
            q = p + g
            if name == "s":
                return jnp.maximum(q, 0.0) - p
            return q / jnp.linalg.norm(q, axis=0, keepdims=True) - p

        return _map_spectral(fn, updates, params), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def _decay_mask(params: Any) -> Any:
    """Weight decay on matrices, except SST's unit-norm singular vectors."""
    return jax.tree_util.tree_map_with_path(
        lambda path, p: p.ndim >= 2 and key_path(path)[-1] not in VECTORS, params
    )


def make_method_optimizer(
    cfg: TrainConfig, schedule: optax.Schedule, sst: SSTConfig
) -> optax.GradientTransformation:
    """The optimizer of ``sst.method`` with the loop's recipe (see the module docstring)."""
    clip = optax.clip_by_global_norm(cfg.grad_clip) if cfg.grad_clip > 0 else optax.identity()
    if sst.method == "galore":
        return optax.chain(
            clip,
            scale_by_galore(
                sst.rank, sst.galore_every, sst.galore_scale, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps
            ),
            optax.add_decayed_weights(cfg.weight_decay, mask=_decay_mask),
            optax.scale_by_learning_rate(schedule),
        )
    adamw = optax.adamw(
        schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
        mask=_decay_mask,
    )  # fmt: skip
    if sst.method == "sst":
        return optax.chain(enhanced_gradient(), clip, adamw, spectral_projection())
    return optax.chain(clip, adamw)


def optimizer_state_bytes(tx: optax.GradientTransformation, params: Any) -> int:
    """Bytes of ``tx``'s state for ``params`` (shapes only; nothing is allocated)."""
    state = jax.eval_shape(tx.init, params)
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)))
