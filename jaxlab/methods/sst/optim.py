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
* :func:`scale_by_column_adam` — Adam whose step count, and so bias correction, is kept per
  active column of the singular vectors and per singular value (one count per other array). A
  redraw zeroes an entering pair's moments (:mod:`jaxlab.methods.sst.hooks`) and its count with
  them, so the pair's first update is a fresh Adam step; with one shared count, as in
  ``optax.adam``, a newcomer's first steps would be damped by ``(1 - b1) / (1 - b1^t) ...`` for
  the run's whole ``t`` (about 0.45, 0.61, 0.72, ... of a normal step at b1 = 0.9, b2 = 0.95).
  Without redraws it equals ``optax.scale_by_adam`` exactly (tested).
* :func:`sst_adamw` — SST's optimizer from plain arguments, as ``optax.adamw`` is built: the
  enhanced gradient, the per-column Adam, decoupled weight decay (on matrices, never on ``s`` nor
  the unit-norm singular vectors: :func:`decay_mask`), the learning rate, the projection.
  :func:`galore_adamw` is GaLore's (:mod:`jaxlab.methods.sst.galore`); LoRA and ReLoRA* train with
  ``optax.adamw`` itself (ReLoRA*'s restarts of the rate:
  :func:`~jaxlab.methods.sst.hooks.jagged_schedule`). Gradient clipping goes in front, as in any
  optax chain:
  ``optax.chain(optax.clip_by_global_norm(c), sst_adamw(...))`` divides by ``s_i`` after the clip,
  so a small ``s_i`` cannot shrink the other gradients of the step through it (the paper does not
  state the order; this is jaxlab's choice).
* :func:`make_method_optimizer` — the runner's wrapper: the optimizer of each method at the loop's
  recipe (a :class:`~jaxlab.core.config.TrainConfig`'s clipping, betas and weight decay, the
  loop's schedule), i.e. the clip then ``sst_adamw``, ``galore_adamw`` or ``optax.adamw``.

The transformations find a spectral layer's arrays by their parameter names (``s``, ``u_active``,
``v_active``, siblings in the tree), so they work on any model and leave other parameters alone.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.methods.sst.config import SSTConfig
from jaxlab.methods.sst.galore import scale_by_galore
from jaxlab.methods.sst.moments import by_path, key_path

__all__ = [
    "ColumnAdamState",
    "decay_mask",
    "enhanced_gradient",
    "galore_adamw",
    "make_method_optimizer",
    "optimizer_state_bytes",
    "scale_by_column_adam",
    "spectral_projection",
    "sst_adamw",
]

VECTORS = ("u_active", "v_active")


def _spectral_leaf(keys: tuple, flat: dict[tuple, jax.Array]) -> str | None:
    """The leaf's name (``s``, ``u_active``, ``v_active``) if it belongs to a spectral layer."""
    parent, name = keys[:-1], keys[-1] if keys else None
    if name in (*VECTORS, "s") and parent + ("s",) in flat and parent + (VECTORS[0],) in flat:
        return name
    return None


def _map_spectral(fn, updates: Any, params: Any) -> Any:
    """``fn(name, update, param, s)`` on every spectral-layer leaf (others unchanged)."""
    if params is None:
        raise ValueError("SST's transformations need the parameters: call update(g, state, params)")
    flat = by_path(params)

    def one(path, g):
        keys = key_path(path)
        name = _spectral_leaf(keys, flat)
        return g if name is None else fn(name, g, flat[keys], flat[keys[:-1] + ("s",)])

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


class ColumnAdamState(NamedTuple):
    """Adam's moments and the step counts of :func:`scale_by_column_adam`.

    ``count`` has, per parameter, one entry per active column (``(1, r)`` for ``u_active`` and
    ``v_active``), one per singular value (``(k,)`` for ``s``), or one for the array (``()``).
    """

    count: Any
    mu: Any
    nu: Any


def _count_like(params: Any) -> Any:
    """Zero counts shaped per parameter (see :class:`ColumnAdamState`), as plain arrays: an NNX
    parameter's sharding annotation names its own axes, which a count does not have."""
    flat = by_path(params)

    def one(path, p):
        name = _spectral_leaf(key_path(path), flat)
        shape = () if name is None else p.shape if name == "s" else (1, p.shape[1])
        return jnp.zeros(shape, jnp.int32)

    is_var = lambda x: isinstance(x, nnx.Variable)  # noqa: E731
    return jax.tree_util.tree_map_with_path(one, params, is_leaf=is_var)


def scale_by_column_adam(
    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
) -> optax.GradientTransformation:
    """Adam with a step count per active column and singular value (see the module docstring)."""

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return ColumnAdamState(_count_like(params), zeros, jax.tree.map(jnp.zeros_like, params))

    def update(updates, state, params=None):
        del params
        count = jax.tree.map(lambda c: c + 1, state.count)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)

        def step(m, v, c):
            c = c.astype(m.dtype)
            m_hat = m / (1 - jnp.asarray(b1, m.dtype) ** c)
            v_hat = v / (1 - jnp.asarray(b2, m.dtype) ** c)
            return m_hat / (jnp.sqrt(v_hat) + eps)

        # Leaf by leaf: the counts are plain arrays where the updates may be NNX variables
        # (``nnx.split``'s trees); both flatten to the parameters' leaves in the same order.
        m_leaves, treedef = jax.tree.flatten(mu)
        steps = map(step, m_leaves, jax.tree.leaves(nu), jax.tree.leaves(count))
        return jax.tree.unflatten(treedef, list(steps)), ColumnAdamState(count, mu, nu)

    return optax.GradientTransformation(init, update)


