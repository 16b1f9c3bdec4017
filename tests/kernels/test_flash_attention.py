"""The Pallas flash attention against its jnp reference: outputs and dq, dk, dv, and its errors.

``TestFlashAttention`` runs in interpret mode on CPU in the GPU kernel style (a key loop inside each
program); ``TestFlashAttentionTPUStyle`` reruns a subset in the TPU style (the key loop as the last,
sequential grid axis with VMEM scratch), the only way that code path is checked without a TPU. The
``gpu`` / ``tpu`` classes rerun everything with native lowering and skip on other backends.
Shapes stay tiny: the interpreter costs a few seconds per case.
"""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import KernelConfigError, flash_attention, flash_attention_reference, lower
from pallas_kernels.flash_attention import BlockSizes

SMALL = BlockSizes(16, 16, 16, 16, 16, 16)
MIXED = BlockSizes(32, 16, 16, 32, 32, 16)  # unequal tiles: lengths pad to 32, keys step by 16
# Key blocks wider than query blocks: T = S = 40 pads to 48 queries but 64 keys, so the query- and
# key-side segment ids have different padded lengths.
WIDE_K = BlockSizes(16, 64, 16, 64, 16, 64)

#        B  T   S   H  K  D   causal segments alibi blocks
CASES = {
    "mha": (2, 32, 32, 2, 2, 16, False, False, False, SMALL),
    "causal": (1, 48, 48, 2, 2, 16, True, False, False, MIXED),
    "mqa_segments": (1, 32, 32, 4, 1, 8, False, True, False, MIXED),
    "alibi_tail_d12": (1, 37, 37, 2, 2, 12, False, False, True, MIXED),
    "causal_cross_length": (1, 24, 40, 2, 1, 16, True, False, True, SMALL),
    "gqa_causal_segments_alibi": (2, 40, 40, 4, 2, 16, True, True, True, SMALL),
    "gqa_causal_segments_alibi_mixed": (2, 40, 40, 4, 2, 16, True, True, True, MIXED),
    "segments_wide_key_blocks": (2, 40, 40, 2, 2, 16, False, True, False, WIDE_K),
    "causal_segments_alibi_wide_key_blocks": (1, 40, 40, 4, 2, 16, True, True, True, WIDE_K),
}
# float32 against float32: the kernel only reorders sums (blockwise softmax), so errors stay at a
# few float32 ulps of O(1) values; measured <= 4e-6 on these shapes.
FP32_TOL = 2e-5
# bfloat16 (8-bit mantissa, 2^-8 ≈ 4e-3 relative per rounding): the kernel rounds the unnormalised
# tile probabilities and dS to bf16 before its matmuls and outputs/grads are rounded to bf16, so it
# sits a few roundings of O(1) values away from the float32 truth. Measured max errors here: 1.1e-2
# (kernel) against 1.6e-2 for the jnp reference itself run in bf16; the bound leaves ~3x margin.
BF16_TOL = 4e-2


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", metafunc.cls.CASES)


