"""xLSTM inference: prefill linear in S, decode time and memory flat in the context (Sec. 5).

Command:  python experiments/run.py --exp=xlstm_inference     (``--smoke``: about a minute)
Result:   the headline printed at the end: fitted log-log slopes of prefill time against S, the
          compiled memory of one decode step per context for both models, and the decode throughput
          ratio xLSTM / Transformer at 16k context; measured results in the method README.

Three measurements, all in one process with :mod:`jaxlab.core.timing` (median of repeats,
interleaved where two numbers are divided):

(a) prefill: the mLSTM cell alone (B = 1, NH heads of Dqk = Dv = ``head_dim``) in its chunkwise
    and parallel forms, and causal softmax attention of the same heads (the XLA chunked kernel,
    memory linear in S), timed against S; parallel forms only up to ``max_quadratic_len``. The
    slopes of log time against log S (:func:`jaxlab.core.scaling.fit_loglog_slope`) from
    ``slope_from`` on: 1 is linear, 2 quadratic.
(b) decode: the xLSTM and the Transformer of the same width, depth, heads and parameters
    (:func:`jaxlab.methods.xlstm.matched.matched_transformer`), batch 1, one jitted
    :func:`jaxlab.lm.generate.decode_step` at contexts ``contexts``: its per-token latency and
    the compiled step's memory (XLA's argument + temporary bytes; the cache is an argument). The
    Transformer's KV cache is preallocated to the context and attended over in full, as a
    fixed-size cache is; the xLSTM's cache is its recurrent state.
(c) the decode throughput ratio xLSTM / Transformer at 16k context, from (b).

The paper's figures (xLSTM 7B vs Llama-style 7B on an H100: 157 vs 32 tokens/s at long context)
come from 7B models on a GPU; on a CPU with small models only the shapes of the curves compare.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.core.config import check
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.core.scaling import fit_loglog_slope
from jaxlab.core.timing import time_interleaved
from jaxlab.lm.generate import decode_step
from jaxlab.lm.transformer import Transformer
from jaxlab.methods.xlstm import mlstm, xLSTM, xLSTMConfig
from jaxlab.methods.xlstm.matched import matched_transformer
from jaxlab.nn.attention import dot_product_attention
from jaxlab.nn.layers import count_params

PAPER = {"tokens_per_second_xlstm_7b": 157, "tokens_per_second_llama_7b": 32}


@dataclasses.dataclass(frozen=True)
class Config:
    prefill_lengths: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32768)
    max_quadratic_len: int = 4096  # parallel mLSTM and attention up to here
    slope_from: int = 2048
    heads: int = 4
    head_dim: int = 64
    chunk_size: int = 64
    d_model: int = 256
    num_layers: int = 4
    contexts: tuple[int, ...] = (1024, 8192, 16384, 65536)
    repeats: int = 5
    decode_calls: int = 4  # consecutive decode steps per timed repeat

    def __post_init__(self) -> None:
        check(len(self.prefill_lengths) >= 2, "prefill_lengths: need two lengths to fit a slope")
        check(self.repeats >= 1 and self.decode_calls >= 1, "repeats, decode_calls must be >= 1")


PRESETS = {
    "default": lambda: Config(),
    "smoke": lambda: Config(
        prefill_lengths=(128, 256, 512),
        max_quadratic_len=256,
        slope_from=128,
        heads=2,
        head_dim=16,
        chunk_size=32,
        d_model=32,
        num_layers=1,
        contexts=(256, 1024, 16384),
        repeats=2,
        decode_calls=2,
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("xlstm_inference", PRESETS, preset)


def _prefill(cfg: Config) -> dict:
    H, D = cfg.heads, cfg.head_dim
    fns = {
        "chunkwise": jax.jit(
            lambda q, k, v, i, f: mlstm(q, k, v, i, f, chunk_size=cfg.chunk_size, form="chunkwise")
        ),  # fmt: skip
        "parallel": jax.jit(lambda q, k, v, i, f: mlstm(q, k, v, i, f, form="parallel")),
        "attention": jax.jit(
            lambda q, k, v, i, f: dot_product_attention(q, k, v, causal=True, impl="xla_chunked")
        ),
    }
    seconds: dict[str, dict[int, float]] = {name: {} for name in fns}
    for S in cfg.prefill_lengths:
        keys = jax.random.split(jax.random.key(S), 5)
        q, k, v = (jax.random.normal(keys[j], (1, S, H, D)) for j in range(3))  # (B, T, H, D)
        i, f = jax.random.normal(keys[3], (1, S, H)), jax.random.normal(keys[4], (1, S, H)) + 3
        run = {n: fn for n, fn in fns.items() if n == "chunkwise" or S <= cfg.max_quadratic_len}
        timed = time_interleaved(
            {n: functools.partial(fn, q, k, v, i, f) for n, fn in run.items()},
            repeats=cfg.repeats,
        )
        for name, t in timed.items():
            seconds[name][S] = t.median
        print(f"prefill S={S}: " + ", ".join(f"{n} {t.median:.4f}s" for n, t in timed.items()))
    slopes = {}
    for name, by_len in seconds.items():
        pts = [(s, t) for s, t in by_len.items() if s >= cfg.slope_from]
        if len(pts) >= 2:
            slopes[name] = fit_loglog_slope(*zip(*pts, strict=True))[0]
    return {"seconds": seconds, "slopes": slopes}


def _decode(cfg: Config) -> dict:
    xcfg = xLSTMConfig(d_model=cfg.d_model, num_layers=cfg.num_layers, num_heads=cfg.heads,
                       chunk_size=cfg.chunk_size, cell_form="chunkwise")  # fmt: skip
    tcfg = matched_transformer(xcfg)
    models = {
        "xlstm": xLSTM(xcfg, rngs=nnx.Rngs(0)),
        "transformer": Transformer(tcfg, rngs=nnx.Rngs(0)),
    }  # noqa: E501
    result = {
        n: {"params": count_params(m), "latency": {}, "memory_bytes": {}} for n, m in models.items()
    }  # noqa: E501
    token = jnp.zeros((1,), jnp.int32)
    for ctx in cfg.contexts:
        holders, fns = {}, {}
        for name, model in models.items():
            cache = model.init_cache(1, ctx + cfg.repeats * cfg.decode_calls + 2)
            cache = cache._replace(pos=jnp.asarray(ctx, jnp.int32))  # as if ctx tokens were cached
            compiled = decode_step.lower(model, token, cache).compile()
            mem = compiled.memory_analysis()
            result[name]["memory_bytes"][ctx] = mem.argument_size_in_bytes + mem.temp_size_in_bytes
            holders[name] = [cache]

            def step(name=name, model=model, holders=holders):
                _, holders[name][0] = decode_step(model, token, holders[name][0])
                return holders[name][0].pos

            fns[name] = step
        timed = time_interleaved(fns, repeats=cfg.repeats, calls=cfg.decode_calls)
        for name, t in timed.items():
            result[name]["latency"][ctx] = t.median
        print(f"decode ctx={ctx}: " + ", ".join(
            f"{n} {t.median * 1e3:.2f} ms, {result[n]['memory_bytes'][ctx] / 2**20:.1f} MiB"
            for n, t in timed.items()))  # fmt: skip
    return result


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    prefill = _prefill(cfg)
    decode = _decode(cfg)
    with MetricWriter(workdir, tensorboard=False) as writer:
        for S in cfg.prefill_lengths:
            writer.write(
                S, {f"prefill_seconds_{n}": v[S] for n, v in prefill["seconds"].items() if S in v}
            )  # noqa: E501
    fig = curves_figure(
        {n: (list(v), list(v.values())) for n, v in prefill["seconds"].items()},
        xlabel="sequence length S", ylabel="seconds (median)",
        title="prefill time", logx=True, logy=True,
    )  # fmt: skip
    save_figure(fig, workdir / "prefill.png")
    fig = curves_figure(
        {n: (list(d["latency"]), list(d["latency"].values())) for n, d in decode.items()},
        xlabel="context", ylabel="seconds per token (median)",
        title="decode latency, batch 1", logx=True, logy=True,
    )  # fmt: skip
    save_figure(fig, workdir / "decode_latency.png")
    ref = 16384 if 16384 in cfg.contexts else max(cfg.contexts)
    x_mem = decode["xlstm"]["memory_bytes"]
    return {
        "prefill": prefill,
        "decode": decode,
        "paper": PAPER,
        "headline": {
            "prefill_slopes": prefill["slopes"],
            "decode_memory_mib": {
                n: {c: b / 2**20 for c, b in d["memory_bytes"].items()} for n, d in decode.items()
            },
            "xlstm_decode_memory_constant": len(set(x_mem.values())) == 1,
            "throughput_ratio_context": ref,
            "decode_throughput_ratio": decode["transformer"]["latency"][ref]
            / decode["xlstm"]["latency"][ref],
            "params": {n: d["params"] for n, d in decode.items()},
        },
    }
