"""Sparse Spectral Training (Zhao, Zhang, Li, Liu & Cannistraci, ICML 2025) and its low-rank
baselines (LoRA, ReLoRA*, GaLore) on the shared loop. See ``README.md`` beside this file for what is
implemented and the results measured."""

from jaxlab.methods.sst.config import METHODS, SSTConfig
from jaxlab.methods.sst.convert import linear_layers, merge_dense, to_lora, to_spectral
from jaxlab.methods.sst.galore import scale_by_galore
from jaxlab.methods.sst.hooks import jagged_schedule, redraw, relora_merge, sst_hook
from jaxlab.methods.sst.lora import LoRA
from jaxlab.methods.sst.optim import enhanced_gradient, make_method_optimizer, spectral_projection
from jaxlab.methods.sst.sampling import Sampling, sample_active, sampling_probs
from jaxlab.methods.sst.task import LowRankTask

__all__ = [
    "METHODS",
    "LoRA",
    "LowRankTask",
    "SSTConfig",
    "Sampling",
    "enhanced_gradient",
    "jagged_schedule",
    "linear_layers",
    "make_method_optimizer",
    "merge_dense",
    "redraw",
    "relora_merge",
    "sample_active",
    "sampling_probs",
    "scale_by_galore",
    "spectral_projection",
    "sst_hook",
    "to_lora",
    "to_spectral",
]
