"""Lowers every Pallas kernel for GPUs and TPUs on any machine: ``python -m pallas_kernels.lower``.

``python -m pallas_kernels.lower --platform=cuda|tpu|all`` runs ``jax.export`` of each kernel, its
forward and its backward (``jax.vjp`` through the ``custom_vjp``), for the platform's shipped block
setting at representative shapes, from ``jax.ShapeDtypeStruct`` inputs (no data, no device). The
export runs JAX's real native lowering on this machine: Pallas → Triton IR for ``cuda`` (the
kernels pass ``jax.experimental.pallas.triton.CompilerParams``, so JAX 0.10 picks its Triton
backend, not Mosaic GPU, whose lowering these kernel bodies do not fit; with no GPU present Triton
lowers for compute capability 9.0, Hopper) and Pallas → Mosaic for ``tpu``. It rejects what the
hardware's toolchain would reject at that stage: an op without a Triton or Mosaic lowering rule, a
block shape off the TPU's (8, 128) tiling or not a power of two for Triton, a lowering rule that
needs the device present, a custom call other than the kernel's. It cannot check the device
compilers that run later (Triton's PTX pipeline, Mosaic's layout passes in libtpu) nor numerics
and speed: ``scripts/gpu_bench.sh`` measures those on the hardware.

Each case prints one line (kernel, direction, platform, shapes and options, ``ok`` with the number
of kernel launches, or the first line of the lowering error); the exit status is 1 if any case
failed. A new kernel joins by adding its case generator to :data:`KERNELS`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal

import jax
import jax.numpy as jnp
from jax import export

from pallas_kernels import flash_attention, matmul
from pallas_kernels.flash_attention import BlockSizes as FlashBlockSizes
from pallas_kernels.matmul import BlockSizes as MatmulBlockSizes
from pallas_kernels.mlr_attention import BlockSizes as MLRBlockSizes
from pallas_kernels.mlr_attention import mlr_attention
from pallas_kernels.mlstm_chunkwise import BlockSizes as MLSTMBlockSizes
from pallas_kernels.mlstm_chunkwise import mlstm_chunkwise

__all__ = [
    "ABSTRACT_GPU",
    "FORWARD_ONLY",
    "KERNELS",
    "PLATFORMS",
    "Case",
    "lower",
    "main",
    "run_cases",
    "target_device",
]

Platform = Literal["cuda", "tpu"]
PLATFORMS: tuple[Platform, ...] = ("cuda", "tpu")
STYLE = {"cuda": "gpu", "tpu": "tpu"}  # kernel style of each lowering platform
# The custom call each platform's kernels lower to (Triton through XLA:GPU; Mosaic TPU). Export
# refuses custom calls without compatibility guarantees unless named here, and a case fails unless
# its module launches at least one of these: a kernel that fell back to the interpreter, or to
# Mosaic GPU (``mosaic_gpu_v2``, what a GPU pallas_call without Triton parameters gets), fails.
KERNEL_CUSTOM_CALLS = {"cuda": ("__gpu$xla.gpu.triton",), "tpu": ("tpu_custom_call",)}
S = jax.ShapeDtypeStruct
DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32}
# The GPU that a cuda lowering targets when this machine has none: Triton needs a compute
# capability, which JAX 0.10 assumed (9.0) and JAX 0.11 reads off an abstract device.
ABSTRACT_GPU = "NVIDIA H200"


@dataclasses.dataclass(frozen=True)
class Case:
    """One lowering: ``fn(*args)`` exported for ``platform``.

    ``args`` are the abstract inputs, or a function that builds them when lowering (a backward
    case's cotangent has the forward's output shape, and tracing the forward may itself fail: that
    failure belongs to the case, not to the whole table). ``skip`` holds the reason when a case
    cannot lower because of JAX itself (never for a kernel bug, which is fixed instead); skipped
    cases print their reason and do not fail the run.
    """

    kernel: str
    direction: Literal["fwd", "bwd"]
    platform: Platform
    description: str
    fn: Callable
    args: tuple[jax.ShapeDtypeStruct, ...] | Callable[[], tuple[jax.ShapeDtypeStruct, ...]]
    skip: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kernel:<16} {self.direction}  {self.platform:<4}  {self.description}"


def fwd_and_bwd(
    kernel: str, platform: Platform, description: str, fn: Callable, args: Sequence, n_diff: int
) -> Iterator[Case]:
    """The forward case of ``fn(*args)`` and the backward one: the vjp in its first ``n_diff``
    arguments for a cotangent of the output's shape (the remaining arguments are constants)."""

    def bwd(*args_and_cotangent):
        *operands, cotangent = args_and_cotangent
        diff, const = operands[:n_diff], operands[n_diff:]
        _, vjp = jax.vjp(lambda *d: fn(*d, *const), *diff)
        return vjp(cotangent)

    args = tuple(args)
    with_cotangent = lambda: (*args, jax.eval_shape(fn, *args))  # noqa: E731
    yield Case(kernel, "fwd", platform, description, fn, args)
    yield Case(kernel, "bwd", platform, description, bwd, with_cotangent)


