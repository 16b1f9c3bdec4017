"""Configuration of the xLSTM 7B language model and its presets.

Beck et al., "xLSTM 7B: A Recurrent LLM for Fast and Efficient Inference", ICML 2025, Sec. 3,
and the released model: E = 4096, 32 blocks, 8 heads, qk head dim 256 (``qk_dim_factor`` 0.5),
v head dim 512 (``v_dim_factor`` 1), SwiGLU width ``round_up(2.667 E, 64) = 10944``, vocabulary
50304, untied embeddings, gates soft-capped at 15 and output logits at 30, input-gate bias -10
and forget-gate biases linspace(3, 6) over heads. ``xLSTMConfig.xlstm_7b()`` is that model
(6,865,424,896 parameters); :meth:`xLSTMConfig.tiny` a CPU-sized one. Where the authors' code
(NX-AI/xlstm, ``xlstm_large``) and this one differ, the field says so:

* ``init``: ``"gpt2"`` (default) or ``"fan_in"`` is the shared rule of :mod:`jaxlab.nn.init`, so
  that the xLSTM and the Transformer it is compared with start from the same rule. ``"authors"``
  is, for the xLSTM, the authors' 7B training recipe (NX-AI/xlstm-jax, ``configs/model/
  mLSTMv1_default.yaml`` with ``models/xlstm_parallel/blocks/mlstm/layer_v1.py``,
  ``components/feedforward.py``, ``xlstm_lm_model.py`` and ``models/shared/init.py``), which is
  not part of the released model code: "small init" N(0, 2/(5E)) (Nguyen & Salazar 2019) for the
  embedding, q, k, v, the SwiGLU's gate and up maps and the unembedding; "wang init"
  N(0, (2/(L sqrt(E)))²) for the two maps that end a residual branch (the mLSTM's out projection
  and the SwiGLU's down map; E, not their fan-in); and **zeros for the kernels of the input,
  forget and output gates**, so every gate starts at its bias (input -10, forget linspace(3, 6)
  over heads) and the output gate at sigmoid(0) = 1/2. (Not the RMT authors' rule that
  ``"authors"`` means in :mod:`jaxlab.nn.init`.)
* ``positions`` is accepted (every LM config has it) and unused: the recurrence carries order.
"""

from __future__ import annotations

import dataclasses

from jaxlab.core.config import check
from jaxlab.lm.config import LMConfig, NormName
from jaxlab.methods.xlstm.cell import CellForm

__all__ = ["xLSTMConfig"]


