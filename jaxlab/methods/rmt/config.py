"""Configuration of the Residual Matrix Transformer and the paper's scaling presets.

Mak & Flanigan, "Residual Matrix Transformers: Scaling the Size of the Residual Stream", ICML 2025.
``RMTConfig.paper(size)`` gives the four RMT sizes of the paper's scaling series (Table 2;
V = 50257, N = 512, untied unembedding, no biases), matched against ``TransformerConfig.paper``
49M / 160M / 260M / 405M. The paper and the authors' code
(github.com/bmac3/residual-matrix-transformer) differ in three places; each is a field here:

* ``norm``: the paper writes LayerNorm over the Dk x Dv matrix, the code uses RMSNorm. Default
  ``"rmsnorm"`` (the code, which produced the paper's numbers).
* ``positions``: the paper describes learned absolute positions, the code uses ALiBi with head
  slopes 2^(-8h/R). Default ``"alibi"`` (the code).
* ``query_zero_init``: the code sets out to zero-initialise the query read keys (µP, Yang et al.
  2021, App. D.2) but discards the result (``Linear.set`` returns a new module), so the code's
  models trained with random query keys. Default ``False`` (what was actually trained).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxlab.core.config import check
from jaxlab.core.errors import ConfigError

__all__ = ["RMTConfig"]

_PAPER = {  # size: (rank R, d_key Dk, d_value Dv, layers L, d_ff) — paper, Table 2
    "46m": (12, 32, 32, 6, 1536),
    "134m": (12, 32, 64, 12, 3072),
    "206m": (14, 48, 64, 18, 3584),
    "305m": (16, 64, 64, 24, 4096),
}


@dataclasses.dataclass(frozen=True)
class RMTConfig:
    """Shape and options of :class:`jaxlab.methods.rmt.RMT`.

    ``rank`` R is both the number of attention heads and of FF read/write slots; ``d_value`` Dv is
    the head dimension; the core width (what the MLP and the embeddings see) is ``R * Dv``; the
    residual stream of each token is a ``d_key x d_value`` matrix.
    """

    vocab_size: int = 256
    seq_len: int = 256
    num_layers: int = 4
    rank: int = 4
    d_key: int = 16
    d_value: int = 32
    d_ff: int = 512
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    positions: Literal["alibi", "learned"] = "alibi"
    query_zero_init: bool = False
    layer_scaled_logits: bool = True  # logits / (layer index + 1), fp32 (paper Sec. 4.3; code)
    z_loss: float = 1e-4
    # µP learning rates (jaxlab.methods.rmt.mup) relative to a base model with these dims (0: own).
    mup: bool = False
    mup_base_rank: int = 0
    mup_base_d_key: int = 0
    mup_base_d_value: int = 0
    mup_base_d_ff: int = 0
    document_mask: bool = True
    attention_impl: str = "auto"
    matmul_impl: Literal["auto", "xla", "pallas"] = "auto"  # the MLP's two products
    dtype: Literal["float32", "bfloat16"] = "float32"
    param_dtype: Literal["float32", "bfloat16"] = "float32"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "num_layers", "rank", "d_key", "d_value", "d_ff"):
            check(
                getattr(self, name) > 0, f"model.{name} must be positive, got {getattr(self, name)}"
            )
        check(self.z_loss >= 0, "model.z_loss must be >= 0")
        check(
            self.matmul_impl in ("auto", "xla", "pallas"),
            f"model.matmul_impl must be 'auto', 'xla' or 'pallas', got {self.matmul_impl!r}",
        )

    @property
    def width(self) -> int:
        """Core width R * Dv: the MLP's input/output size and the embedding size."""
        return self.rank * self.d_value

    @property
    def residual_size(self) -> int:
        """Entries of one token's residual stream, Dk * Dv."""
        return self.d_key * self.d_value

    @classmethod
    def paper(cls, size: str, **overrides) -> RMTConfig:
        """The paper's presets: ``"46m"``, ``"134m"``, ``"206m"``, ``"305m"`` (Table 2)."""
        key = size.lower()
        if key not in _PAPER:
            raise ConfigError(f"unknown RMT preset {size!r}; choose from {list(_PAPER)}")
        rank, d_key, d_value, layers, d_ff = _PAPER[key]
        base = dict(
            vocab_size=50257,
            seq_len=512,
            num_layers=layers,
            rank=rank,
            d_key=d_key,
            d_value=d_value,
            d_ff=d_ff,
        )
        return cls(**{**base, **overrides})
