"""µP per-parameter learning rates for the RMT (and any NNX LM), as optax parameter groups.

Maximal-update parametrisation for Adam (Yang et al. 2022, "Tensor Programs V", Table 3): as the
width grows from a tuned base model, matrix-like parameters whose fan-in grows (hidden and output
weights: the RMT's storage/retrieval keys, the MLP, the unembedding) get a learning rate scaled by
``base_fan_in / fan_in``; vector-like parameters (norm scales) and the input embeddings keep the
base rate. The fan-in of a parameter is its second-to-last dimension (jaxlab kernels are
``(in, out)``; the RMT's ``(3, Dk, R)`` q/k/v keys read over Dk). The authors' code also rescales
initialisations and output multipliers; here the learning rates follow µP, and the attention
logits take the authors' ``sqrt(base Dv) / Dv`` (``RMTConfig.mup_logits``; the init stays as in
``model.py``).

Use: ``run_training(..., lr_groups=mup_lr_groups(cfg, base_cfg))``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
from flax import nnx

from jaxlab.core.optim import lr_groups_from_multipliers, param_path
from jaxlab.methods.rmt.config import RMTConfig

__all__ = ["base_config", "mup_lr_groups", "mup_multipliers"]

_INPUT_NAMES = ("embed",)  # token/position tables: Theta(1) learning rate


def _param_shapes(build: Callable[[], nnx.Module]) -> dict[tuple[str, ...], tuple[int, ...]]:
    state = nnx.state(nnx.eval_shape(build), nnx.Param)
    return {param_path(p): leaf.shape for p, leaf in jax.tree_util.tree_leaves_with_path(state)}


def base_config(cfg: RMTConfig) -> RMTConfig:
    """The base (tuned) model of ``cfg``'s µP family: its ``mup_base_*`` fields, 0 meaning same."""
    return dataclasses.replace(
        cfg,
        rank=cfg.mup_base_rank or cfg.rank,
        d_key=cfg.mup_base_d_key or cfg.d_key,
        d_value=cfg.mup_base_d_value or cfg.d_value,
        d_ff=cfg.mup_base_d_ff or cfg.d_ff,
    )


def mup_multipliers(
    build: Callable[[], nnx.Module], build_base: Callable[[], nnx.Module]
) -> dict[tuple[str, ...], float]:
    """Learning-rate multiplier of every parameter path of ``build()`` against ``build_base()``."""
    shapes, base = _param_shapes(build), _param_shapes(build_base)
    out = {}
    for path, shape in shapes.items():
        is_input = any(name in _INPUT_NAMES for name in path) and "unembed" not in path
        if len(shape) < 2 or is_input:
            out[path] = 1.0
        else:
            out[path] = base[path][-2] / shape[-2]
    return out


def mup_lr_groups(cfg: RMTConfig) -> tuple[Callable[[Any], Any], Mapping[str, float]]:
    """``(labels, multipliers)`` for :func:`jaxlab.core.optim.make_optimizer` from ``cfg``."""
    from jaxlab.methods.rmt.model import RMT

    table = mup_multipliers(
        lambda: RMT(cfg, rngs=nnx.Rngs(0)), lambda: RMT(base_config(cfg), rngs=nnx.Rngs(0))
    )
    return lr_groups_from_multipliers(table)
