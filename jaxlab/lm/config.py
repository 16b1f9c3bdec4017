"""The fields every language model's config shares, their checks, and the ``.paper(size)`` pattern.

:class:`LMConfig` is a frozen dataclass that :class:`~jaxlab.lm.transformer.TransformerConfig` and
:class:`~jaxlab.methods.rmt.RMTConfig` (and every other LM config) subclass. String choices are
``Literal``-typed and checked by :func:`jaxlab.core.config.check_choices` when a config is built,
as are the linear-map options (against every shape the model will build through its linear
factory, :meth:`LMConfig.linear_shapes`), so a bad ``--set model.xxx=`` fails before any tracing.
A config also knows its model's cost: :meth:`LMConfig.flops_per_token` (as levanter's configs do),
so no experiment keeps a FLOP table. The loss (z-loss included) is not the model's: it lives with
the task
(:class:`jaxlab.lm.task.LMTask`) and the experiment configs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import jax

from jaxlab.core.config import check, check_choices
from jaxlab.core.errors import ConfigError
from jaxlab.core.flops import FlopCount
from jaxlab.nn.attention import AttentionImpl
from jaxlab.nn.attention_kinds import (
    AttentionKindName,
    LogitScaleName,
    MLRNormalizeName,
    attention_mix_flops,
    check_attention_kind,
)
from jaxlab.nn.init import InitName
from jaxlab.nn.linear import LinearName, LinearSpec, MatmulImplName

__all__ = ["AlibiName", "AttentionImplName", "DType", "LMConfig", "NormName", "PositionsName"]

AttentionImplName = Literal[tuple(i.value for i in AttentionImpl)]  # type: ignore[valid-type]
NormName = Literal["layernorm", "rmsnorm"]
PositionsName = Literal["learned", "alibi"]
AlibiName = Literal["press", "geometric"]
# float64 is for tests against float64 references (needs 64-bit JAX: ``JAX_ENABLE_X64=1`` in the
# environment, or ``jax.config.update("jax_enable_x64", True)``); models that accept it say so.
DType = Literal["float32", "bfloat16", "float64"]

# What every ``.paper(size)`` preset shares: the RMT paper's GPT-2 vocabulary and context (Table 2).
PAPER_COMMON = {"vocab_size": 50257, "seq_len": 512}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMConfig:
    """Shape and options common to jaxlab's language models.

    Attributes:
      vocab_size, seq_len, num_layers: vocabulary, longest row, depth.
      d_ff: MLP hidden width (a subclass says what 0 means, if anything).
      norm, positions: normalisation and position encoding (``learned`` absolute or ALiBi).
      alibi: ALiBi head slopes (:func:`jaxlab.nn.attention.alibi_slopes`): ``"press"`` (Press et
        al.'s recipe) or ``"geometric"`` (the RMT authors' code); equal for powers of two.
      layer_scaled_logits: attention logits divided by (layer index + 1) before the ALiBi bias
        (RMT paper Sec. 4.3; the authors' code does it in both of their models).
      init: the initialisation rule of every matrix (:mod:`jaxlab.nn.init`).
      document_mask: attend only within a document of a packed row.
      attention_impl: :class:`jaxlab.nn.attention.AttentionImpl` value.
      matmul_impl: backend of the dense maps' products (:class:`jaxlab.nn.linear.MatmulImpl`).
      linear: kind of the linear maps the model builds through its factory (MLP, and the
        attention projections where the model has them; :class:`jaxlab.nn.linear.LinearKind`).
      linear_rank, linear_btt_rank, linear_mlr_ranks: options of ``low_rank``, ``btt``, ``mlr``.
      dtype, param_dtype: compute and parameter dtypes.
      attention: the attention kind (:class:`jaxlab.nn.attention_kinds.AttentionKind`): ``mha``
        (default), ``swa``, ``gswa`` or ``mlr``; checked against :meth:`attention_shape`.
      attention_window: ``swa``/``gswa``: earlier positions a query sees besides itself.
      attention_ranks, attention_normalize: ``mlr``'s rank per level (level 0 first, summing to
        the head dim) and normalisation (``none``, ``levels``, ``block_levels``).
      qk_norm: a LayerNorm (no bias) over each head's queries and keys before the logits, shared by
        the heads, as the ``do_qk_ln`` of Kuang et al.'s code (their default; off here).
      logit_scale: ``"sqrt"`` (``1/sqrt(head dim)``, default) or ``"mup"`` (the authors' ``8/d``;
        per kind: :func:`jaxlab.nn.attention_kinds.logit_scale`).

    A subclass adds its own fields, their checks in :meth:`check_fields`, the shapes of its linear
    maps in :meth:`linear_shapes`, the FLOPs of its matrices in :meth:`matrix_flops` (and of its
    token mixing in :meth:`mixing_flops` when that is not attention), and its preset table
    :attr:`PAPER`.
    """

    # Presets of ``.paper(size)``: size -> field values (with PAPER_COMMON), set by subclasses.
    PAPER: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    FAMILY: ClassVar[str] = "LM"  # the model's name in messages

    vocab_size: int = 256
    seq_len: int = 256
    num_layers: int = 4
    d_ff: int = 0
    norm: NormName = "layernorm"
    positions: PositionsName = "learned"
    alibi: AlibiName = "press"
    layer_scaled_logits: bool = False
    init: InitName = "gpt2"
    document_mask: bool = True
    attention_impl: AttentionImplName = "auto"
    matmul_impl: MatmulImplName = "auto"
    linear: LinearName = "dense"
    linear_rank: int = 0
    linear_btt_rank: int = 1
    linear_mlr_ranks: tuple[int, ...] = ()
    dtype: DType = "float32"
    param_dtype: DType = "float32"
    attention: AttentionKindName = "mha"
    attention_window: int = 0
    attention_ranks: tuple[int, ...] = ()
    attention_normalize: MLRNormalizeName = "block_levels"
    qk_norm: bool = False
    logit_scale: LogitScaleName = "sqrt"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "num_layers"):
            value = getattr(self, name)
            check(value > 0, f"model.{name} must be positive, got {value}")
        check_choices(self, "model.")
        check(
            "float64" not in (self.dtype, self.param_dtype) or jax.config.jax_enable_x64,
            "model.dtype/param_dtype=float64 needs 64-bit JAX, which is off: start the command "
            'with JAX_ENABLE_X64=1 (from your own code: jax.config.update("jax_enable_x64", '
            "True) before building the config)",
        )
        self.check_fields()
        self._check_linear()
        self._check_attention()

    def check_fields(self) -> None:
        """The subclass's own checks (override; raise ConfigError); they run before the linear
        options are checked against :meth:`linear_shapes`, which may rely on them."""

    def _check_linear(self) -> None:
        spec = self.linear_factory()
        for d_in, d_out in self.linear_shapes():
            try:
                spec.check(d_in, d_out)
            except ConfigError as err:
                # The structured kinds' messages start with the option, e.g. "rank=0 must ...".
                raise ConfigError(f"model.linear={self.linear!r}: model.linear_{err}") from None

    def attention_shape(self) -> tuple[int, int, int] | None:
        """``(head dim, query heads, kv heads)`` of the model's attention, against which the
        attention kind is checked; ``None`` for a model whose attention has no kinds."""
        return None

    def _check_attention(self) -> None:
        shape = self.attention_shape()
        if shape is None:
            check(self.attention == "mha", f"{self.FAMILY} has no attention kinds; keep mha")
            check(
                not self.qk_norm and self.logit_scale == "sqrt",
                f"{self.FAMILY} has no dot-product attention; keep qk_norm=False, logit_scale=sqrt",
            )
            return
        check_attention_kind(
            self.attention,
            window=self.attention_window,
            ranks=self.attention_ranks,
            normalize=self.attention_normalize,
            head_dim=shape[0],
            num_heads=shape[1],
            kv_heads=shape[2],
            seq_len=self.seq_len,
        )

    def linear_shapes(self) -> tuple[tuple[int, int], ...]:
        """``(d_in, d_out)`` of every map the model builds through :meth:`linear_factory`."""
        return ()

    def linear_factory(self) -> LinearSpec:
        """The linear factory the model's builder passes to its layers."""
        return LinearSpec(
            kind=self.linear,
            rank=self.linear_rank,
            btt_rank=self.linear_btt_rank,
            mlr_ranks=self.linear_mlr_ranks,
            matmul_impl=self.matmul_impl,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
        )

    # ------------------------------------------------------------------ accounting

    def flops_per_token(
        self, *, seq_len: int | None = None, include_vocab: bool = True, causal: bool = False
    ) -> FlopCount:
        """Forward FLOPs per token of the model, split by part (``.train`` is 3x the forward).

        Args:
          seq_len: context length for the token-mixing terms (default ``seq_len``).
          include_vocab: count the vocabulary terms (the unembedding matmul, and what else the
            model does per token outside its layers); ``False`` is how several papers quote model
            FLOPs (the RMT paper's Tables 3-4, for example).
          causal: count the token mixing over the pairs each causal query really scores, averaged
            over a row; the default is Kaplan et al.'s full-context convention (every query over
            the keys of the full context). See
            :func:`jaxlab.nn.attention_kinds.attention_mix_flops`.
        """
        T = seq_len or self.seq_len
        proj, mlp, vocab = self.matrix_flops()
        L = self.num_layers
        mix = self.mixing_flops(T, causal=causal)
        return FlopCount(L * proj, L * mix, L * mlp, vocab if include_vocab else 0.0)

    def matrix_flops(self) -> tuple[float, float, float]:
        """Forward FLOPs per token of one layer's attention-side matrices (projections, or what
        replaces them), one layer's MLP, and the vocabulary terms (override)."""
        raise NotImplementedError(f"{type(self).__name__} does not count its FLOPs")

    def mixing_flops(self, seq_len: int, *, causal: bool) -> float:
        """Forward FLOPs per token of one layer's token mixing: the attention kind's logits and
        value sums over :meth:`attention_shape`'s query heads (a model without attention kinds
        overrides this)."""
        shape = self.attention_shape()
        if shape is None:
            raise NotImplementedError(f"{type(self).__name__} does not count its token mixing")
        head_dim, heads, _ = shape
        return attention_mix_flops(
            self.attention,
            seq_len=seq_len,
            num_heads=heads,
            head_dim=head_dim,
            causal=causal,
            window=self.attention_window,
            ranks=self.attention_ranks,
        )

    @classmethod
    def paper(cls, size: str, **overrides):
        """A preset from the class's :attr:`PAPER` table, with ``overrides`` on top."""
        key = size.lower()
        if key not in cls.PAPER:
            raise ConfigError(
                f"unknown {cls.FAMILY} preset {size!r}; choose from {list(cls.PAPER)}"
            )
        return cls(**{**PAPER_COMMON, **cls.PAPER[key], **overrides})
