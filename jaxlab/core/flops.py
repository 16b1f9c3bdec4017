"""Per-token FLOP accounting for decoder-only LMs (a multiply-add counts as 2 FLOPs).

Forward FLOPs per token follow Kaplan et al. 2020 ("Scaling Laws for Neural Language Models",
Table 1): every weight matrix costs ``2 * fan_in * fan_out`` per token, and attention adds
``2 * T * d_attn`` for the logits ``QK^T`` and the same again for the weighted sum of values, where
``T`` is the context length (the full context, as in Kaplan's table, not the causal half).
Embedding lookups are free; the unembedding is a matmul. Training costs 3x the forward pass (the
backward pass is twice the forward). ``include_vocab=False`` drops the unembedding, which is how
several papers quote model FLOPs (the RMT paper's Tables 3-4, for example).

Two measured counts sit beside the analytic ones, so that a formula can be checked against the
program that really runs: :func:`dot_flops` adds up the matrix products of a lowered JAX program
(every ``dot_general`` in its StableHLO, ``2 * prod(output) * prod(contracted)``, following calls),
which is what the analytic counts describe, exactly; :func:`compiled_flops` is XLA's own cost
analysis of a compiled program, which also counts elementwise work (softmax, norms, activations)
and, for a train step, the backward pass and the optimizer update.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

__all__ = ["FlopCount", "compiled_flops", "dot_flops", "transformer_flops_per_token"]


class FlopCount(NamedTuple):
    """FLOPs per token of one forward pass, split by part, and the training total (3x forward)."""

    attention_proj: float
    attention_mix: float
    mlp: float
    vocab: float

    @property
    def forward(self) -> float:
        return self.attention_proj + self.attention_mix + self.mlp + self.vocab

    @property
    def train(self) -> float:
        return 3.0 * self.forward


def transformer_flops_per_token(cfg, *, seq_len: int | None = None, include_vocab: bool = True):
    """FLOPs per token of :class:`jaxlab.nn.transformer.Transformer` built from ``cfg``.

    Args:
      cfg: a ``TransformerConfig`` (duck-typed: ``d_model, num_layers, num_heads, kv_heads,
        head_dim, ff_dim, vocab_size, seq_len``).
      seq_len: context length for the attention terms (default ``cfg.seq_len``).
      include_vocab: count the unembedding matmul.
    """
    T = seq_len or cfg.seq_len
    d, L, hd = cfg.d_model, cfg.num_layers, cfg.head_dim
    q_width, kv_width = cfg.num_heads * hd, cfg.kv_heads * hd
    proj = 2 * d * (q_width + 2 * kv_width) + 2 * q_width * d  # Q, K, V in; output projection
    mix = 2 * 2 * T * q_width  # logits and the value sum, every query head over T keys
    mlp = 2 * 2 * d * cfg.ff_dim
    vocab = 2 * d * cfg.vocab_size if include_vocab else 0.0
    return FlopCount(L * proj, L * mix, L * mlp, vocab)


_NAME = r'@("[^"]+"|[\w.$-]+)'  # symbol names, quoted when they hold other characters (<lambda>)
_FUNC = re.compile(r"func\.func (?:public |private )?" + _NAME + r"\(")
_CALL = re.compile(r"\bcall " + _NAME + r"\(")
_DOT = re.compile(
    r"stablehlo\.dot_general .*?contracting_dims = \[([\d, ]*)\] x \[[\d, ]*\].*?"
    r": \(tensor<([^>]*)>, tensor<[^>]*>\) -> tensor<([^>]*)>"
)


def _dims(tensor_type: str) -> list[int]:
    """``"2x64x16xf32"`` -> ``[2, 64, 16]`` (the element type is dropped)."""
    return [int(d) for d in tensor_type.split("x")[:-1]]


def dot_flops(program: Any) -> float:
    """FLOPs of the matrix products of a lowered program: ``2 * prod(output) * prod(contracted)``.

    Args:
      program: a ``jax.stages.Lowered`` (``jax.jit(f).lower(...)``) or its StableHLO text.

    Every ``stablehlo.dot_general`` counts once per execution: products inside functions that are
    called several times count once per call. Loops (``while``) are not unrolled — their bodies
    count once — so lower with Python loops (as jaxlab's models are written) when counting.
    """
    text = program if isinstance(program, str) else program.as_text()
    own: dict[str, float] = {}
    calls: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if match := _FUNC.search(line):
            current = match.group(1)
            own.setdefault(current, 0.0)
            calls.setdefault(current, [])
            continue
        if current is None:
            continue
        if match := _DOT.search(line):
            contracting = [int(i) for i in match.group(1).replace(" ", "").split(",") if i]
            lhs, out = _dims(match.group(2)), _dims(match.group(3))
            own[current] += 2.0 * math.prod(out) * math.prod(lhs[i] for i in contracting)
        for callee in _CALL.findall(line):
            calls[current].append(callee)

    def total(name: str, seen: tuple[str, ...] = ()) -> float:
        if name in seen:
            raise ValueError(f"recursive call through {name} in the lowered program")
        return own.get(name, 0.0) + sum(total(c, (*seen, name)) for c in calls.get(name, []))

    if "main" not in own:
        raise ValueError("no @main function in the lowered program")
    return total("main")


def compiled_flops(compiled: Any) -> float:
    """XLA's FLOP count of a compiled program (``jax.jit(f).lower(...).compile()``)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list | tuple):  # older jax returned one dict per device program
        analysis = analysis[0]
    return float(analysis["flops"])
