"""Pallas kernels match their references; chunked attention memory grows linearly in T, XLA's as T²;
on a GPU, how fast each kernel runs beside cuDNN and XLA.

Command:  python experiments/run.py --exp=kernels_bench          (``--smoke``: under 30 s)
          GPU:  bash scripts/gpu_bench.sh [--quick]   (the GPU rows and the native-kernel tests)
Result:   per kernel the largest error against its reference, the memory slopes of the attention
          paths, and on a GPU every speed ratio of issue 46; measured results in
          pallas_kernels/README.md.

Three parts. (1) Correctness: each kernel (flash attention, chunked XLA attention, matmul) against
its jnp reference on small inputs — max absolute error of the output and of every input gradient;
on CPU the Pallas kernels run in interpret mode, on a GPU/TPU natively. (2) Memory: the compiled
``memory_analysis()`` temporaries of the XLA reference attention and the chunked path for T = 1k
... 16k, forward and forward+backward, compiled only (never executed), with the log-log slope of
memory against T. (3) On a GPU only (or anywhere with ``gpu_anywhere``, the ``dry`` preset that
``gpu_bench.sh --dry-run`` uses): :data:`GPU_PARTS`, each timed in interleaved rounds in one
process and reported as ratios — flash attention TFLOP/s against cuDNN and XLA (T in {1k, 4k,
16k}, head dim 64 and 128, bf16, causal and not; fraction of the H200's ~990 TFLOP/s bf16 peak),
float32 flash attention with each dot precision and query block against XLA at its default and
HIGHEST precision (issue 46's pathology), square bf16 matmuls against ``jnp.dot``, the chunkwise
mLSTM against the XLA chunkwise form at xLSTM 7B's head, tile sweeps, and JAX's own Mosaic GPU
attention for reference. A part that fails is a row with its error, not a crash. FLOPs follow
FlashAttention-2 (Dao 2023, Sec. 4.1): forward ``4·B·H·T²·D`` (halved when causal), backward 2.5x
the forward. The measurements of (1) and (2) live in :mod:`jaxlab.testing.kernel_checks`; this file
holds the configuration, the GPU timings, the run and the summary.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_kernels as pk
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.core.timing import time_interleaved
from jaxlab.nn.attention import xla_attention
from jaxlab.testing.kernel_checks import correctness_rows, memory_rows

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
    gpu_causal: tuple[bool, ...] = (False, True)
    gpu_tokens: int = 16384  # batch = gpu_tokens // T, heads = 2048 // head_dim
    gpu_xla_max_len: int = 4096  # the XLA reference's T² logits do not fit beyond this
    gpu_iters: int = 10
    # float32 flash attention through dot_product_attention(impl="pallas") against XLA at issue
    # 46's shape (B, T, H, D), causal: the precision of its dots and its grid, one at a time
    f32_shape: tuple[int, int, int, int] = (1, 4096, 2, 64)
    # flash attention tiles tried at (T, D), causal bf16, beside the defaults:
    # (block_q, block_k, block_q_dkv, block_k_dkv, block_q_dq, block_k_dq, num_warps, num_stages)
    flash_sweep_at: tuple[int, int] = (4096, 128)
    flash_sweep: tuple[tuple[int, ...], ...] = (
        (128, 128, 64, 128, 128, 64, 8, 2),
        (128, 64, 64, 64, 64, 64, 8, 3),
        (64, 64, 64, 64, 64, 64, 4, 2),
    )
    # square bf16 matmuls, Pallas against jnp.dot; the tile variants are tried at the largest size
    matmul_sizes: tuple[int, ...] = (2048, 4096, 8192)
    # (block_m, block_n, block_k, num_warps, num_stages)
    matmul_sweep: tuple[tuple[int, ...], ...] = (
        (128, 256, 64, 8, 3),
        (256, 128, 64, 8, 3),
        (128, 128, 64, 4, 4),
    )
    # chunkwise mLSTM (B, NH, S, Dqk, Dv), bf16, Pallas against the XLA chunkwise form (chunk 64):
    # xLSTM 7B's head (Dqk 256, Dv 512) and a 512 x 512 one
    mlstm_shapes: tuple[tuple[int, ...], ...] = ((2, 8, 2048, 256, 512), (1, 8, 2048, 512, 512))
    mgpu_reference: bool = True  # also time JAX's own Mosaic GPU (Hopper) attention, if present
    gpu_anywhere: bool = False  # run the GPU part on any backend (a CPU dry run: interpreted)


PRESETS = {
    "default": Config,
    "smoke": lambda: Config(
        check_len=40,
        check_dtypes=("float32",),
        memory_lens=(1024, 2048, 4096),
        gpu_lens=(1024,),
        gpu_iters=2,
    ),
    # The short GPU lease (scripts/gpu_bench.sh --quick): one row per kernel and target.
    "quick": lambda: Config(
        check_dtypes=("float32", "bfloat16"),
        memory_lens=(1024, 4096, 16384),
        gpu_lens=(4096,),
        gpu_causal=(True,),
        gpu_iters=5,
        flash_sweep=(),  # the sweeps that chose the shipped tiles run in the default preset
        matmul_sizes=(2048, 8192),
        matmul_sweep=(),
        mlstm_shapes=((2, 8, 2048, 256, 512),),
        mgpu_reference=False,
    ),
    # The GPU code path on a CPU (scripts/gpu_bench.sh --dry-run): interpreted, tiny shapes.
    "dry": lambda: Config(
        check_len=40,
        check_dtypes=("float32",),
        memory_lens=(256, 512),
        gpu_lens=(64,),
        gpu_head_dims=(16,),
        gpu_causal=(True,),
        gpu_tokens=64,
        gpu_iters=1,
        f32_shape=(1, 64, 2, 16),
        flash_sweep_at=(64, 16),
        flash_sweep=((32, 32, 32, 32, 32, 32, 4, 2),),
        matmul_sizes=(64,),
        matmul_sweep=((32, 32, 16, 4, 3),),
        mlstm_shapes=((1, 2, 64, 32, 64),),
        mgpu_reference=False,
        gpu_anywhere=True,
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("kernels_bench", PRESETS, preset)


def _slope(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


# ------------------------------------------------------------------------------- GPU timings


def _time(fns: dict, iters: int) -> dict:
    """Median seconds of each ``fn()`` timed in interleaved rounds (jaxlab's one timing protocol,
    compilation excluded), or the error of a function that fails to compile or run."""
    ok, out = {}, {}
    for name, fn in fns.items():
        try:
            jax.block_until_ready(fn())  # compiles; a failing backend is a result, not a crash
            ok[name] = fn
        except Exception as err:
            out[name] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
    for name, timing in time_interleaved(ok, repeats=iters).items():
        out[name] = timing.median
    return out


def _fwd_and_grad(fn, *args):
    """Zero-argument callables of ``fn(*args)`` and of its gradient in every argument, jitted."""
    fwd = jax.jit(fn)
    loss = lambda *a: jnp.sum(fn(*a).astype(jnp.float32))  # noqa: E731
    grad = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
    return (lambda: fwd(*args)), (lambda: grad(*args))


def _print(row: dict) -> None:
    print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in row.items()), flush=True)  # fmt: skip


def _ratios(row: dict, ours: str, bases: tuple[str, ...], unit: str) -> None:
    """``ours_over_base_mode`` speed ratios (> 1: ours faster) from ``{impl}_{mode}_{unit}``
    entries that are times (``ms``) or rates (``tflops``)."""
    for mode in ("fwd", "fwd_bwd"):
        mine = row.get(f"{ours}_{mode}_{unit}")
        for base in bases:
            theirs = row.get(f"{base}_{mode}_{unit}")
            if isinstance(mine, float) and isinstance(theirs, float):
                ratio = theirs / mine if unit == "ms" else mine / theirs
                row[f"{ours}_over_{base}_{mode}"] = ratio


def _record(row: dict, name: str, times: dict, flops: float | None) -> None:
    for mode, t in times.items():
        if isinstance(t, str):
            row[f"{name}_{mode}_error"] = t
        elif flops is None:
            row[f"{name}_{mode}_ms"] = 1e3 * t
        else:
            row[f"{name}_{mode}_tflops"] = (flops if mode == "fwd" else 3.5 * flops) / t / 1e12


def _attention(impl: str, causal: bool):
    """``(q, k, v) -> o`` of one attention implementation."""
    if impl == "pallas":
        return functools.partial(pk.flash_attention, causal=causal)
    if impl == "cudnn":
        return functools.partial(
            jax.nn.dot_product_attention, is_causal=causal, implementation="cudnn"
        )
    return functools.partial(xla_attention, causal=causal)


def _qkv(shape, dtype, seed: int):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(k, shape, jnp.float32).astype(dtype) for k in keys)


def attention_rows(cfg: Config) -> list[dict]:
    """Flash attention fwd and fwd+bwd TFLOP/s, Pallas / cuDNN / XLA, bf16, over the grid."""
    rows = []
    for T in cfg.gpu_lens:
        for D in cfg.gpu_head_dims:
            B, H = max(1, cfg.gpu_tokens // T), 2048 // D
            q, k, v = _qkv((B, T, H, D), jnp.bfloat16, T + D)
            for causal in cfg.gpu_causal:
                flops = 4 * B * H * T * T * D * (0.5 if causal else 1.0)
                row = dict(part="attention", T=T, D=D, B=B, H=H, causal=causal)
                impls = ("pallas", "cudnn") + (("xla",) if T <= cfg.gpu_xla_max_len else ())
                for mode in ("fwd", "fwd_bwd"):
                    fns = {}
                    for impl in impls:
                        fwd, grad = _fwd_and_grad(_attention(impl, causal), q, k, v)
                        fns[impl] = fwd if mode == "fwd" else grad
                    for impl, t in _time(fns, cfg.gpu_iters).items():
                        _record(row, impl, {mode: t}, flops)
                _ratios(row, "pallas", ("cudnn", "xla"), "tflops")
                for mode in ("fwd", "fwd_bwd"):
                    if f"pallas_{mode}_tflops" in row:
                        row[f"pallas_{mode}_peak_fraction"] = (
                            row[f"pallas_{mode}_tflops"] / H200_BF16_PEAK_TFLOPS
                        )
                _print(row)
                rows.append(row)
    return rows


def f32_rows(cfg: Config) -> list[dict]:
    """Float32 flash attention (issue 46's pathology): the Pallas kernel with each float32 dot
    precision and with smaller query blocks (more programs) against XLA at its default and at
    HIGHEST precision, and the bf16 kernel for scale; times and the error against XLA HIGHEST."""
    B, T, H, D = cfg.f32_shape
    q, k, v = _qkv((B, T, H, D), jnp.float32, 46)
    P, A = lax.Precision, lax.DotAlgorithmPreset
    flash = lambda **kw: lambda q, k, v: pk.flash_attention(q, k, v, causal=True, **kw)  # noqa: E731
    blocks = lambda bq: pk.FlashAttentionBlockSizes(block_q=bq)  # noqa: E731
    variants = {
        "pallas_default": flash(),
        "pallas_ieee": flash(precision=P.HIGHEST),
        "pallas_tf32x3": flash(precision=A.TF32_TF32_F32_X3),
        "pallas_bf16x3": flash(precision=A.BF16_BF16_F32_X3),
        "pallas_tf32": flash(precision=A.TF32_TF32_F32),
        "pallas_ieee_bq64": flash(precision=P.HIGHEST, block_sizes=blocks(64)),
        "pallas_ieee_bq32": flash(precision=P.HIGHEST, block_sizes=blocks(32)),
        "pallas_tf32x3_bq64": flash(precision=A.TF32_TF32_F32_X3, block_sizes=blocks(64)),
        "xla_default": lambda q, k, v: xla_attention(q, k, v, causal=True),
        "xla_highest": lambda q, k, v: xla_attention(q, k, v, causal=True),
    }
    truth = None
    with jax.default_matmul_precision("highest"):
        try:
            truth = np.asarray(jax.jit(variants["xla_highest"])(q, k, v), np.float64)
        except Exception as err:  # noqa: BLE001  (reported below)
            print(f"f32 reference failed: {err}", flush=True)
    row = dict(part="f32_attention", B=B, T=T, H=H, D=D, causal=True)
    pairs = {name: _fwd_and_grad(fn, q, k, v) for name, fn in variants.items()}
    for mode in ("fwd", "fwd_bwd"):
        fns = {}
        for name, pair in pairs.items():
            call = pair[mode == "fwd_bwd"]
            fns[name] = functools.partial(_highest, call) if name == "xla_highest" else call
        for name, t in _time(fns, cfg.gpu_iters).items():
            _record(row, name, {mode: t}, None)
    if truth is not None:
        for name, (fwd, _) in pairs.items():
            if isinstance(row.get(f"{name}_fwd_ms"), float):
                got = np.asarray(_highest(fwd) if name == "xla_highest" else fwd(), np.float64)
                row[f"{name}_rel_err"] = float(np.max(np.abs(got - truth)) / np.max(np.abs(truth)))
    bq, bk, bv = _qkv((B, T, H, D), jnp.bfloat16, 46)
    fwd, grad = _fwd_and_grad(flash(), bq, bk, bv)
    _record(row, "pallas_bf16", _time({"fwd": fwd, "fwd_bwd": grad}, cfg.gpu_iters), None)
    for name in variants:
        if name.startswith("pallas"):
            _ratios(row, name, ("xla_default", "xla_highest"), "ms")
    _print(row)
    return [row]


def _highest(call):
    with jax.default_matmul_precision("highest"):
        return call()


def flash_sweep_rows(cfg: Config) -> list[dict]:
    """Flash attention fwd+bwd at one (T, D), causal bf16, for each tile setting of
    ``cfg.flash_sweep`` against the defaults and cuDNN, timed in the same rounds."""
    if not cfg.flash_sweep:
        return []
    T, D = cfg.flash_sweep_at
    B, H = max(1, cfg.gpu_tokens // T), 2048 // D
    q, k, v = _qkv((B, T, H, D), jnp.bfloat16, 7)
    flops = 2 * B * H * T * T * D
    settings = {"default": None}
    for s in cfg.flash_sweep:
        settings["_".join(map(str, s))] = pk.FlashAttentionBlockSizes(
            *s[:6], num_warps=s[6], num_stages=s[7]
        )
    rows = []
    for mode in ("fwd", "fwd_bwd"):
        fns = {}
        for name, blocks in settings.items():
            fn = functools.partial(pk.flash_attention, causal=True, block_sizes=blocks)
            fns[name] = _fwd_and_grad(fn, q, k, v)[mode == "fwd_bwd"]
        fns["cudnn"] = _fwd_and_grad(_attention("cudnn", True), q, k, v)[mode == "fwd_bwd"]
        rows.append(dict(part="flash_sweep", mode=mode, T=T, D=D, B=B, H=H))
        for name, t in _time(fns, cfg.gpu_iters).items():
            _record(rows[-1], name, {mode: t}, flops)
    for row in rows:
        _print(row)
    return rows


def matmul_rows(cfg: Config) -> list[dict]:
    """Square bf16 matmuls: the Pallas kernel (defaults, and the tile variants at the largest
    size) against XLA's ``jnp.dot``, TFLOP/s from the same rounds."""
    rows = []
    for n in cfg.matmul_sizes:
        kx, ky = jax.random.split(jax.random.key(n))
        x = jax.random.normal(kx, (n, n), jnp.float32).astype(jnp.bfloat16)
        y = jax.random.normal(ky, (n, n), jnp.float32).astype(jnp.bfloat16)
        fns = {
            "pallas": functools.partial(jax.jit(pk.matmul), x, y),
            "xla": functools.partial(jax.jit(jnp.dot), x, y),
        }
        if n == max(cfg.matmul_sizes):
            for s in cfg.matmul_sweep:
                blocks = pk.MatmulBlockSizes(*s[:3], num_warps=s[3], num_stages=s[4])
                f = jax.jit(functools.partial(pk.matmul, block_sizes=blocks))
                fns["pallas_" + "_".join(map(str, s))] = functools.partial(f, x, y)
        row = dict(part="matmul", n=n, dtype="bfloat16")
        for name, t in _time(fns, cfg.gpu_iters).items():
            _record(row, name, {"fwd": t}, 2.0 * n**3)
        for name in fns:
            if name.startswith("pallas"):
                _ratios(row, name, ("xla",), "tflops")
        if "pallas_fwd_tflops" in row:
            row["pallas_fwd_peak_fraction"] = row["pallas_fwd_tflops"] / H200_BF16_PEAK_TFLOPS
        _print(row)
        rows.append(row)
    return rows


def _gates_last(cell):
    """``cell(q, k, v, i, f, **kw)`` as ``(q, k, v, *, i, f, **kw)``: differentiable in q, k, v."""
    return lambda q, k, v, *, i, f, **kw: cell(q, k, v, i, f, **kw)


def mlstm_rows(cfg: Config) -> list[dict]:
    """The chunkwise mLSTM, bf16 inputs: the Pallas kernels (default tiles from
    :mod:`pallas_kernels.fit`) against the XLA chunkwise form, chunk 64, fwd and fwd+bwd, and the
    relative error of h against the XLA form."""
    from jaxlab.methods.xlstm import mlstm

    rows = []
    for B, NH, S, Dk, Dv in cfg.mlstm_shapes:
        keys = jax.random.split(jax.random.key(S + Dk), 5)
        q, k = (jax.random.normal(kk, (B, NH, S, Dk)).astype(jnp.bfloat16) for kk in keys[:2])
        v = jax.random.normal(keys[2], (B, NH, S, Dv)).astype(jnp.bfloat16)
        i = jax.random.normal(keys[3], (B, NH, S)) * 3
        f = jax.random.normal(keys[4], (B, NH, S)) + 2
        impls = {
            "pallas": functools.partial(
                _gates_last(pk.mlstm_chunkwise), i=i, f=f, block_sizes=pk.MLSTMBlockSizes(64)
            ),
            "xla": functools.partial(_gates_last(mlstm), i=i, f=f, form="chunkwise", chunk_size=64),
        }
        row = dict(part="mlstm", B=B, NH=NH, S=S, Dk=Dk, Dv=Dv, dtype="bfloat16")
        pairs = {name: _fwd_and_grad(fn, q, k, v) for name, fn in impls.items()}
        for mode in ("fwd", "fwd_bwd"):
            fns = {name: pair[mode == "fwd_bwd"] for name, pair in pairs.items()}
            for name, t in _time(fns, cfg.gpu_iters).items():
                _record(row, name, {mode: t}, None)
        _ratios(row, "pallas", ("xla",), "ms")
        if "pallas_fwd_ms" in row and "xla_fwd_ms" in row:
            a, b = (np.asarray(pairs[n][0](), np.float64) for n in ("pallas", "xla"))
            row["pallas_rel_err"] = float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
        _print(row)
        rows.append(row)
    return rows


def mgpu_rows(cfg: Config) -> list[dict]:
    """JAX's own Mosaic GPU (Hopper: wgmma, TMA) attention at the sweep's (T, D), causal, against
    cuDNN on the same float16 inputs (the kernel takes float16 only; bf16 failed on the H200):
    what the Mosaic GPU backend reaches on this chip (a reference, not ours)."""
    try:
        from jax.experimental.pallas.ops.gpu import attention_mgpu as mg
    except Exception as err:  # noqa: BLE001  (absent in this JAX: a result)
        return [dict(part="mgpu_reference", error=f"{type(err).__name__}: {err}")]
    T, D = cfg.flash_sweep_at
    B, H = max(1, cfg.gpu_tokens // T), 2048 // D
    q, k, v = _qkv((B, T, H, D), jnp.float16, 9)
    flops = 2 * B * H * T * T * D
    row = dict(part="mgpu_reference", T=T, D=D, B=B, H=H, causal=True, dtype="float16")
    try:
        conf = mg.TuningConfig(block_q=64, block_kv=128, max_concurrent_steps=2, causal=True)
        impls = {"mgpu": lambda q, k, v: mg.attention(q, k, v, conf),
                 "cudnn": _attention("cudnn", True)}  # fmt: skip
        pairs = {name: _fwd_and_grad(fn, q, k, v) for name, fn in impls.items()}
        for mode in ("fwd", "fwd_bwd"):
            times = _time({n: p[mode == "fwd_bwd"] for n, p in pairs.items()}, cfg.gpu_iters)
            for name, t in times.items():
                _record(row, name, {mode: t}, flops)
        _ratios(row, "mgpu", ("cudnn",), "tflops")
    except Exception as err:  # noqa: BLE001
        row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
    _print(row)
    return [row]


GPU_PARTS = {
    "attention": attention_rows,
    "f32_attention": f32_rows,
    "matmul": matmul_rows,
    "mlstm": mlstm_rows,
    "flash_sweep": flash_sweep_rows,
    "mgpu_reference": mgpu_rows,
}


def gpu_summary(rows: list[dict]) -> dict:
    """Every ratio, rate, time and error of the GPU rows under one flat key each (the keys of
    ``summary.json`` that ``scripts/gpu_summary.py`` tabulates)."""
    out = {}
    for row in rows:
        part = row["part"]
        tag = (
            {
                "attention": lambda r: f"T{r['T']}_D{r['D']}_{'causal' if r['causal'] else 'full'}",
                "f32_attention": lambda r: f"T{r['T']}_D{r['D']}",
                "matmul": lambda r: f"n{r['n']}",
                "mlstm": lambda r: f"Dk{r['Dk']}_Dv{r['Dv']}_S{r['S']}",
                "flash_sweep": lambda r: f"T{r['T']}_D{r['D']}",
                "mgpu_reference": lambda r: f"T{r.get('T')}_D{r.get('D')}",
            }[part](row)
            if "error" not in row or "T" in row or "n" in row
            else "failed"
        )
        for key, value in row.items():
            if isinstance(value, float | str) and key not in ("part", "dtype", "mode"):
                mode = f"_{row['mode']}" if "mode" in row else ""
                value = round(value, 4) if isinstance(value, float) else value
                out[f"{part}_{tag}{mode}_{key}"] = value
    return out


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
        if platform == "gpu" or cfg.gpu_anywhere:
            rows = []
            for part, rows_of in GPU_PARTS.items():
                if part == "mgpu_reference" and not cfg.mgpu_reference:
                    continue
                try:
                    rows += rows_of(cfg)
                except Exception as err:  # noqa: BLE001  one part failing keeps the others
                    rows.append(dict(part=part, error=f"{type(err).__name__}: {str(err)[:300]}"))
                    _print(rows[-1])
            for row in rows:
                writer.write(step, dict(row))
                step += 1
            summary.update(gpu_summary(rows))
            attention = [r for r in rows if r["part"] == "attention" and r["causal"]]
            fig = curves_figure(
                {f"{impl} D={D} causal": ([r["T"] for r in attention if r["D"] == D],
                                          [r.get(f"{impl}_fwd_bwd_tflops", math.nan)
                                           for r in attention if r["D"] == D])
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
        if k.startswith(("max_err_", "memory_slope_")) or "_over_" in k
    }
    return summary
