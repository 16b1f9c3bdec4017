"""The optax optimizer the shared loop builds from a :class:`~jaxlab.core.config.TrainConfig`.

AdamW (decoupled weight decay, Loshchilov & Hutter 2019) after global-norm gradient clipping, with
linear warmup then cosine decay. Weight decay is masked to parameters of rank >= 2 (matrices and
embeddings), the usual choice for transformers: norm scales and biases are not decayed. A method can
pass its own ``decay_mask`` or wrap the result (e.g. µP per-parameter rates via
``optax.multi_transform``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from jaxlab.core.config import TrainConfig

__all__ = ["default_decay_mask", "make_optimizer", "make_schedule"]


def make_schedule(cfg: TrainConfig) -> optax.Schedule:
    """Linear warmup from 0 to ``learning_rate`` then cosine decay to ``min_lr_ratio`` of it."""
    warmup = min(cfg.warmup_steps, cfg.steps - 1)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.learning_rate,
        warmup_steps=warmup,
        decay_steps=cfg.steps,
        end_value=cfg.learning_rate * cfg.min_lr_ratio,
    )


def default_decay_mask(params: Any) -> Any:
    """True for parameters with two or more dimensions (weight matrices, embeddings)."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(
    cfg: TrainConfig, decay_mask: Callable[[Any], Any] | None = default_decay_mask
) -> optax.GradientTransformation:
    """Global-norm clipping then AdamW with the warmup+cosine schedule of ``cfg``."""
    chain = []
    if cfg.grad_clip > 0:
        chain.append(optax.clip_by_global_norm(cfg.grad_clip))
    chain.append(
        optax.adamw(
            make_schedule(cfg),
            b1=cfg.b1,
            b2=cfg.b2,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            mask=decay_mask,
        )
    )
    return optax.chain(*chain)