def decay_mask(params: Any) -> Any:
    """Weight decay on matrices, except SST's unit-norm singular vectors (``u_active``,
    ``v_active``): a tree of bools shaped like ``params``."""
    return jax.tree_util.tree_map_with_path(
        lambda path, p: p.ndim >= 2 and key_path(path)[-1] not in VECTORS, params
    )


def sst_adamw(
    learning_rate: float | optax.Schedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 1e-4,
    mask: Any = decay_mask,
) -> optax.GradientTransformation:
    """SST's optimizer (Zhao et al., ICML 2025, Algorithm 1), with ``optax.adamw``'s arguments.

    The chain :func:`enhanced_gradient` (Sec. 4.2, Eq. 3), :func:`scale_by_column_adam`,
    decoupled weight decay on ``mask``, the learning rate, :func:`spectral_projection` (``s ≥ 0``,
    unit-norm active columns). It finds every spectral layer
    (:class:`~jaxlab.nn.spectral.Spectral`) by its parameter names and trains every other
    parameter with plain AdamW, so it serves a whole model. ``update`` needs the parameters:
    ``tx.update(grads, state, params)``. Put ``optax.clip_by_global_norm`` in front to clip the raw
    gradients (module docstring).

    Args:
      learning_rate: a number or an optax schedule.
      b1, b2, eps: Adam's.
      weight_decay: the decoupled decay rate (multiplied by the learning rate, as ``optax.adamw``).
      mask: which parameters decay (a tree of bools or a function of the parameters); by default
        :func:`decay_mask`.
    """
    return optax.chain(
        enhanced_gradient(),
        scale_by_column_adam(b1=b1, b2=b2, eps=eps),
        optax.add_decayed_weights(weight_decay, mask=mask),
        optax.scale_by_learning_rate(learning_rate),
        spectral_projection(),
    )


def galore_adamw(
    learning_rate: float | optax.Schedule,
    rank: int,
    update_every: int,
    scale: float,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 1e-4,
    mask: Any = decay_mask,
) -> optax.GradientTransformation:
    """GaLore's optimizer (Zhao et al., ICML 2024, Algorithm 2):
    :func:`~jaxlab.methods.sst.galore.scale_by_galore` (rank ``rank``, projector refreshed every
    ``update_every`` steps, update scale ``scale``), then decoupled weight decay and the learning
    rate, as :func:`sst_adamw`."""
    return optax.chain(
        scale_by_galore(rank, update_every, scale, b1=b1, b2=b2, eps=eps),
        optax.add_decayed_weights(weight_decay, mask=mask),
        optax.scale_by_learning_rate(learning_rate),
    )


def make_method_optimizer(
    cfg: TrainConfig, schedule: optax.Schedule, sst: SSTConfig
) -> optax.GradientTransformation:
    """The optimizer of ``sst.method`` at the loop's recipe: ``cfg``'s gradient clip, then
    :func:`sst_adamw`, :func:`galore_adamw` or ``optax.adamw`` (``full``, ``lora``, ``relora``)
    with ``cfg``'s betas, ε and weight decay on ``schedule``."""
    clip = optax.clip_by_global_norm(cfg.grad_clip) if cfg.grad_clip > 0 else optax.identity()
    adam = dict(b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay)
    if sst.method == "galore":
        inner = galore_adamw(schedule, sst.rank, sst.galore_every, sst.galore_scale, **adam)
    elif sst.method == "sst":
        inner = sst_adamw(schedule, **adam)
    else:
        inner = optax.adamw(schedule, mask=decay_mask, **adam)
    return optax.chain(clip, inner)


def optimizer_state_bytes(tx: optax.GradientTransformation, params: Any) -> int:
    """Bytes of ``tx``'s state for ``params`` (shapes only; nothing is allocated)."""
    state = jax.eval_shape(tx.init, params)
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)))
