"""Configuration of the Residual Matrix Transformer and the paper's scaling presets.

Mak & Flanigan, "Residual Matrix Transformers: Scaling the Size of the Residual Stream", ICML 2025.
``RMTConfig.paper(size)`` gives the four RMT sizes of the paper's scaling series (Table 2;
V = 50257, N = 512, untied unembedding, no biases), matched against ``TransformerConfig.paper``
49M / 160M / 260M / 405M. The paper and the authors' code
(github.com/bmac3/residual-matrix-transformer) differ in four places; each is a field here:

* ``norm``: the paper writes LayerNorm over the Dk x Dv matrix, the code uses RMSNorm. Default
  ``"rmsnorm"`` (the code, which produced the paper's numbers).
* ``positions``: the paper describes learned absolute positions, the code uses ALiBi with head
  slopes ``geomspace(2^(-8/R), 2^(-8))``. Default ``"alibi"`` with ``alibi="geometric"`` (the
  code; equal to Press et al.'s slopes when R is a power of two).
* ``init``: the paper's variance analysis (Table 1) gives storage keys variance 1/R and retrieval
  keys 1/Dk; the code draws every hidden matrix with variance 0.02²/fan_in and a zero unembedding
  (µP's table 8). Default ``"fan_in"`` (the paper's analysis, applied to every matrix; the code's
  rule is ``"authors"``, see :mod:`jaxlab.nn.init`).
* ``query_zero_init``: the code sets out to zero-initialise the query read keys (µP, Yang et al.
  2021, App. D.2) but discards the result (``Linear.set`` returns a new module), so the code's
  models trained with random query keys. Default ``False`` (what was actually trained).

With ``mup`` and a smaller base model (``mup_base_*``), the code also scales the attention logits
by ``attn_multiplier * sqrt(base Dv) / Dv`` (``SHA.mup_scaling`` in ``src/models/rmt/attention.py``,
``attn_multiplier`` 1: µP's 1/d logits, equal to ``1/sqrt(Dv)`` at the base width). ``mup_logits``
(default ``True``) follows it; ``False`` keeps ``1/sqrt(Dv)`` at every width, µP then on the
learning rates only (:mod:`jaxlab.methods.rmt.mup`).
"""

from __future__ import annotations

import dataclasses

from jaxlab.core.config import check
from jaxlab.lm.config import AlibiName, LMConfig, NormName, PositionsName
from jaxlab.nn.init import InitName

__all__ = ["RMTConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RMTConfig(LMConfig):
    """Shape and options of :class:`jaxlab.methods.rmt.RMT` (common fields:
    :class:`~jaxlab.lm.config.LMConfig`).

    ``rank`` R is both the number of attention heads and of FF read/write slots; ``d_value`` Dv is
    the head dimension; the core width (what the MLP and the embeddings see) is ``R * Dv``; the
    residual stream of each token is a ``d_key x d_value`` matrix. ``linear`` applies to the MLP
    only: the storage and retrieval keys that replace W_Q, W_K, W_V and W_O are the method itself.
    ``attention`` picks the attention kind of the R heads of size Dv
    (:mod:`jaxlab.nn.attention_kinds`; ``mlr``'s ranks sum to ``d_value``).
    """

    # size: fields — paper, Table 2
    PAPER = {
        "46m": dict(rank=12, d_key=32, d_value=32, num_layers=6, d_ff=1536),
        "134m": dict(rank=12, d_key=32, d_value=64, num_layers=12, d_ff=3072),
        "206m": dict(rank=14, d_key=48, d_value=64, num_layers=18, d_ff=3584),
        "305m": dict(rank=16, d_key=64, d_value=64, num_layers=24, d_ff=4096),
    }
    FAMILY = "RMT"

    d_ff: int = 512
    norm: NormName = "rmsnorm"
    positions: PositionsName = "alibi"
    alibi: AlibiName = "geometric"
    init: InitName = "fan_in"
    rank: int = 4
    d_key: int = 16
    d_value: int = 32
    query_zero_init: bool = False
    layer_scaled_logits: bool = True  # logits / (layer index + 1), fp32 (paper Sec. 4.3; code)
    # µP learning rates (jaxlab.methods.rmt.mup) relative to a base model with these dims (0: own).
    mup: bool = False
    mup_base_rank: int = 0
    mup_base_d_key: int = 0
    mup_base_d_value: int = 0
    mup_base_d_ff: int = 0
    # With mup and a base d_value, the attention logits take the authors' µP factor
    # sqrt(base Dv) / Dv (their SHA.mup_scaling, attn_multiplier 1) instead of 1/sqrt(Dv).
    mup_logits: bool = True

    def check_fields(self) -> None:
        for name in ("rank", "d_key", "d_value", "d_ff"):
            check(
                getattr(self, name) > 0, f"model.{name} must be positive, got {getattr(self, name)}"
            )

    @property
    def width(self) -> int:
        """Core width R * Dv: the MLP's input/output size and the embedding size."""
        return self.rank * self.d_value

    @property
    def residual_size(self) -> int:
        """Entries of one token's residual stream, Dk * Dv."""
        return self.d_key * self.d_value

    def attention_shape(self) -> tuple[int, int, int]:
        return self.d_value, self.rank, self.rank

    def linear_shapes(self) -> tuple[tuple[int, int], ...]:
        return ((self.width, self.d_ff), (self.d_ff, self.width))

    def matrix_flops(self) -> tuple[float, float, float]:
        """Per token (paper Table 7's accounting; the mixing is the attention kind's over R heads of
        size Dv, ``4 T R Dv`` for MHA):

        * attention storage/retrieval: q, k, v retrievals and the output storage are each one
          contraction of ``R`` keys with the ``Dk x Dv`` matrix, ``2 R Dk Dv`` FLOPs, so
          ``8 R Dk Dv`` in all — this replaces the transformer's ``8 D^2`` for W_Q, W_K, W_V, W_O;
        * feed-forward: ``4 (R Dv) d_ff`` for the MLP when dense (a structured MLP as its
          shapes cost, :meth:`jaxlab.nn.linear.LinearSpec.flops`) plus ``4 R Dk Dv`` for its
          retrieval and storage;
        * vocabulary: the unembedding ``2 (R Dv) V`` plus the embedding storage and the final
          retrieval, ``4 R Dk Dv``.
        """
        rw = 2 * self.rank * self.d_key * self.d_value  # one storage or retrieval of R vectors
        f = self.linear_factory().flops  # the MLP's maps as the factory builds them
        ff = f(self.width, self.d_ff) + f(self.d_ff, self.width) + 2 * rw
        return 4 * rw, ff, 2 * self.width * self.vocab_size + 2 * rw