# ------------------------------------------------------------------------------ flash attention

# The block settings that ship, per platform: the kernel defaults, which every jaxlab model uses
# (dot_product_attention passes no block_sizes; None: on GPUs the defaults fitted to the shapes and
# the device, pallas_kernels.fit). A model that picks its own adds a line here.
FLASH_BLOCKS: dict[Platform, dict[str, FlashBlockSizes | None]] = {
    "cuda": {"gpu-default": None},
    "tpu": {"tpu-default": FlashBlockSizes.for_backend("tpu")},
}
#             B  T    S    H  K  D    causal segments alibi
FLASH_SHAPES = [
    (2, 256, 256, 4, 4, 64, False, False, False),  # block multiples
    (1, 256, 256, 4, 4, 128, True, False, False),
    (1, 256, 256, 8, 2, 64, True, True, True),  # GQA 4:1 with every mask
    (1, 200, 200, 4, 1, 128, True, False, True),  # MQA, lengths off the blocks
    (1, 300, 300, 4, 2, 128, False, True, False),  # segments with padded tails
    (1, 128, 320, 4, 2, 64, True, False, True),  # fewer queries than keys, key tail
    (2, 40, 40, 4, 4, 64, True, True, False),  # short: blocks shrink to 64
]


def flash_attention_cases(platform: Platform) -> Iterator[Case]:
    for (name, blocks), shape, dtype in (
        (b, s, d) for b in FLASH_BLOCKS[platform].items() for s in FLASH_SHAPES for d in DTYPES
    ):
        B, T, Sk, H, K, D, causal, segments, alibi = shape
        args = [S((B, T, H, D), DTYPES[dtype]), S((B, Sk, K, D), DTYPES[dtype])]
        args.append(args[1])
        options = ["causal"] if causal else []
        if segments:
            args.append(S((B, T), jnp.int32))
            options.append("segments")
        if alibi:
            args.append(S((H,), jnp.float32))
            options.append("alibi")

        def fn(q, k, v, *extra, causal=causal, segments=segments, alibi=alibi, blocks=blocks):
            seg = extra[0] if segments else None
            slopes = extra[-1] if alibi else None
            return flash_attention(
                q, k, v, causal=causal, segment_ids=seg, alibi_slopes=slopes,
                block_sizes=blocks, interpret=False, backend=STYLE[platform],
            )  # fmt: skip

        description = (
            f"q({B},{T},{H},{D}) kv({B},{Sk},{K},{D}) {dtype} {' '.join(options) or 'full'} "
            f"blocks={name}"
        )
        yield from fwd_and_bwd("flash_attention", platform, description, fn, args, n_diff=3)


# --------------------------------------------------------------------------------------- matmul

MATMUL_BLOCKS: dict[Platform, dict[str, MatmulBlockSizes | None]] = {
    "cuda": {"gpu-default": None},
    "tpu": {"tpu-default": MatmulBlockSizes.for_backend("tpu")},
}
# The MLP widths (d_model -> d_ff) of the RMT paper's presets (Table 2): the Transformer baselines
# 49M/160M/260M/405M have d_model 384/768/896/1024 and d_ff = 4 d_model; the RMTs 46M/134M/206M/305M
# have core width R·Dv = 12·32, 12·64, 14·64, 16·64 and the same d_ff. tests/kernels/test_lower.py
# pins this list to the jaxlab configs (pallas_kernels does not import jaxlab).
MLP_WIDTHS = [(384, 1536), (768, 3072), (896, 3584), (1024, 4096)]
MLP_TOKENS = (2, 100)  # (batch, tokens): 200 rows, not a tile multiple; the shapes are the widths
# The other shipped epilogues, once each at the smallest width.
EXTRA_ACTIVATIONS = ("relu", "silu")