def round_up(x: float, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is >= x (the authors' width rounding)."""
    return int(-(-x // multiple) * multiple)


@dataclasses.dataclass(frozen=True, kw_only=True)
class xLSTMConfig(LMConfig):  # noqa: N801  (the paper's spelling)
    """Shape and options of :class:`jaxlab.methods.xlstm.xLSTM` (common fields:
    :class:`~jaxlab.lm.config.LMConfig`).

    Attributes:
      d_model: embedding width E.
      num_heads: mLSTM heads NH.
      qk_dim_factor, v_dim_factor: total q/k and v widths as fractions of E (head dims divide them
        by NH).
      d_ff: SwiGLU hidden width; 0 means ``round_up(ffn_factor * E, ffn_multiple)``.
      gate_soft_cap, logit_soft_cap: ``a * tanh(x / a)`` caps on the gate pre-activations and on
        the output logits (0 disables).
      igate_bias, fgate_bias_range: input-gate bias init; forget-gate biases linspace over heads.
      norm_eps, cell_eps: eps of the norms and of the mLSTM normaliser.
      cell_form, chunk_size: which :func:`~jaxlab.methods.xlstm.mlstm` form trains, its chunk.
      remat: rematerialise each block in the backward.
      remat_group: with ``remat`` and ``scan_blocks``, also checkpoint groups of this many blocks
        (two-level rematerialisation: ``num_layers / remat_group + remat_group`` saved block
        inputs instead of ``num_layers``, for a third forward of each block); 0 or 1: one level.
      ffn_chunk: apply the SwiGLU to blocks of this many tokens, each rematerialised, so its
        ``(B, T, d_ff)`` hidden activations never live at once (0: the whole row; same result).
      scan_blocks: stack the blocks' parameters on a leading ``layers`` axis and run them as one
        ``lax.scan`` (one compiled block instead of ``num_layers``); mLSTM-only models.
      slstm_blocks: indices of blocks whose mixer is an sLSTM (:mod:`jaxlab.methods.xlstm.slstm`).
    """

    PAPER = {
        "7b": dict(
            d_model=4096, num_layers=32, num_heads=8, vocab_size=50304, seq_len=8192, d_ff=10944
        )
    }
    FAMILY = "xLSTM"

    norm: NormName = "rmsnorm"
    d_model: int = 128
    num_heads: int = 4
    qk_dim_factor: float = 0.5
    v_dim_factor: float = 1.0
    ffn_factor: float = 2.667
    ffn_multiple: int = 64
    gate_soft_cap: float = 15.0
    logit_soft_cap: float = 30.0
    igate_bias: float = -10.0
    fgate_bias_range: tuple[float, float] = (3.0, 6.0)
    norm_eps: float = 1e-6
    cell_eps: float = 1e-6
    cell_form: CellForm = "auto"  # Pallas kernels on GPU/TPU once enabled, chunkwise otherwise
    chunk_size: int = 64
    remat: bool = False
    remat_group: int = 0
    ffn_chunk: int = 0
    scan_blocks: bool = False
    slstm_blocks: tuple[int, ...] = ()  # blocks with an sLSTM layer instead (not in xLSTM 7B)

    def check_fields(self) -> None:
        for name in ("d_model", "num_heads", "chunk_size", "ffn_multiple"):
            value = getattr(self, name)
            check(value > 0, f"model.{name} must be positive, got {value}")
        check(
            self.remat_group <= 1 or self.num_layers % self.remat_group == 0,
            f"model.remat_group={self.remat_group} must divide model.num_layers={self.num_layers}",
        )
        check(self.ffn_chunk >= 0, f"model.ffn_chunk must be >= 0, got {self.ffn_chunk}")
        check(self.d_ff >= 0, "model.d_ff must be >= 0 (0 means round_up(ffn_factor * E))")
        for name in ("qk_dim", "v_dim"):
            value = getattr(self, name)
            check(
                value > 0 and value % self.num_heads == 0 and value == int(value),
                f"model.{name[:-4]}_dim_factor gives {name}={value}, which model.num_heads="
                f"{self.num_heads} must divide",
            )
        check(self.norm == "rmsnorm", "model.norm: the xLSTM uses RMSNorm (set model.norm=rmsnorm)")
        check(self.gate_soft_cap >= 0 and self.logit_soft_cap >= 0, "soft caps must be >= 0")
        check(
            all(0 <= b < self.num_layers for b in self.slstm_blocks)
            and self.d_model % self.num_heads == 0,
            f"model.slstm_blocks={self.slstm_blocks} must index blocks 0..{self.num_layers - 1} "
            "(and sLSTM heads need num_heads to divide d_model)",
        )
        check(
            not (self.scan_blocks and self.slstm_blocks),
            f"model.scan_blocks stacks identical mLSTM blocks, but model.slstm_blocks="
            f"{self.slstm_blocks}; set model.scan_blocks=false or model.slstm_blocks=()",
        )

    @property
    def qk_dim(self) -> int:
        return int(self.d_model * self.qk_dim_factor)

    @property
    def v_dim(self) -> int:
        return int(self.d_model * self.v_dim_factor)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_dim // self.num_heads

    @property
    def v_head_dim(self) -> int:
        return self.v_dim // self.num_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or round_up(self.ffn_factor * self.d_model, self.ffn_multiple)

    def linear_shapes(self) -> tuple[tuple[int, int], ...]:
        E, qk, v, ff = self.d_model, self.qk_dim, self.v_dim, self.ff_dim
        return ((E, qk), (E, v), (v, E), (E, ff), (ff, E))

    # FLOPs per layer and token (training = 3x forward; 7B paper App. A gives the same terms), with
    # E the width, qk and v the total q/k and v widths, NH heads of sizes Dk, Dv and the chunk
    # length L of the chunkwise form. Every block is counted as an mLSTM block.

    def matrix_flops(self) -> tuple[float, float, float]:
        """Projections ``2 E (2 qk + 2 v)`` for q, k, v and the output gate, ``2 v E`` for the
        out projection and ``4 E NH`` for the two scalar gates; SwiGLU's three maps ``6 E d_ff``;
        the unembedding ``2 E V``. Each map the linear factory builds (all but the scalar gates
        and the unembedding) is counted as built (:meth:`jaxlab.nn.linear.LinearSpec.flops`: a
        structured map costs what its shapes cost; the dense counts above otherwise)."""
        E, qk, v, ff = self.d_model, self.qk_dim, self.v_dim, self.ff_dim
        f = self.linear_factory().flops
        proj = 2 * f(E, qk) + 2 * f(E, v) + f(v, E) + 4 * E * self.num_heads
        return proj, 2 * f(E, ff) + f(ff, E), 2 * E * self.vocab_size

    def mixing_flops(self, seq_len: int, *, causal: bool) -> float:
        """The cell: inside a chunk every query meets the chunk's L keys, ``2 L qk`` for the logits
        and ``2 L v`` for the value sum (the full chunk, as Kaplan et al. count the full context,
        and as the chunkwise form computes it, so ``causal`` changes nothing); across chunks the
        state is read, ``2 NH Dk Dv``, and written, ``2 NH Dk Dv``, and so is the normaliser,
        ``2 NH Dk`` each, whose write first scales the keys by their gates (``2 NH Dk``).
        ``seq_len`` caps the chunk length (a shorter sequence is one chunk): the cost does not
        grow with the context, which is the linear-in-S prefill."""
        del causal
        L = min(self.chunk_size, seq_len)
        state = self.num_heads * self.qk_head_dim * self.v_head_dim
        normaliser = self.num_heads * self.qk_head_dim
        return 2 * L * (self.qk_dim + self.v_dim) + 4 * state + 6 * normaliser

    @classmethod
    def xlstm_7b(cls, **overrides) -> xLSTMConfig:
        """The released xLSTM 7B (paper Sec. 3; ``xlstm_large``'s defaults), its 32 blocks
        scanned (``scan_blocks``: one compiled block, the parameters stacked)."""
        return cls.paper("7b", **{"scan_blocks": True, **overrides})

    @classmethod
    def tiny(cls, **overrides) -> xLSTMConfig:
        """A CPU-sized model: E = 128, 4 blocks, 4 heads (qk head 16, v head 32), chunk 16."""
        return cls(
            **{"d_model": 128, "num_layers": 4, "num_heads": 4, "chunk_size": 16, **overrides}
        )
