"""Pallas kernels match their references; chunked attention memory grows linearly in T, XLA's as T².

Command:  python experiments/run.py --exp=kernels_bench          (``--smoke``: under 30 s)
          GPU:  bash scripts/gpu_bench.sh   (adds the TFLOP/s grid and the native-kernel tests)
Result:   per kernel the largest error against its reference, and the memory slopes of the
          attention paths; measured results in pallas_kernels/README.md.

Three parts. (1) Correctness: each kernel (flash attention, chunked XLA attention, matmul) against
its jnp reference on small inputs — max absolute error of the output and of every input gradient;
on CPU the Pallas kernels run in interpret mode, on a GPU/TPU natively. (2) Memory: the compiled
``memory_analysis()`` temporaries of the XLA reference attention and the chunked path for T = 1k
... 16k, forward and forward+backward, compiled only (never executed), with the log-log slope of
memory against T. (3) On a GPU only: forward and forward+backward TFLOP/s of the Pallas kernel,
cuDNN and XLA for T in {1k, 4k, 16k}, head dim 64 and 128, bf16, causal and not, measured side by
side in one process and reported as ratios and as a fraction of the H200's ~990 TFLOP/s bf16 peak.
FLOPs follow FlashAttention-2 (Dao 2023, Sec. 4.1): forward ``4·B·H·T²·D`` (halved when causal),
backward 2.5x the forward. The measurements of (1) and (2) live in :mod:`jaxlab.nn.kernel_checks`;
this file holds the configuration, the GPU timings, the run and the summary.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

import pallas_kernels as pk
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.core.timing import time_call
from jaxlab.nn.attention import xla_attention
from jaxlab.nn.kernel_checks import correctness_rows, memory_rows

H200_BF16_PEAK_TFLOPS = 989.5  # dense, NVIDIA H200 SXM datasheet


@dataclasses.dataclass(frozen=True)
class Config:
    check_len: int = 96  # sequence length of the correctness checks (a block tail included)
    check_dtypes: tuple[str, ...] = ("float32", "bfloat16")
    memory_lens: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)
    memory_heads: int = 8
    memory_head_dim: int = 64
    gpu_lens: tuple[int, ...] = (1024, 4096, 16384)
    gpu_head_dims: tuple[int, ...] = (64, 128)
    gpu_tokens: int = 16384  # batch = gpu_tokens // T, heads = 2048 // head_dim
    gpu_xla_max_len: int = 4096  # the XLA reference's T² logits do not fit beyond this
    gpu_iters: int = 10


PRESETS = {
    "default": Config,
    "smoke": lambda: Config(
        check_len=40,
        check_dtypes=("float32",),
        memory_lens=(1024, 2048, 4096),
        gpu_lens=(1024,),
        gpu_iters=2,
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("kernels_bench", PRESETS, preset)


def _slope(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


# ------------------------------------------------------------------------------- GPU timings


def _time(fn, args, iters: int) -> float:
    """Median seconds of ``fn(*args)`` (jaxlab's one timing protocol, compilation excluded)."""
    return time_call(lambda: fn(*args), repeats=iters, warmup=1).median


def gpu_rows(cfg: Config) -> list[dict]:
    impls = {
        "pallas": lambda q, k, v, c: pk.flash_attention(q, k, v, causal=c),
        "cudnn": lambda q, k, v, c: jax.nn.dot_product_attention(
            q, k, v, is_causal=c, implementation="cudnn"
        ),
        "xla": lambda q, k, v, c: xla_attention(q, k, v, causal=c),
    }
    rows = []
    for T in cfg.gpu_lens:
        for D in cfg.gpu_head_dims:
            B, H = max(1, cfg.gpu_tokens // T), 2048 // D
            keys = jax.random.split(jax.random.key(T + D), 3)
            q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in keys)
            for causal in (False, True):
                flops = 4 * B * H * T * T * D * (0.5 if causal else 1.0)
                row = dict(T=T, D=D, B=B, H=H, causal=causal)
                for name, attn in impls.items():
                    if name == "xla" and T > cfg.gpu_xla_max_len:
                        continue
                    fwd = jax.jit(lambda q, k, v, a=attn, c=causal: a(q, k, v, c))
                    loss = lambda q, k, v, f=fwd: jnp.sum(f(q, k, v).astype(jnp.float32))
                    train = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
                    try:
                        row[f"{name}_fwd_tflops"] = (
                            flops / _time(fwd, (q, k, v), cfg.gpu_iters) / 1e12
                        )
                        row[f"{name}_fwd_bwd_tflops"] = (
                            3.5 * flops / _time(train, (q, k, v), cfg.gpu_iters) / 1e12
                        )
                    except Exception as err:  # a failing backend is a result, not a crash
                        row[f"{name}_error"] = f"{type(err).__name__}: {str(err)[:200]}"
                for mode in ("fwd", "fwd_bwd"):
                    ours = row.get(f"pallas_{mode}_tflops")
                    for base in ("cudnn", "xla"):
                        if ours and row.get(f"{base}_{mode}_tflops"):
                            row[f"pallas_over_{base}_{mode}"] = ours / row[f"{base}_{mode}_tflops"]
                    if ours:
                        row[f"pallas_{mode}_peak_fraction"] = ours / H200_BF16_PEAK_TFLOPS
                print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()), flush=True)  # fmt: skip
                rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------- run


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    platform = jax.default_backend()
    summary: dict = dict(platform=platform, device=str(jax.devices()[0].device_kind))
    with MetricWriter(workdir, tensorboard=False) as writer:
        step = 0
        for row in correctness_rows(cfg.check_len, cfg.check_dtypes):
            writer.write(step, dict(part="correctness", **row))
            print(row, flush=True)
            step += 1
            errs = [v for name, v in row.items() if name.startswith("err_")]
            key = f"max_err_{row['kernel'].split()[0]}_{row['dtype']}"
            summary[key] = max(summary.get(key, 0.0), *errs)
        mem = memory_rows(cfg.memory_lens, cfg.memory_heads, cfg.memory_head_dim)
        for row in mem:
            writer.write(step, dict(part="memory", **row))
            print(row, flush=True)
            step += 1
        Ts = [r["T"] for r in mem]
        for name in ("xla_fwd", "chunked_fwd", "xla_fwd_bwd", "chunked_fwd_bwd"):
            summary[f"memory_slope_{name}"] = round(_slope(Ts, [r[f"{name}_mib"] for r in mem]), 3)
            summary[f"memory_mib_{name}_at_{Ts[-1]}"] = round(mem[-1][f"{name}_mib"], 2)
        fig = curves_figure(
            {name: (Ts, [r[f"{name}_mib"] for r in mem]) for name in
             ("xla_fwd", "chunked_fwd", "xla_fwd_bwd", "chunked_fwd_bwd")},
            xlabel="sequence length T",
            ylabel="compiled temporaries (MiB)", logx=True, logy=True,
            title=f"causal attention, B=1, H={cfg.memory_heads}, D={cfg.memory_head_dim}",
        )  # fmt: skip
        save_figure(fig, workdir / "attention_memory.png")
        if platform == "gpu":
            rows = gpu_rows(cfg)
            for row in rows:
                writer.write(step, dict(part="gpu", **row))
                step += 1
            for row in rows:
                tag = f"T{row['T']}_D{row['D']}_{'causal' if row['causal'] else 'full'}"
                for key in ("pallas_over_cudnn_fwd_bwd", "pallas_fwd_bwd_peak_fraction"):
                    if key in row:
                        summary[f"{key}_{tag}"] = round(row[key], 3)
            fig = curves_figure(
                {f"{impl} D={D} causal": ([r["T"] for r in rows if r["D"] == D and r["causal"]],
                                          [r.get(f"{impl}_fwd_bwd_tflops", math.nan) for r in rows
                                           if r["D"] == D and r["causal"]])
                 for impl in ("pallas", "cudnn") for D in cfg.gpu_head_dims},
                xlabel="T", ylabel="fwd+bwd TFLOP/s", logx=True,
                title=f"bf16 attention on {summary['device']}",
            )  # fmt: skip
            save_figure(fig, workdir / "gpu_tflops.png")
        else:
            summary["gpu_benchmark"] = f"skipped: no GPU (backend {platform})"
    summary["headline"] = {
        k: v
        for k, v in summary.items()
        if k.startswith(("max_err_", "memory_slope_", "pallas_over"))
    }
    return summary
