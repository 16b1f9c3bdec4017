"""Structured attention (Kuang et al., "Customizing the Inductive Biases of Softmax Attention using
Structured Matrices", ICML 2025): bilinear BTT and MLR scoring functions, and MLR attention along
the sequence. See ``README.md`` beside this file for what is implemented and the results measured.

MLR attention itself and the other attention kinds live in :mod:`jaxlab.nn` (the Transformer and
the RMT both take them as a config choice, and a method never imports another method); they are
re-exported here.
"""

from jaxlab.methods.structured_attention.scoring import (
    BilinearBTTScore,
    BilinearMLRScore,
    DotProductScore,
)
from jaxlab.nn.attention_kinds import AttentionKind, attend
from jaxlab.nn.mlr_attention import mlr_attention, mlr_attention_reference, mlr_qk_flop_ratio

__all__ = [
    "AttentionKind",
    "BilinearBTTScore",
    "BilinearMLRScore",
    "DotProductScore",
    "attend",
    "mlr_attention",
    "mlr_attention_reference",
    "mlr_qk_flop_ratio",
]