def make_inputs(case, dtype=jnp.float32, seed=0):
    B, T, S, H, K, D, causal, segments, alibi, _ = CASES[case]
    kq, kk, kv, kd = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(kq, (B, T, H, D), dtype)
    k = jax.random.normal(kk, (B, S, K, D), dtype)
    v = jax.random.normal(kv, (B, S, K, D), dtype)
    do = jax.random.normal(kd, (B, T, H, D), dtype)
    kwargs = dict(causal=causal)
    if segments:  # three documents in row 0, one in the others
        seg = (jnp.arange(T) >= T // 3).astype(jnp.int32) + (jnp.arange(T) >= 2 * T // 3)
        kwargs["segment_ids"] = jnp.stack([seg] + [jnp.zeros(T, jnp.int32)] * (B - 1))
    if alibi:
        kwargs["alibi_slopes"] = 2.0 ** -jnp.arange(1.0, H + 1.0)
    return (q, k, v, do), kwargs


def forward_backward(fn, q, k, v, do):
    """Output and (dq, dk, dv) for the cotangent ``do``, in one jitted computation."""

    @jax.jit
    def run(q, k, v, do):
        out, vjp = jax.vjp(fn, q, k, v)
        return (out, *vjp(do))

    return run(q, k, v, do)


def assert_close(got, want, tol, names=("out", "dq", "dk", "dv")):
    for name, g, w in zip(names, got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_allclose(
            np.asarray(g, np.float32), np.asarray(w, np.float32), atol=tol, rtol=tol, err_msg=name
        )


class TestFlashAttention:
    INTERPRET = True
    BACKEND = None  # the default style for the platform: the GPU style on CPU
    CASES = list(CASES)

    def call(self, q, k, v, blocks, **kwargs):
        return flash_attention(
            q, k, v, block_sizes=blocks, interpret=self.INTERPRET, backend=self.BACKEND, **kwargs
        )

    def test_matches_reference_fp32(self, case):
        (q, k, v, do), kwargs = make_inputs(case)
        blocks = CASES[case][-1]
        got = forward_backward(lambda *a: self.call(*a, blocks, **kwargs), q, k, v, do)
        with jax.default_matmul_precision("highest"):
            want = forward_backward(lambda *a: flash_attention_reference(*a, **kwargs), q, k, v, do)
        assert_close(got, want, FP32_TOL)

    def test_bf16_close_to_float32_truth(self):
        case = "gqa_causal_segments_alibi"
        (q, k, v, do), kwargs = make_inputs(case, jnp.bfloat16)
        got = forward_backward(lambda *a: self.call(*a, SMALL, **kwargs), q, k, v, do)
        assert got[0].dtype == jnp.bfloat16
        f32 = [a.astype(jnp.float32) for a in (q, k, v, do)]
        with jax.default_matmul_precision("highest"):
            want = forward_backward(lambda *a: flash_attention_reference(*a, **kwargs), *f32)
        assert_close([g.astype(jnp.float32) for g in got], want, BF16_TOL)


class TestFlashAttentionTPUStyle(TestFlashAttention):
    """The TPU kernel style (sequential grid axis + VMEM scratch), interpreted on CPU."""

    BACKEND = "tpu"
    CASES = [
        "causal",
        "causal_cross_length",
        "gqa_causal_segments_alibi_mixed",
        "causal_segments_alibi_wide_key_blocks",
    ]


@pytest.mark.gpu
@pytest.mark.skipif(
    jax.default_backend() != "gpu",
    reason=f"native Triton lowering needs a GPU; JAX's default backend is {jax.default_backend()}",
)
class TestFlashAttentionGPU(TestFlashAttention):
    INTERPRET = False
    BACKEND = "gpu"
    CASES = list(CASES)  # head dims below 16 are zero-padded to 16 for tl.dot


@pytest.mark.tpu
@pytest.mark.skipif(
    jax.default_backend() != "tpu",
    reason=f"native Mosaic lowering needs a TPU; JAX's default backend is {jax.default_backend()}",
)
class TestFlashAttentionTPU(TestFlashAttention):
    INTERPRET = False
    BACKEND = "tpu"
    CASES = ["causal", "causal_cross_length", "gqa_causal_segments_alibi"]


# ------------------------------------------------------------------------- errors (no kernels run)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(block_q=48), r"BlockSizes.block_q=48 must be a power of two"),
        (dict(block_k=0), r"BlockSizes.block_k=0 must be a power of two"),
        (dict(block_q_dq=4), r"block_q_dq=4 must be a power of two >= 8"),
        (dict(block_k_dkv=64.0), r"block_k_dkv=64.0 must be a power of two"),
    ],
)
def test_invalid_block_sizes_are_clear_errors(fields, message):
    with pytest.raises(KernelConfigError, match=message):
        BlockSizes(**fields)


def test_block_sizes_must_be_the_dataclass():
    (q, k, v, _), _ = make_inputs("mha")
    with pytest.raises(KernelConfigError, match="block_sizes must be a BlockSizes"):
        flash_attention(q, k, v, block_sizes=(64, 64))


@pytest.mark.parametrize(
    "mutate, kwargs, message",
    [
        (lambda q, k, v: (q, k[:, :, :1, :5], v), {}, "do not fit"),
        (lambda q, k, v: (q, k[:, :, :0], v[:, :, :0]), {}, "k and v need at least one head"),
        (lambda q, k, v: (q[:, :, :1], k, v), {}, "not a multiple of 2 kv heads"),
        (lambda q, k, v: (q, k[:, :16], v[:, :16]), dict(causal=True), "causal attention needs at"),
        (lambda q, k, v: (q[0], k, v), {}, r"\(B, T, H, E\)"),
        (lambda q, k, v: (q, k, v), dict(alibi_slopes=jnp.ones(3)), "alibi_slopes"),
        (lambda q, k, v: (q, k, v), dict(segment_ids=jnp.ones((2, 5), int)), "segment_ids"),
        (lambda q, k, v: (q, k, v), dict(backend="ipu"), "unknown kernel backend 'ipu'"),
    ],
)
def test_bad_calls_are_clear_errors(mutate, kwargs, message):
    (q, k, v, _), _ = make_inputs("mha")
    with pytest.raises(KernelConfigError, match=message):
        flash_attention(*mutate(q, k, v), **kwargs)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="checks the CPU refusal")
