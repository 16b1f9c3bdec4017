"""The Pallas MLR attention kernel against the blockwise XLA path and two dense constructions.

``TestMLRAttention`` runs the kernel in interpret mode on CPU in the GPU style (a key loop inside
each program) for every normalisation, causal, and for both of the kernel's logit paths without
the causal mask (two cases again at a second block setting), and compares the output and dq, dk,
dv with :func:`jaxlab.nn.mlr_attention.mlr_attention` (the blockwise XLA path) and
:func:`jaxlab.nn.mlr_attention.mlr_attention_reference` (the dense construction, written apart
from the kernel); ``TestMLRAttentionTPUStyle`` reruns a subset in the TPU style (sequential
grid axis with VMEM scratch). Then: one level is plain causal softmax attention with scale 1/r,
the dispatch (``impl``) and the one-line errors. Shapes stay tiny: the interpreter costs seconds
per case.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jaxlab.nn.mlr_attention as xla_mlr
from jaxlab.core.errors import ConfigError
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from pallas_kernels import (
    KernelConfigError,
    flash_attention_reference,
    lower,
    mlr_attention,
    mlr_attention_reference,
)
from pallas_kernels.mlr_attention import BlockSizes

# 8-position tiles and 8-channel chunks: ranks (4, 3, 5) give prefix widths 4, 7, 12, so every
# level's last chunk is partly masked. MIXED: unequal query/key tiles, 16-channel chunks.
SMALL = BlockSizes(8, 8, 8, 8, 8, 8, block_d=8)
MIXED = BlockSizes(16, 8, 8, 16, 16, 8, block_d=16)
RANKS = (4, 3, 5)

#               B  T   H  blocks  (the finest of the 3 levels has T/4 positions: 8 or 16)
BLOCK_SETTINGS = {"small": (1, 32, 2, SMALL), "mixed": (2, 64, 1, MIXED)}
# Every normalisation causal at the small setting, and the kernel's two logit paths (factor 1, or
# the block-level factor) without the causal mask; then both at the mixed one. "levels" is None's
# kernel with pre-scaled queries, so it runs once (the interpreter costs seconds per case, so the
# TPU style reruns two).
CASES = [("small", normalize, True) for normalize in (None, "levels", "block_levels")] + [
    ("small", "block_levels", False),
    ("mixed", "block_levels", True),
    ("mixed", None, False),
]
# float32 against float32: the kernel only reorders sums (blockwise softmax, chunked contraction)
# and folds the 1/r_l scales into the queries, so errors stay at a few float32 ulps of O(1) values
# (the flash attention tests use the same bound; pallas_kernels/README.md has the measured errors).
FP32_TOL = 2e-5
# bfloat16 against the float32 truth: the bound of the flash attention tests (8-bit mantissa; the
# kernel rounds the pre-scaled queries, unnormalised probabilities and dS to bf16 before its
# matmuls, and the outputs and grads are rounded).
BF16_TOL = 4e-2


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", metafunc.cls.CASES, ids=lambda c: "-".join(map(str, c)))


def make_inputs(B, T, H, D, seed=0, Dv=None):
    kq, kk, kv, kd = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(kq, (B, T, H, D))
    k = jax.random.normal(kk, (B, T, H, D))
    v = jax.random.normal(kv, (B, T, H, Dv or D))
    do = jax.random.normal(kd, (B, T, H, Dv or D))
    return q, k, v, do


def forward_backward(fn, q, k, v, do):
    """Output and (dq, dk, dv) for the cotangent ``do``, in one jitted computation."""

    @jax.jit
    def run(q, k, v, do):
        out, vjp = jax.vjp(fn, q, k, v)
        return (out, *vjp(do))

    with jax.default_matmul_precision("highest"):
        return run(q, k, v, do)


def assert_close(got, want, tol=FP32_TOL, names=("out", "dq", "dk", "dv")):
    for name, g, w in zip(names, got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=tol, rtol=tol, err_msg=name)


class TestMLRAttention:
    BACKEND = None  # the default style for the platform: the GPU style on CPU
    CASES = CASES
    # Lengths (and level-0 blocks) are multiplied by this: the native GPU class doubles them so
    # the finest level's blocks, hence the tiles, stay >= 16 (tl.dot's minimum).
    SCALE = 1

    def kernel(self, blocks, **kwargs):
        return lambda q, k, v: mlr_attention(
            q, k, v, block_sizes=blocks, interpret=True, backend=self.BACKEND, **kwargs
        )

    def test_matches_the_blockwise_path_and_the_dense_reference(self, case):
        setting, normalize, causal = case
        B, T, H, blocks = BLOCK_SETTINGS[setting]
        q, k, v, do = make_inputs(B, T, H, sum(RANKS))
        kw = dict(ranks=RANKS, causal=causal, normalize=normalize)
        got = forward_backward(self.kernel(blocks, **kw), q, k, v, do)
        blockwise = lambda q, k, v: xla_mlr.mlr_attention(q, k, v, impl="xla", **kw)  # noqa: E731
        assert_close(got, forward_backward(blockwise, q, k, v, do))
        dense = lambda q, k, v: xla_mlr.mlr_attention_reference(q, k, v, **kw)  # noqa: E731
        assert_close(got, forward_backward(dense, q, k, v, do))

    def test_segments_alibi_logit_scale_and_repeated_level0_blocks(self):
        """Packed documents, ALiBi, an extra logit scale, a value head dim of its own and two
        level-0 blocks per row (pairs across them unscored), against the blockwise path."""
        n = self.SCALE
        q, k, v, do = make_inputs(2, 64 * n, 2, sum(RANKS), seed=1, Dv=6)
        pos = jnp.arange(64 * n)
        seg = jnp.stack([(pos >= 20 * n) + (pos >= 45 * n), jnp.zeros(64 * n, int)])
        seg = seg.astype(jnp.int32)
        kw = dict(ranks=RANKS, normalize="block_levels", segment_ids=seg, logit_scale=0.7,
                  alibi_slopes=jnp.array([0.25, 0.0625]), block_len=32 * n)  # fmt: skip
        got = forward_backward(self.kernel(MIXED, **kw), q, k, v, do)
        blockwise = lambda *a: xla_mlr.mlr_attention(*a, impl="xla", **kw)  # noqa: E731
        assert_close(got, forward_backward(blockwise, q, k, v, do))
        ref = forward_backward(lambda *a: mlr_attention_reference(*a, **kw), q, k, v, do)
        assert_close(got, ref)

    def test_one_level_is_causal_softmax_attention_with_scale_one_over_r(self):
        q, k, v, do = make_inputs(1, 32, 2, 8, seed=2)
        got = forward_backward(self.kernel(SMALL, ranks=(8,)), q, k, v, do)
        flash = lambda *a: flash_attention_reference(*a, causal=True, scale=1 / 8)  # noqa: E731
        assert_close(got, forward_backward(flash, q, k, v, do))

    def test_bf16_close_to_float32_truth(self):
        q, k, v, do = make_inputs(1, 32 * self.SCALE, 2, sum(RANKS), seed=5)
        kw = dict(ranks=RANKS, normalize="block_levels")
        bf16 = [x.astype(jnp.bfloat16) for x in (q, k, v, do)]
        got = forward_backward(self.kernel(SMALL, **kw), *bf16)
        assert got[0].dtype == jnp.bfloat16
        f32 = [x.astype(jnp.float32) for x in bf16]
        want = forward_backward(lambda *a: xla_mlr.mlr_attention_reference(*a, **kw), *f32)
        assert_close([g.astype(jnp.float32) for g in got], want, BF16_TOL)


class TestMLRAttentionTPUStyle(TestMLRAttention):
    """The TPU kernel style (sequential grid axis + VMEM scratch, clamped index maps)."""

    BACKEND = "tpu"
    CASES = [("small", "block_levels", True), ("mixed", None, False)]
    test_one_level_is_causal_softmax_attention_with_scale_one_over_r = None  # style-independent
    test_bf16_close_to_float32_truth = None


@pytest.mark.gpu
@pytest.mark.skipif(
    jax.default_backend() != "gpu",
    reason=f"native Triton lowering needs a GPU; JAX's default backend is {jax.default_backend()}",
)
class TestMLRAttentionGPU(TestMLRAttention):
    """Native Triton: tiles and chunks of 16 (tl.dot's minimum), lengths doubled so that every
    test's finest level is 16 positions or more (at 8 the tiles would shrink below 16)."""

    BACKEND = "gpu"
    CASES = [("mixed", n, c) for n in (None, "levels", "block_levels") for c in (True, False)]
    SCALE = 2

    def kernel(self, blocks, **kwargs):
        blocks = BlockSizes(16, 16, 16, 16, 16, 16, block_d=16)
        return lambda q, k, v: mlr_attention(
            q, k, v, block_sizes=blocks, interpret=False, backend="gpu", **kwargs
        )


def test_dense_references_agree():
    """The kernel file's own dense reference against jaxlab's (cheap: no kernel runs)."""
    q, k, v, _ = make_inputs(1, 32, 2, sum(RANKS), seed=3)
    for normalize in (None, "levels", "block_levels"):
        kw = dict(ranks=RANKS, causal=True, normalize=normalize, logit_scale=1.3)
        np.testing.assert_allclose(
            mlr_attention_reference(q, k, v, **kw),
            xla_mlr.mlr_attention_reference(q, k, v, **kw),
            atol=2e-6,
        )


# --------------------------------------------------------------------------------- dispatch


def _launches_pallas(fn, *args) -> bool:
    return "pallas_call" in str(jax.make_jaxpr(fn)(*args))


def test_impl_pallas_runs_the_kernel_and_pads_like_the_xla_path():
    """T = 24 with block_len 32: the dispatch pads before the kernel, as the XLA path does."""
    q, k, v, _ = make_inputs(1, 24, 2, sum(RANKS), seed=4)
    kw = dict(ranks=RANKS, normalize="block_levels", block_len=32)
    fn = lambda *a: xla_mlr.mlr_attention(*a, impl="pallas", **kw)  # noqa: E731
    assert _launches_pallas(fn, q, k, v)
    xla = jax.jit(lambda *a: xla_mlr.mlr_attention(*a, impl="xla", **kw))
    with jax.default_matmul_precision("highest"):
        np.testing.assert_allclose(jax.jit(fn)(q, k, v), xla(q, k, v), atol=FP32_TOL)


def test_auto_follows_the_hardware_switch_and_falls_back_when_tiles_do_not_fit(monkeypatch):
    q, k, v, _ = make_inputs(1, 32, 2, sum(RANKS))

    def launches(impl, ranks=RANKS):  # a fresh function per call: make_jaxpr caches traces
        return _launches_pallas(
            lambda *a: xla_mlr.mlr_attention(*a, ranks=ranks, impl=impl), q, k, v
        )

    assert not launches("auto")  # the CPU never picks Pallas
    monkeypatch.setattr(xla_mlr, "pallas_ready", lambda platform=None, kernel=None: True)
    assert launches("auto")
    assert not any(launches(impl) for impl in ("xla", "xla_chunked", "cudnn"))
    fine = (2, 2, 2, 2, 2, 2)  # 6 levels: finest blocks of 1 position, below the 8-row tiles
    assert not launches("auto", fine)
    with pytest.raises(ConfigError, match="impl 'pallas': .*finest of 6 levels"):
        xla_mlr.mlr_attention(q, k, v, ranks=fine, impl="pallas")
    with pytest.raises(ConfigError, match="unknown mlr_attention impl 'triton'"):
        xla_mlr.mlr_attention(q, k, v, ranks=RANKS, impl="triton")


def test_models_reach_the_kernel_through_attention_impl():
    tokens = jax.random.randint(jax.random.key(0), (1, 32), 1, 32)
    mlr = dict(attention="mlr", attention_ranks=(4, 2, 2))
    tiny = dict(vocab_size=32, seq_len=32, num_layers=1, d_model=16, num_heads=2, **mlr)
    rmt = dict(vocab_size=32, seq_len=32, num_layers=1, rank=2, d_key=8, d_value=8, d_ff=32, **mlr)
    for impl in ("pallas", "xla"):
        for cls, cfg in ((Transformer, TransformerConfig(**tiny, attention_impl=impl)),
                         (RMT, RMTConfig(**rmt, attention_impl=impl))):  # fmt: skip
            # Abstract parameters: tracing the call needs their shapes only, not an eager init.
            graphdef, state = nnx.split(nnx.eval_shape(lambda c=cls, f=cfg: c(f, rngs=nnx.Rngs(0))))
            call = lambda s, t, g=graphdef: nnx.merge(g, s)(t)  # noqa: E731
            assert _launches_pallas(call, state, tokens) == (impl == "pallas")


def test_lowering_table_has_the_kernel():
    """``python -m pallas_kernels.lower`` lowers it (tests/kernels/test_lower.py runs the table)."""
    labels = [c.label for c in lower.cases(kernels=["mlr_attention"])]
    for platform in lower.PLATFORMS:
        for direction in ("fwd", "bwd"):
            assert any(f"mlr_attention    {direction}  {platform:<4}" in x for x in labels)
    assert any("ranks=32|8|6|4|4|4|4|2" in x and "q(1,4096," in x for x in labels)


# ------------------------------------------------------------------------- errors (no kernels run)


@pytest.mark.parametrize(
    "shape, kwargs, message",
    [
        ((1, 32, 2, 12), dict(ranks=(4, 4)), r"sum to 8, not the head dim M=12"),
        ((1, 32, 2, 12), dict(ranks=(12, 0)), r"must be positive ints"),
        ((1, 32, 2, 12), dict(normalize="rows"), r"normalize='rows'"),
        ((1, 40, 2, 12), dict(block_len=32), r"T=40 must be a multiple of block_len=32"),
        ((1, 36, 2, 12), dict(ranks=(4, 4, 2, 2)), r"4 levels need block_len=36 divisible by 2\^3"),
        ((1, 48, 2, 12), {}, r"finest of 3 levels has blocks of 12 positions"),
        ((1, 32, 2, 12), dict(interpret=False, backend="gpu"), r"native GPU kernels need tiles"),
        (
            (1, 256, 2, 12),
            dict(interpret=False, backend="tpu", segment_ids=True),
            r"native TPU segment_ids need key tiles of 128",
        ),  # fmt: skip
        ((1, 32, 2, 12), dict(segment_ids=jnp.ones((1, 5), int)), r"segment_ids\(1, 5\)"),
        ((1, 32, 2, 12), dict(alibi_slopes=jnp.ones(3)), r"alibi_slopes\(3,\)"),
        ((1, 32, 2, 12), dict(block_sizes=(8, 8)), r"block_sizes must be a BlockSizes"),
        ((1, 32, 2, 12), dict(backend="ipu"), r"unknown kernel backend 'ipu'"),
    ],
)
def test_bad_calls_are_one_line_errors(shape, kwargs, message):
    q = jnp.ones(shape)
    kwargs = {"ranks": RANKS, **kwargs}
    if kwargs.get("segment_ids") is True:
        kwargs["segment_ids"] = jnp.zeros(shape[:2], jnp.int32)
    with pytest.raises(KernelConfigError, match=message) as err:
        mlr_attention(q, q, q, **kwargs)
    assert "\n" not in str(err.value)


def test_bad_block_sizes_and_mismatched_arrays():
    with pytest.raises(KernelConfigError, match=r"BlockSizes.block_d=12 must be a power of two"):
        BlockSizes(block_d=12)
    q = jnp.ones((1, 32, 2, 12))
    with pytest.raises(KernelConfigError, match=r"must be \(B, T, H, M\) queries and keys"):
        mlr_attention(q, q[:, :16], q, ranks=RANKS)