def matmul_cases(platform: Platform) -> Iterator[Case]:
    layers = []
    for d, f in MLP_WIDTHS:
        layers += [(d, f, "gelu"), (f, d, None)]  # W_in with the fused GELU, then W_out
    layers += [(*MLP_WIDTHS[0], act) for act in EXTRA_ACTIVATIONS]
    for (name, blocks), (k, n, act), dtype in (
        (b, layer, d) for b in MATMUL_BLOCKS[platform].items() for layer in layers for d in DTYPES
    ):

        def fn(x, w, act=act, blocks=blocks):
            return matmul(
                x, w, activation=act, block_sizes=blocks, interpret=False, backend=STYLE[platform]
            )

        args = (S((*MLP_TOKENS, k), DTYPES[dtype]), S((k, n), DTYPES[dtype]))
        description = f"x({','.join(map(str, args[0].shape))}) @ w({k},{n}) {dtype} "
        description += f"{act or 'linear'} blocks={name}"
        yield from fwd_and_bwd("matmul", platform, description, fn, args, n_diff=2)


# ----------------------------------------------------------------------------- chunkwise mLSTM

# The chunk lengths that ship: each platform's kernel default, and the xLSTM models' chunk_size
# (``xLSTMConfig.chunk_size``, 64, which form="pallas" passes on either platform).
MLSTM_BLOCKS: dict[Platform, dict[str, MLSTMBlockSizes]] = {
    "cuda": {"gpu-default": MLSTMBlockSizes.for_backend("gpu")},
    "tpu": {"tpu-default": MLSTMBlockSizes.for_backend("tpu"), "model": MLSTMBlockSizes(64)},
}
#             B  NH  S    Dk   Dv   a chunk multiple; a padded tail; xLSTM 7B's head (tiled on GPUs)
MLSTM_SHAPES = [(1, 2, 256, 64, 128), (1, 2, 200, 128, 128), (1, 1, 128, 256, 512)]


def mlstm_cases(platform: Platform) -> Iterator[Case]:
    for blocks, (B, NH, Sq, Dk, Dv), dtype in (
        (b, s, d) for b in MLSTM_BLOCKS[platform].values() for s in MLSTM_SHAPES for d in DTYPES
    ):
        dt = DTYPES[dtype]
        args = [S((B, NH, Sq, Dk), dt), S((B, NH, Sq, Dk), dt), S((B, NH, Sq, Dv), dt)]
        args += [S((B, NH, Sq), jnp.float32)] * 2

        def fn(q, k, v, i, f, blocks=blocks):
            return mlstm_chunkwise(
                q, k, v, i, f, block_sizes=blocks, interpret=False, backend=STYLE[platform]
            )

        description = f"q({B},{NH},{Sq},{Dk}) v(..,{Dv}) {dtype} chunk={blocks.chunk}"
        yield from fwd_and_bwd("mlstm_chunkwise", platform, description, fn, args, n_diff=5)


# -------------------------------------------------------------------------------- MLR attention

#            B  T     H  ranks (level 0 first; sum = D)   causal normalize  segments+alibi  dtype
MLR_SHAPES = [
    (1, 4096, 4, (32, 8, 6, 4, 4, 4, 4, 2), True, "block_levels", False, "bf16"),  # issue 14's
    (1, 1024, 4, (16, 8, 4, 4), True, "levels", True, "f32"),  # finest block 128: TPU segments
    (2, 512, 2, (64, 32, 16, 16), False, None, False, "bf16"),  # D = 128, not causal
]


def mlr_attention_cases(platform: Platform) -> Iterator[Case]:
    blocks = MLRBlockSizes.for_backend(STYLE[platform])  # the shipped defaults (tiles shrink)
    for B, T, H, ranks, causal, normalize, masks, dtype in MLR_SHAPES:
        D = sum(ranks)
        args = [S((B, T, H, D), DTYPES[dtype])] * 3
        if masks:
            args += [S((B, T), jnp.int32), S((H,), jnp.float32)]

        def fn(q, k, v, *extra, ranks=ranks, causal=causal, normalize=normalize):
            seg, slopes = extra if extra else (None, None)
            return mlr_attention(
                q, k, v, ranks=ranks, causal=causal, normalize=normalize, segment_ids=seg,
                alibi_slopes=slopes, block_sizes=blocks, interpret=False, backend=STYLE[platform],
            )  # fmt: skip

        options = ["causal" if causal else "full", str(normalize)] + ["segments alibi"] * masks
        description = (
            f"q({B},{T},{H},{D}) ranks={'|'.join(map(str, ranks))} {dtype} {' '.join(options)}"
        )
        yield from fwd_and_bwd("mlr_attention", platform, description, fn, args, n_diff=3)


# ------------------------------------------------------------------------------------ the table

