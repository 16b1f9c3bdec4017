"""Initialisation rules shared by jaxlab's language models: one rule, applied to every matrix.

A comparison of two architectures should initialise both by the same rule, so the rule is a field
of :class:`~jaxlab.lm.config.LMConfig` (``init``) and every model asks this module for the
standard deviation of each matrix from its fan-in and its role. Three rules:

* ``"gpt2"`` — every matrix N(0, 0.02²) (Radford et al. 2019);
* ``"fan_in"`` — every hidden matrix N(0, 1/fan_in), which preserves the forward variance of a
  product with unit-variance inputs (LeCun et al. 1998; for the RMT's storage and retrieval keys
  this is the paper's variance analysis, Mak & Flanigan 2025, Table 1: storing R vectors scales the
  variance by ``R s²``, retrieving with Dk-dimensional keys by ``Dk s²``);
* ``"authors"`` — the RMT authors' code for both of their models (github.com/bmac3/
  residual-matrix-transformer, ``src/nn/param/param.py``, "table 8 from mup paper"): hidden
  matrices N(0, 0.02²/fan_in), the unembedding zero (``output_zero_init``).

In every rule the last matrix of each residual branch (a transformer's attention output and MLP
down projection; the RMT's attention and feed-forward storage keys) is further scaled by
``1/sqrt(2L)`` (GPT-2, Sec. 2.3; the authors' code does the same), and the token and position
embeddings are N(0, 0.02²). Under ``gpt2`` and ``fan_in`` the unembedding is N(0, 0.02²).
"""

from __future__ import annotations

import math
from typing import Literal

from jaxlab.core.errors import ConfigError

__all__ = ["EMBEDDING_STD", "InitName", "unembedding_std", "weight_std"]

InitName = Literal["gpt2", "fan_in", "authors"]
EMBEDDING_STD = 0.02
_GPT2_STD = 0.02


def weight_std(rule: str, fan_in: int, *, residual_layers: int | None = None) -> float:
    """Standard deviation of a hidden matrix with ``fan_in`` inputs under ``rule``.

    Args:
      rule: ``"gpt2"``, ``"fan_in"`` or ``"authors"``.
      fan_in: the number of inputs each output sums over (for the RMT's retrieval keys Dk, for its
        storage keys R).
      residual_layers: the model's depth L when the matrix is the last of a residual branch: the
        standard deviation is then divided by ``sqrt(2L)``.
    """
    if fan_in < 1:
        raise ConfigError(f"fan_in must be positive, got {fan_in}")
    if rule == "gpt2":
        std = _GPT2_STD
    elif rule == "fan_in":
        std = fan_in**-0.5
    elif rule == "authors":
        std = _GPT2_STD * fan_in**-0.5
    else:
        raise ConfigError(f"unknown init rule {rule!r}; choose 'gpt2', 'fan_in' or 'authors'")
    return std / math.sqrt(2 * residual_layers) if residual_layers else std


def unembedding_std(rule: str) -> float:
    """Standard deviation of the unembedding (output) matrix: 0 under ``"authors"``."""
    weight_std(rule, 1)  # validates the rule
    return 0.0 if rule == "authors" else _GPT2_STD