def test_native_kernel_on_cpu_is_refused():
    (q, k, v, _), _ = make_inputs("mha")
    with pytest.raises(KernelConfigError, match="cannot run on the cpu backend"):
        flash_attention(q, k, v, interpret=False, backend="gpu")


@pytest.mark.parametrize("style, platform", [("gpu", "cpu"), ("tpu", "cpu"), ("gpu", "tpu")])
def test_native_kernel_is_refused_when_lowered_for_another_platform(style, platform):
    """The guard works at lowering time (jit, export), so it names the platform being lowered for
    and leaves lowering for the kernel's own platform free (pallas_kernels.lower does that)."""
    (q, k, v, _), _ = make_inputs("mha")
    fn = jax.jit(lambda q, k, v: flash_attention(q, k, v, interpret=False, backend=style))
    message = f"native {style} kernel cannot run on the {platform} backend"
    with pytest.raises(KernelConfigError, match=message):
        jax.export.export(fn, platforms=[platform])(q, k, v)


def test_vmapped_native_kernel_lowers_for_its_platform_only():
    """vmap passes through the guard: refused for the CPU, exported for CUDA (Triton)."""
    q = jnp.ones((2, 1, 16, 2, 16))
    fn = jax.jit(jax.vmap(lambda q: flash_attention(q, q, q, interpret=False, backend="gpu")))
    with pytest.raises(KernelConfigError, match="native gpu kernel cannot run on the cpu backend"):
        fn(q)
    triton = jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")
    with lower.target_device("cuda"):  # an abstract Hopper GPU where this machine has none
        exported = jax.export.export(fn, platforms=["cuda"], disabled_checks=[triton])(q)
    assert exported.out_avals[0].shape == q.shape


def test_kernel_traces_under_x64(x64):
    """Index arithmetic stays int32 when a user (or a solver) has enabled 64-bit mode."""
    q = jax.random.normal(jax.random.key(0), (1, 40, 2, 8), jnp.float32)
    out = flash_attention(q, q, q, causal=True)
    np.testing.assert_allclose(out, flash_attention_reference(q, q, q, causal=True), atol=2e-5)


def _dot_precisions(fn, *args) -> set[str]:
    """The precisions of the dot_generals inside the kernels that ``fn`` launches."""
    found = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                found.add(str(eqn.params["precision"]))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def test_float32_dots_use_three_tf32_passes_in_native_gpu_kernels_only():
    """Issue 46's float32 pathology: "HIGHEST" dots lowered to Triton's FMA path (many times XLA's
    time; the measurements are in pallas_kernels/README.md). Native GPU kernels now ask for three
    TF32 passes (as accurate, on the tensor cores); the interpreter and TPU kernels keep HIGHEST;
    ``precision`` overrides it; bf16 inputs ask for none (tensor cores)."""
    q = jnp.ones((1, 64, 2, 64), jnp.float32)
    native = lambda q, **kw: flash_attention(q, q, q, interpret=False, backend="gpu", **kw)  # noqa: E731
    assert _dot_precisions(native, q) == {str(jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3)}
    tf32 = jax.lax.DotAlgorithmPreset.TF32_TF32_F32
    assert _dot_precisions(lambda q: native(q, precision=tf32), q) == {str(tf32)}
    interpreted = lambda q: flash_attention(q, q, q, interpret=True, backend="gpu")  # noqa: E731
    assert _dot_precisions(interpreted, q) == {str((jax.lax.Precision.HIGHEST,) * 2)}
    tpu = lambda q: flash_attention(q, q, q, interpret=False, backend="tpu")  # noqa: E731
    assert _dot_precisions(tpu, jnp.ones((1, 128, 2, 64))) == {
        str((jax.lax.Precision.HIGHEST,) * 2)
    }
    assert _dot_precisions(native, q.astype(jnp.bfloat16)) == {"None"}
