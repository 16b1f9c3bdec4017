"""Residual Matrix Transformer (Mak & Flanigan, ICML 2025): a transformer whose residual stream is
an outer-product memory matrix. See ``README.md`` beside this file for what is implemented and the
results measured."""

from jaxlab.methods.rmt.config import RMTConfig
from jaxlab.methods.rmt.model import RMT, retrieve, store

__all__ = ["RMT", "RMTConfig", "retrieve", "store"]