# kernel name -> case generator for one platform. A new kernel (chunkwise mLSTM, MLR attention)
# joins the command by adding its generator here.
KERNELS: dict[str, Callable[[Platform], Iterable[Case]]] = {
    "flash_attention": flash_attention_cases,
    "matmul": matmul_cases,
    "mlstm_chunkwise": mlstm_cases,
    "mlr_attention": mlr_attention_cases,
}
# Kernels whose backward is XLA, not Pallas: the table lowers their forward only.
FORWARD_ONLY: frozenset[str] = frozenset()


def cases(platforms: Iterable[Platform] = PLATFORMS, kernels: Iterable[str] | None = None):
    """Every case of ``kernels`` (default all) on ``platforms``, in table order."""
    names = list(KERNELS) if kernels is None else list(kernels)
    return [case for p in platforms for name in names for case in KERNELS[name](p)]


def target_device(platform: Platform):
    """The context a lowering for ``platform`` runs in: for ``cuda`` on a machine without a GPU,
    an abstract mesh with an abstract :data:`ABSTRACT_GPU` (Hopper) device where this JAX has
    ``jax.sharding.AbstractDevice`` (0.11 refuses a Triton lowering without one); else nothing."""
    if platform != "cuda" or jax.default_backend() == "gpu":
        return contextlib.nullcontext()
    if not hasattr(jax.sharding, "AbstractDevice"):  # older JAX assumed a Hopper GPU by itself
        return contextlib.nullcontext()
    device = jax.sharding.AbstractDevice(device_kind=ABSTRACT_GPU, num_cores=None, platform="gpu")
    mesh = jax.sharding.AbstractMesh(
        (1,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,), abstract_device=device
    )
    return jax.sharding.use_abstract_mesh(mesh)


def lower(case: Case) -> str:
    """Exports ``case`` and returns ``"ok (n kernels)"`` or the first line of the error."""
    checks = [export.DisabledSafetyCheck.custom_call(n) for n in KERNEL_CUSTOM_CALLS[case.platform]]
    try:
        args = case.args() if callable(case.args) else case.args
        with target_device(case.platform):
            exported = export.export(
                jax.jit(case.fn), platforms=[case.platform], disabled_checks=checks
            )(*args)
    except Exception as err:  # the lowering's own message is the result
        first = (str(err).strip().splitlines() or [""])[0]
        return f"FAIL {type(err).__name__}: {first}"
    targets = re.findall(r"custom_call @([^\s(]+)", exported.mlir_module())
    launches = sum(t in KERNEL_CUSTOM_CALLS[case.platform] for t in targets)
    if not launches:
        expected = " or ".join(KERNEL_CUSTOM_CALLS[case.platform])
        found = ", ".join(sorted(set(targets))) or "none"
        return f"FAIL no {expected} kernel in the lowered module (custom calls: {found})"
    return f"ok ({launches} kernel{'s' * (launches > 1)})"


def run_cases(selected: Sequence[Case], out=None) -> int:
    """Lowers each case, prints one line per case and a summary to ``out`` (default stdout);
    returns the number of failures."""
    out = sys.stdout if out is None else out
    start, failed, skipped = time.perf_counter(), 0, 0
    for case in selected:
        if case.skip:
            result, skipped = f"skip: {case.skip}", skipped + 1
        else:
            result = lower(case)
            failed += result.startswith("FAIL")
        print(f"{case.label}  {result}", file=out, flush=True)
    seconds = time.perf_counter() - start
    ok = len(selected) - failed - skipped
    print(
        f"{len(selected)} cases: {ok} ok, {failed} failed, {skipped} skipped ({seconds:.1f} s)",
        file=out,
    )
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pallas_kernels.lower",
        description="Lower every Pallas kernel (forward and backward) for GPU and/or TPU.",
    )
    parser.add_argument("--platform", choices=[*PLATFORMS, "all"], default="all")
    parser.add_argument("--kernel", choices=list(KERNELS), action="append",
                        help="only this kernel (repeatable); default: all")  # fmt: skip
    parser.add_argument("--match", default="", help="only cases whose line contains this text")
    args = parser.parse_args(argv)
    platforms = PLATFORMS if args.platform == "all" else (args.platform,)
    selected = [c for c in cases(platforms, args.kernel) if args.match in c.label]
    if not selected:
        print(f"no case matches {args.match!r}", file=sys.stderr)
        return 2
    print(f"jax {jax.__version__}; lowering for {', '.join(platforms)} on {jax.default_backend()}")
    return 1 if run_cases(selected) else 0


if __name__ == "__main__":
    sys.exit(main())
