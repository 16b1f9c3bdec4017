"""FLOP accounting that knows no model: the per-token count's type, and two measured counts.

A model's config counts its own forward FLOPs per token
(:meth:`jaxlab.lm.config.LMConfig.flops_per_token`, after Kaplan et al. 2020, "Scaling Laws for
Neural Language Models", Table 1: a multiply-add is 2 FLOPs, every weight matrix costs
``2 * fan_in * fan_out`` per token, training is 3x the forward pass) and returns a
:class:`FlopCount`, split by part.

Two measured counts sit beside the analytic ones, so that a formula can be checked against the
program that really runs: :func:`dot_flops` adds up the matrix products of a lowered JAX program
(every ``dot_general`` in its StableHLO, ``2 * prod(output) * prod(contracted)``, following calls),
which is what the analytic counts describe, exactly (a loop's body, e.g. a ``lax.scan``'s, counts
once, whatever its trip count); :func:`compiled_flops` is XLA's own cost
analysis of a compiled program, which also counts elementwise work (softmax, norms, activations)
and, for a train step, the backward pass and the optimizer update.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

__all__ = ["FlopCount", "compiled_flops", "dot_flops"]


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
