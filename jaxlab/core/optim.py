"""The optax optimizer the shared loop builds from a :class:`~jaxlab.core.config.TrainConfig`.

AdamW (decoupled weight decay, Loshchilov & Hutter 2019) after global-norm gradient clipping, with
linear warmup then cosine decay. Weight decay is masked to parameters of rank >= 2 (matrices and
embeddings), the usual choice for transformers: norm scales and biases are not decayed. A method can
pass its own ``decay_mask`` or per-parameter learning rates (``lr_groups``, an
``optax.multi_transform`` over labels; µP rates are built with :func:`lr_groups_from_multipliers`
from a table of multipliers keyed by :func:`param_path`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import optax

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError

__all__ = [
    "default_decay_mask",
    "lr_groups_from_multipliers",
    "make_optimizer",
    "make_schedule",
    "param_path",
]

LrGroups = tuple[Callable[[Any], Any], Mapping[str, float]]


def param_path(path) -> tuple[str, ...]:
    """Parameter names along a pytree path; a trailing ``value`` (the Variable's leaf) is dropped,
    so the paths of an ``nnx.State`` and of the raw arrays the optimizer sees agree."""
    names = tuple(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)
    return names[:-1] if names and names[-1] == "value" else names


def lr_groups_from_multipliers(table: Mapping[tuple[str, ...], float]) -> LrGroups:
    """``(labels, multipliers)`` for :func:`make_optimizer` from a learning-rate multiplier per
    parameter path (:func:`param_path`): one group per distinct multiplier, named ``lr_x<m>``.
    A parameter whose path is not in ``table`` raises ``KeyError`` when the labels are built."""
    names = {path: f"lr_x{m:.6g}" for path, m in table.items()}

    def labels(params: Any) -> Any:
        return jax.tree_util.tree_map_with_path(lambda p, _: names[param_path(p)], params)

    return labels, {name: float(name.removeprefix("lr_x")) for name in names.values()}


def make_schedule(cfg: TrainConfig, length: int | None = None) -> optax.Schedule:
    """Linear warmup from 0 to ``learning_rate`` then cosine decay to ``min_lr_ratio`` of it.

    Args:
      cfg: the loop's fields.
      length: steps over which the schedule runs (default ``cfg.steps``); later steps stay at the
        final rate. The loop passes the length of the run that started a resumed run, so that
        raising ``train.steps`` extends a run without stretching its schedule.

    Raises:
      ConfigError: ``cfg.warmup_steps`` is above ``length`` (a warmup equal to it peaks at the
        schedule's last step).
    """
    length = cfg.steps if length is None else length
    if cfg.warmup_steps > length:
        raise ConfigError(
            f"train.warmup_steps={cfg.warmup_steps} is above the {length} steps of this run's "
            "learning-rate schedule (a resumed run keeps the schedule length of the run that "
            f"started it, whatever train.steps says); set train.warmup_steps <= {length}"
        )
    # optax's cosine part needs a step: a warmup as long as the schedule peaks at its last step.
    warmup = min(cfg.warmup_steps, length - 1)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.learning_rate,
        warmup_steps=warmup,
        decay_steps=length,
        end_value=cfg.learning_rate * cfg.min_lr_ratio,
    )


def default_decay_mask(params: Any) -> Any:
    """True for parameters with two or more dimensions (weight matrices, embeddings)."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(
    cfg: TrainConfig,
    decay_mask: Callable[[Any], Any] | None = default_decay_mask,
    *,
    lr_groups: LrGroups | None = None,
    schedule: optax.Schedule | None = None,
) -> optax.GradientTransformation:
    """Global-norm clipping then AdamW with the warmup+cosine schedule of ``cfg``.

    The chain has the same state structure whether clipping is on or off (``grad_clip=0`` puts an
    identity in its place), so ``train.grad_clip`` may change when a run is resumed.

    Args:
      cfg: the loop's fields.
      decay_mask: which parameters get weight decay.
      lr_groups: optional per-parameter learning rates, ``(labels, multipliers)``: ``labels`` maps
        the parameter tree to a tree of group names, ``multipliers`` maps each name to the factor on
        the schedule (e.g. µP's 1/width for hidden matrices). Built with ``optax.multi_transform``;
        each group has its own AdamW with the scaled schedule.
      schedule: the learning-rate schedule (default :func:`make_schedule` of ``cfg``).
    """
    schedule = schedule or make_schedule(cfg)

    def adamw(multiplier: float) -> optax.GradientTransformation:
        return optax.adamw(
            (lambda step: schedule(step) * multiplier) if multiplier != 1.0 else schedule,
            b1=cfg.b1,
            b2=cfg.b2,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            mask=decay_mask,
        )

    chain = [optax.clip_by_global_norm(cfg.grad_clip) if cfg.grad_clip > 0 else optax.identity()]
    if lr_groups is None:
        chain.append(adamw(1.0))
    else:
        labels, multipliers = lr_groups
        chain.append(optax.multi_transform({k: adamw(v) for k, v in multipliers.items()}, labels))
    return optax.chain(*chain)
