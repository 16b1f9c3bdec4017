"""Sparse Spectral Training (Zhao, Zhang, Li, Liu & Cannistraci, ICML 2025) and its low-rank
baselines (LoRA, ReLoRA*, GaLore): optax optimizers and hooks usable from any training loop, and
their wrappers for the shared loop (:class:`LowRankTask`). See ``README.md`` beside this file for
how to use them, what is implemented and the results measured."""

from jaxlab.methods.sst.config import METHODS, SSTConfig
from jaxlab.methods.sst.convert import linear_layers, merge_dense, to_lora, to_spectral
from jaxlab.methods.sst.galore import scale_by_galore
from jaxlab.methods.sst.hooks import jagged_schedule, redraw, relora_hook, relora_merge, sst_hook
from jaxlab.methods.sst.lora import LoRA
from jaxlab.methods.sst.optim import (
    decay_mask,
    enhanced_gradient,
    galore_adamw,
    make_method_optimizer,
    scale_by_column_adam,
    spectral_projection,
    sst_adamw,
)
from jaxlab.methods.sst.sampling import Sampling, sample_active, sampling_probs
from jaxlab.methods.sst.task import LowRankTask

__all__ = [
    "METHODS",
    "LoRA",
    "LowRankTask",
    "SSTConfig",
    "Sampling",
    "decay_mask",
    "enhanced_gradient",
    "galore_adamw",
    "jagged_schedule",
    "linear_layers",
    "make_method_optimizer",
    "merge_dense",
    "redraw",
    "relora_hook",
    "relora_merge",
    "sample_active",
    "sampling_probs",
    "scale_by_column_adam",
    "scale_by_galore",
    "spectral_projection",
    "sst_adamw",
    "sst_hook",
    "to_lora",
    "to_spectral",
]
