"""Blockwise MLR attention runs at about its analytic FLOP ratio to standard attention, where the
dense per-level construction of the authors' code is slower than standard attention (Kuang et al.
2025, Sec. 4; the issue's performance target: within 10% of the whole-attention FLOP ratio).

Command:  python experiments/run.py --exp=mlr_attention_bench      (``--smoke``: seconds)
Result:   the headline printed at the end: wall-time ratios MLR / MHA at T = 4096, forward and
          forward+backward, beside the analytic ratio (about 0.80 at head dim 64 with the paper's
          ranks 32|8|6|4|4|4|4|2); measured results in
          jaxlab/methods/structured_attention/README.md.

One process, the same ``q, k, v`` for every variant, medians of interleaved rounds
(:mod:`jaxlab.core.timing`). Each ratio's two sides are timed in rounds of their own (MLR and one
baseline, A B A B ...; the quartiles of the per-round ratios go to ``round_ratios`` in the summary,
a measure of how much the machine's speed drifted): the dense variants allocate ``T x T``
logits per head (and per level), and freeing and re-faulting that memory slowed whichever variant
ran next in a shared round.
MLR attention (:func:`jaxlab.nn.mlr_attention.mlr_attention`,
blockwise) is timed against three causal MHA implementations of the same shapes: the same region
decomposition contracting every channel (:func:`~jaxlab.nn.mlr_attention.blockwise_full_attention`,
the like-for-like baseline: the only difference is the contraction widths), the dense XLA
reference (which computes all ``T^2`` logits and masks half of them) and the chunked XLA path
(``impl="xla_chunked"``, what ``auto`` picks at this length on CPU). The dense construction
(:func:`~jaxlab.nn.mlr_attention.mlr_attention_reference`, as the authors build it) is timed too,
and with ``--set pallas=true`` (``scripts/gpu_bench.sh`` on a GPU) the Pallas MLR kernel against
Pallas flash attention, each at its default tiles (the MLR kernel's shrink to the finest block).
The analytic ratio counts the causal pairs each one scores
(:func:`jaxlab.nn.attention_kinds.attention_mix_flops`, causal). Times measured while
other jobs share the CPU are noisy; the ratios are what the run reports.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.config import check
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.timing import time_interleaved
from jaxlab.nn.attention import dot_product_attention
from jaxlab.nn.attention_kinds import attention_mix_flops
from jaxlab.nn.mlr_attention import (
    REGION_TILE,
    blockwise_full_attention,
    check_mlr,
    mlr_attention,
    mlr_attention_reference,
)


@dataclasses.dataclass(frozen=True)
class Config:
    seq_len: int = 4096
    batch: int = 1
    heads: int = 2
    ranks: tuple[int, ...] = (32, 8, 6, 4, 4, 4, 4, 2)  # head dim 64, the paper's LM ranks
    normalize: str = "block_levels"
    repeats: int = 25  # rounds of the blockwise, chunked and Pallas pairs
    dense_repeats: int = 5  # rounds of the pairs with a dense variant (the slow ones)
    tile: int = REGION_TILE  # logits per head of one blockwise step (MLR and MHA alike)
    dense_reference: bool = True  # also time the authors'-style dense construction
    # also time the Pallas MLR kernel against Pallas flash attention (a GPU or TPU run: on a CPU
    # both interpret, and their times measure the interpreter)
    pallas: bool = False

    def __post_init__(self) -> None:
        check(
            self.batch > 0
            and self.heads > 0
            and min(self.repeats, self.dense_repeats) > 0
            and self.tile > 0,
            "sizes must be positive",
        )
        check_mlr(self.ranks, sum(self.ranks), self.seq_len, self.normalize)


PRESETS = {
    "default": lambda: Config(),
    "smoke": lambda: Config(  # the Pallas pair too (interpreted on a CPU), so CI runs its code
        seq_len=256, heads=1, ranks=(8, 4, 2, 2), repeats=2, dense_repeats=2, pallas=True
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("mlr_attention_bench", PRESETS, preset)


def _variants(cfg: Config) -> dict:
    L = len(cfg.ranks)
    return {
        "mlr": lambda q, k, v: mlr_attention(  # the blockwise XLA path on every platform
            q, k, v, ranks=cfg.ranks, normalize=cfg.normalize, tile=cfg.tile, impl="xla"
        ),
        "mha_blockwise": lambda q, k, v: blockwise_full_attention(
            q, k, v, num_levels=L, tile=cfg.tile
        ),
        "mha_xla": lambda q, k, v: dot_product_attention(q, k, v, causal=True, impl="xla"),
        "mha_chunked": lambda q, k, v: dot_product_attention(
            q, k, v, causal=True, impl="xla_chunked"
        ),
        **(
            {
                "mlr_pallas": lambda q, k, v: mlr_attention(
                    q, k, v, ranks=cfg.ranks, normalize=cfg.normalize, impl="pallas"
                ),
                "mha_pallas": lambda q, k, v: dot_product_attention(
                    q, k, v, causal=True, impl="pallas"
                ),
            }
            if cfg.pallas
            else {}
        ),
        **(
            {
                "mlr_dense": lambda q, k, v: mlr_attention_reference(
                    q, k, v, ranks=cfg.ranks, normalize=cfg.normalize
                )
            }  # fmt: skip
            if cfg.dense_reference
            else {}
        ),
    }


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    D = sum(cfg.ranks)
    shape = (cfg.batch, cfg.seq_len, cfg.heads, D)
    q, k, v = (jax.random.normal(key, shape) for key in jax.random.split(jax.random.key(0), 3))
    fns = {}
    for name, f in _variants(cfg).items():
        fwd = jax.jit(f)
        grad = jax.jit(jax.grad(lambda q, k, v, f=f: jnp.sum(f(q, k, v) * v), argnums=(0, 1, 2)))
        fns[f"{name}_forward"] = lambda fwd=fwd: fwd(q, k, v)
        fns[f"{name}_forward_backward"] = lambda grad=grad: grad(q, k, v)
    # (numerator, denominator) of every reported ratio, each pair timed in its own rounds
    pairs = {base: ("mlr", base) for base in ("mha_blockwise", "mha_xla", "mha_chunked")}
    if cfg.dense_reference:
        pairs["dense"] = ("mlr_dense", "mha_xla")
    if cfg.pallas:
        pairs["pallas"] = ("mlr_pallas", "mha_pallas")
    ratios, times_ms, spread = {}, {}, {}
    for label, (num, den) in pairs.items():
        dense = "mha_xla" in (num, den) or "mlr_dense" in (num, den)
        for pass_ in ("forward", "forward_backward"):
            names = (f"{num}_{pass_}", f"{den}_{pass_}")
            got = time_interleaved(
                {n: fns[n] for n in names}, repeats=cfg.dense_repeats if dense else cfg.repeats
            )
            ratios[label, pass_] = got[names[0]].median / got[names[1]].median
            for n in names:
                times_ms[f"{n}_ms_in_{label}_pair"] = 1e3 * got[n].median
            rounds = np.array(got[names[0]].samples) / np.array(got[names[1]].samples)
            spread[f"{label}_{pass_}_round_ratio_quartiles"] = [
                float(x) for x in np.percentile(rounds, [25, 50, 75])
            ]
    mix = dict(seq_len=cfg.seq_len, num_heads=cfg.heads, head_dim=D, causal=True)
    analytic = attention_mix_flops("mlr", ranks=cfg.ranks, **mix) / attention_mix_flops(
        "mha", **mix
    )
    headline = {"seq_len": cfg.seq_len, "head_dim": D, "analytic_flop_ratio": analytic}
    for pass_ in ("forward", "forward_backward"):
        for base in ("mha_blockwise", "mha_xla", "mha_chunked"):
            headline[f"{pass_}_time_ratio_vs_{base}"] = ratios[base, pass_]
        if cfg.dense_reference:
            headline[f"{pass_}_dense_mlr_time_ratio_vs_mha_xla"] = ratios["dense", pass_]
        if cfg.pallas:
            headline[f"{pass_}_pallas_mlr_time_ratio_vs_pallas_mha"] = ratios["pallas", pass_]
        target = headline[f"{pass_}_time_ratio_vs_mha_blockwise"]
        headline[f"{pass_}_within_10pct_of_analytic"] = bool(abs(target / analytic - 1) <= 0.10)
    with MetricWriter(workdir, tensorboard=False) as writer:
        writer.write(0, {k: float(v) for k, v in headline.items() if not isinstance(v, bool)})
    ranks = "|".join(map(str, cfg.ranks))
    lines = [f"mlr_attention_bench T={cfg.seq_len}, head dim {D}, ranks {ranks}: analytic "
             f"whole-attention ratio {analytic:.3f}"]  # fmt: skip
    for pass_ in ("forward", "forward_backward"):
        lines.append(
            f"  {pass_}: MLR / MHA = {headline[f'{pass_}_time_ratio_vs_mha_blockwise']:.3f} "
            f"(same decomposition), {headline[f'{pass_}_time_ratio_vs_mha_xla']:.3f} (dense XLA), "
            f"{headline[f'{pass_}_time_ratio_vs_mha_chunked']:.3f} (chunked XLA)"
            + (
                f"; dense MLR / MHA {headline[f'{pass_}_dense_mlr_time_ratio_vs_mha_xla']:.3f}"
                if cfg.dense_reference
                else ""
            )  # fmt: skip
            + (
                f"; Pallas MLR / Pallas MHA "
                f"{headline[f'{pass_}_pallas_mlr_time_ratio_vs_pallas_mha']:.3f}"
                f"{' (interpreted)' if jax.default_backend() == 'cpu' else ''}"
                if cfg.pallas
                else ""
            )  # fmt: skip
        )
    print("\n".join(lines))
    return {"headline": headline, "times_ms": times_ms, "round_ratios": spread}
