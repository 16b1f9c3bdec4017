"""The Pallas tiled matmul against its jnp reference, the MLP that uses it, and its errors.

``TestMatmul`` runs interpreted on CPU in the GPU kernel style; ``TestMatmulTPUStyle`` reruns it in
the TPU style (contracting blocks on a sequential grid axis, VMEM accumulator); the ``gpu``/``tpu``
classes rerun it with native lowering and skip elsewhere.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.nn.layers import MLP
from pallas_kernels import KernelConfigError, matmul, matmul_reference
from pallas_kernels.matmul import BlockSizes

#          x shape       y shape    blocks
CASES = {
    "tails_3d": ((2, 20, 40), (40, 24), BlockSizes(16, 16, 16)),
    "rect_mixed": ((32, 64), (64, 48), BlockSizes(32, 16, 32)),
}
FP32_TOL = 2e-5  # float32 sums in another order; values are O(10)
ALL = [(case, act) for case in CASES for act in (None, "gelu", "relu", "silu")]


def pytest_generate_tests(metafunc):
    if "case_activation" in metafunc.fixturenames:
        metafunc.parametrize("case_activation", metafunc.cls.PARAMS, ids=str)


def forward_backward(fn, x, y, g):
    @jax.jit
    def run(x, y, g):
        out, vjp = jax.vjp(fn, x, y)
        return (out, *vjp(g))

    return run(x, y, g)


def inputs(case, dtype=jnp.float32):
    x_shape, y_shape, blocks = CASES[case]
    kx, ky, kg = jax.random.split(jax.random.key(0), 3)
    out_shape = (*x_shape[:-1], y_shape[1])
    x, y = jax.random.normal(kx, x_shape, dtype), jax.random.normal(ky, y_shape, dtype)
    return x, y, jax.random.normal(kg, out_shape, dtype), blocks


class TestMatmul:
    INTERPRET = True
    BACKEND = None
    PARAMS = ALL

    def test_matches_reference_fp32(self, case_activation):
        case, activation = case_activation
        x, y, g, blocks = inputs(case)
        kernel = lambda x, y: matmul(  # noqa: E731
            x, y, activation=activation, block_sizes=blocks, interpret=self.INTERPRET,
            backend=self.BACKEND,
        )  # fmt: skip
        got = forward_backward(kernel, x, y, g)
        with jax.default_matmul_precision("highest"):
            reference = lambda x, y: matmul_reference(x, y, activation=activation)  # noqa: E731
            want = forward_backward(reference, x, y, g)
        for name, a, b in zip(("out", "dx", "dy"), got, want, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype, name
            np.testing.assert_allclose(a, b, atol=FP32_TOL, rtol=FP32_TOL, err_msg=name)

    def test_bf16_accumulates_in_float32(self):
        # K = 1024 bf16 products summed in float32 leave only the final rounding to bf16: 2^-8
        # relative (|values| up to ~100); a bf16 running sum would add one rounding per block.
        kx, ky = jax.random.split(jax.random.key(1))
        x = jax.random.normal(kx, (32, 1024), jnp.bfloat16)
        y = jax.random.normal(ky, (1024, 32), jnp.bfloat16)
        got = matmul(x, y, block_sizes=BlockSizes(16, 16, 64), interpret=self.INTERPRET,
                     backend=self.BACKEND)  # fmt: skip
        assert got.dtype == jnp.bfloat16
        truth = np.asarray(x, np.float64) @ np.asarray(y, np.float64)
        rel = np.abs(np.asarray(got, np.float64) - truth) / (np.abs(truth) + 1.0)
        assert rel.max() < 2**-8 + 1e-3


class TestMatmulTPUStyle(TestMatmul):
    BACKEND = "tpu"
    PARAMS = [("tails_3d", "gelu"), ("rect_mixed", None)]


@pytest.mark.gpu
@pytest.mark.skipif(
    jax.default_backend() != "gpu",
    reason=f"native Triton lowering needs a GPU; JAX's default backend is {jax.default_backend()}",
)
class TestMatmulGPU(TestMatmul):
    INTERPRET = False
    BACKEND = "gpu"


@pytest.mark.tpu
@pytest.mark.skipif(
    jax.default_backend() != "tpu",
    reason=f"native Mosaic lowering needs a TPU; JAX's default backend is {jax.default_backend()}",
)
class TestMatmulTPU(TestMatmul):
    INTERPRET = False
    BACKEND = "tpu"


def test_mlp_with_pallas_matmul_matches_xla():
    """Same parameters, same function: outputs and parameter gradients agree."""
    kwargs = dict(out_std=0.02, rngs=nnx.Rngs(0))
    xla = MLP(16, 48, **kwargs)
    pallas = MLP(16, 48, matmul_impl="pallas", out_std=0.02, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(2), (2, 8, 16))

    @jax.jit
    def loss_and_grads(model):
        return nnx.value_and_grad(lambda m: jnp.sum(m(x) ** 2))(model)

    with jax.default_matmul_precision("highest"):
        (want, want_g), (got, got_g) = loss_and_grads(xla), loss_and_grads(pallas)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="checks the CPU refusal")
def test_native_matmul_on_cpu_is_refused_eagerly_and_under_jit():
    x = jnp.ones((16, 16))
    for call in (matmul, jax.jit(matmul, static_argnames=("interpret", "backend"))):
        with pytest.raises(KernelConfigError, match="native tpu kernel cannot run on the cpu"):
            call(x, x, interpret=False, backend="tpu")


def test_mlp_rejects_unknown_matmul_impl():
    with pytest.raises(ValueError, match="unknown matmul_impl 'cutlass'"):
        MLP(4, 8, out_std=0.02, matmul_impl="cutlass", rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x, y: matmul(x, y[:5]), r"do not fit"),
        (lambda x, y: matmul(x, y[None]), r"y must be \(I, O\)"),
        (lambda x, y: matmul(x, y, activation="tanh"), "unknown activation 'tanh'"),
        (lambda x, y: matmul(x, y, block_sizes=(16, 16, 16)), "must be a matmul BlockSizes"),
        (lambda x, y: BlockSizes(block_m=96), r"BlockSizes.block_m=96 must be a power of two"),
        (lambda x, y: BlockSizes(block_k=4), r"block_k=4 must be a power of two >= 8"),
    ],
)
def test_bad_calls_are_clear_errors(call, message):
    x, y = jnp.ones((4, 8)), jnp.ones((8, 4))
    with pytest.raises(KernelConfigError, match=message):
        call(x, y)


def test_auto_matmul_impl_follows_the_hardware_switch(monkeypatch):
    from jaxlab.nn import pallas_switch
    from jaxlab.nn.layers import default_matmul_impl

    monkeypatch.delenv(pallas_switch.PALLAS_ENV, raising=False)
    assert [default_matmul_impl(p) for p in ("cpu", "gpu", "tpu")] == ["xla"] * 3
    table = {p: dict.fromkeys(pallas_switch.KERNELS, True) for p in ("gpu", "tpu")}
    monkeypatch.setattr(pallas_switch, "PALLAS_VERIFIED_ON_HARDWARE", table)
    assert [default_matmul_impl(p) for p in ("cpu", "gpu", "tpu")] == ["xla", "pallas", "pallas"]


def test_auto_is_per_kernel_as_measured(monkeypatch):
    """The shipped table: on GPUs only the mLSTM was measured at least as fast as its XLA path
    (pallas_kernels/README.md); every kernel stays off on TPUs (unmeasured) and on the CPU."""
    from jaxlab.core.errors import ConfigError
    from jaxlab.nn.pallas_switch import KERNELS, PALLAS_ENV, pallas_ready

    monkeypatch.delenv(PALLAS_ENV, raising=False)
    assert [k for k in KERNELS if pallas_ready("gpu", k)] == ["mlstm"]
    assert not any(pallas_ready(p, k) for p in ("tpu", "cpu") for k in KERNELS)
    assert not pallas_ready("gpu")  # None: only when every kernel is verified
    monkeypatch.setenv(PALLAS_ENV, "on")
    assert all(pallas_ready("gpu", k) for k in KERNELS) and not pallas_ready("cpu", "mlstm")
    with pytest.raises(ConfigError, match="unknown kernel 'conv'"):
        pallas_ready("gpu", "conv")


def test_models_run_their_mlps_through_the_pallas_matmul():
    """The model path: an RMT whose config picks the Pallas matmul gives the XLA model's logits."""
    from jaxlab.core.errors import ConfigError
    from jaxlab.methods.rmt import RMT, RMTConfig

    cfg = RMTConfig(seq_len=8, num_layers=1, rank=2, d_key=4, d_value=8, d_ff=32)
    tokens = jnp.arange(8)[None] % 7
    xla = RMT(dataclasses.replace(cfg, matmul_impl="xla"), rngs=nnx.Rngs(0))
    pallas = RMT(dataclasses.replace(cfg, matmul_impl="pallas"), rngs=nnx.Rngs(0))
    assert pallas.layers[0].ff.mlp.up.matmul_impl == "pallas"
    with jax.default_matmul_precision("highest"):
        np.testing.assert_allclose(pallas(tokens), xla(tokens), atol=1e-5)
    with pytest.raises(ConfigError, match="model.matmul_impl='cublas' is not an option"):
        dataclasses.replace(cfg, matmul_impl="cublas")
