"""Attention against an independent float64 numpy implementation, the dispatch, and its errors.

The XLA reference and the chunked path are checked against numpy for every mask; the contract test
checks that every implementation in ``AttentionImpl`` agrees with the XLA one, outputs and grads
(Pallas through its CPU interpreter, cuDNN only on a GPU).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_kernels
from jaxlab.core.errors import ConfigError
from jaxlab.nn import pallas_switch
from jaxlab.nn.attention import (
    CHUNKED_MIN_SEQ_LEN,
    AttentionImpl,
    alibi_slopes,
    default_impl,
    dot_product_attention,
    xla_attention,
    xla_chunked_attention,
)
from jaxlab.nn.pallas_switch import PALLAS_ENV
from jaxlab.testing.compiles import backend_compiles


def numpy_attention(q, k, v, causal, segment_ids=None, slopes=None):
    """Loop-over-heads float64 reference, written independently of the jnp code."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    B, T, H, D = q.shape
    K = k.shape[2]
    out = np.zeros_like(q)
    for b in range(B):
        for h in range(H):
            kv = h // (H // K)
            s = q[b, :, h] @ k[b, :, kv].T / np.sqrt(D)
            i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
            if slopes is not None:
                s = s - float(slopes[h]) * np.abs(i - j)
            allowed = np.ones((T, T), bool)
            if causal:
                allowed &= j <= i
            if segment_ids is not None:
                seg = np.asarray(segment_ids[b])
                allowed &= seg[:, None] == seg[None, :]
            s = np.where(allowed, s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            out[b, :, h] = (p / p.sum(-1, keepdims=True)) @ v[b, :, kv]
    return out


def _qkv(key, B=2, T=12, H=4, K=4, D=8):
    kq, kk, kv = jax.random.split(jax.random.key(key), 3)
    return (
        jax.random.normal(kq, (B, T, H, D)),
        jax.random.normal(kk, (B, T, K, D)),
        jax.random.normal(kv, (B, T, K, D)),
    )


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("masks", ["none", "segments", "alibi", "both"])
def test_matches_numpy_reference(causal, kv_heads, masks):
    q, k, v = _qkv(0, K=kv_heads)
    seg = jnp.array([[1] * 5 + [2] * 7, [1] * 12]) if masks in ("segments", "both") else None
    slopes = alibi_slopes(4) if masks in ("alibi", "both") else None
    got = dot_product_attention(q, k, v, causal=causal, segment_ids=seg, alibi_slopes=slopes)
    want = numpy_attention(q, k, v, causal, seg, slopes)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)  # float32 vs float64


def test_bfloat16_inputs_stay_close():
    q, k, v = _qkv(1)
    got = dot_product_attention(*(a.astype(jnp.bfloat16) for a in (q, k, v)), causal=True)
    assert got.dtype == jnp.bfloat16
    # bf16 keeps 8 mantissa bits: ~4e-3 relative per rounding, a few roundings deep.
    np.testing.assert_allclose(got.astype(np.float32), numpy_attention(q, k, v, True), atol=5e-2)


def test_alibi_slopes_follow_the_paper():
    np.testing.assert_allclose(alibi_slopes(8), [2.0 ** (-i) for i in range(1, 9)], rtol=1e-6)
    assert alibi_slopes(12).shape == (12,) and len(set(np.asarray(alibi_slopes(12)))) == 12


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(impl="flashy"), "unknown attention impl 'flashy'"),
        (dict(segment_ids=jnp.ones((2, 5), jnp.int32)), "segment_ids"),
        (dict(alibi_slopes=jnp.ones(3)), "alibi_slopes"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs, message):
    q, k, v = _qkv(2)
    with pytest.raises(ConfigError, match=message):
        dot_product_attention(q, k, v, causal=True, **kwargs)


def test_bad_shapes_are_config_errors():
    q, k, v = _qkv(3)
    with pytest.raises(ConfigError, match="not a multiple"):
        dot_product_attention(q, k[:, :, :3], v[:, :, :3], causal=True)
    with pytest.raises(ConfigError, match=r"\(B, T, H, E\)"):
        dot_product_attention(q[0], k, v, causal=True)


def test_zero_kv_heads_is_a_config_error():
    q, k, v = _qkv(3)
    with pytest.raises(ConfigError, match="k and v need at least one head"):
        dot_product_attention(q, k[:, :, :0], v[:, :, :0], causal=False)


@pytest.mark.parametrize("impl", ["xla", "xla_chunked", "pallas"])
def test_causal_with_more_queries_than_keys_is_refused_by_every_impl(impl):
    """Queries sit at the end of the keys, so with T > S the first T - S see no key: one error
    everywhere (the XLA paths used to return the mean of V there, Pallas raised)."""
    q, k, v = _qkv(9)
    with pytest.raises(ConfigError, match="causal attention needs at least as many keys"):
        dot_product_attention(q, k[:, :6], v[:, :6], causal=True, impl=impl)
    out = dot_product_attention(q[:, :6], k, v, causal=True, impl=impl)  # T < S stays allowed
    assert out.shape == q[:, :6].shape


@pytest.mark.parametrize("chunk", [5, 16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("masks", ["none", "both"])
def test_chunked_matches_numpy_reference(chunk, causal, masks):
    q, k, v = _qkv(4, K=2)
    seg = jnp.array([[1] * 5 + [2] * 7, [1] * 12]) if masks == "both" else None
    slopes = alibi_slopes(4) if masks == "both" else None
    got = xla_chunked_attention(
        q, k, v, causal=causal, segment_ids=seg, alibi_slopes=slopes, chunk_size=chunk
    )
    np.testing.assert_allclose(got, numpy_attention(q, k, v, causal, seg, slopes), atol=2e-5)


def _out_and_grads(impl, q, k, v, do, **kwargs):
    @jax.jit
    def run(q, k, v, do):
        fn = lambda q, k, v: dot_product_attention(q, k, v, impl=impl, **kwargs)  # noqa: E731
        out, vjp = jax.vjp(fn, q, k, v)
        return (out, *vjp(do))

    return run(q, k, v, do)


@pytest.mark.parametrize("impl", [i for i in AttentionImpl if i is not AttentionImpl.AUTO])
def test_every_impl_agrees_with_xla(impl):
    """The contract: any implementation may replace the XLA one (outputs and dq, dk, dv)."""
    if impl is AttentionImpl.CUDNN and jax.default_backend() != "gpu":
        pytest.skip(f"cuDNN needs an NVIDIA GPU; JAX's default backend is {jax.default_backend()}")
    q, k, v = _qkv(5, T=20, K=2, D=16)
    do = jax.random.normal(jax.random.key(6), q.shape)
    kwargs = dict(causal=True)
    if impl is not AttentionImpl.CUDNN:  # cuDNN's fused kernel takes neither
        kwargs |= dict(segment_ids=jnp.array([[1] * 9 + [2] * 11, [1] * 20]))
        kwargs |= dict(alibi_slopes=alibi_slopes(4))
    # cuDNN's fused kernel takes fp16/bf16/fp8 only (as jax.nn.dot_product_attention's): it gets
    # bf16 inputs, the reference the same values in float32, and bf16's tolerance (8 bits).
    tol = 2e-5
    if impl is AttentionImpl.CUDNN:
        q, k, v, do = (x.astype(jnp.bfloat16) for x in (q, k, v, do))
        tol = 3e-2
    with jax.default_matmul_precision("highest"):
        want = _out_and_grads("xla", *(x.astype(jnp.float32) for x in (q, k, v, do)), **kwargs)
        got = _out_and_grads(impl, q, k, v, do, **kwargs)
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        scale = float(jnp.max(jnp.abs(w)))
        np.testing.assert_allclose(
            np.asarray(g, np.float32), w, atol=tol * scale, rtol=tol, err_msg=name
        )


def test_chunked_grads_match_xla_over_many_chunks():
    q, k, v = _qkv(7, T=37, K=1)
    do = jax.random.normal(jax.random.key(8), q.shape)

    @jax.jit
    def grads(q, k, v):
        chunked = lambda *a: xla_chunked_attention(*a, causal=True, chunk_size=8)  # noqa: E731
        reference = lambda *a: xla_attention(*a, causal=True)  # noqa: E731
        loss = lambda f: lambda *a: jnp.vdot(f(*a), do)  # noqa: E731
        grad = lambda f: jax.grad(loss(f), argnums=(0, 1, 2))(q, k, v)  # noqa: E731
        return grad(chunked), grad(reference)

    for g, w in zip(*grads(q, k, v), strict=True):
        np.testing.assert_allclose(g, w, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
    "platform, seq_len, expected",
    [
        # Pallas is the accelerator default only once verified on hardware (see default_impl).
        ("gpu", 128, AttentionImpl.XLA),
        ("tpu", 8192, AttentionImpl.XLA_CHUNKED),
        ("cpu", None, AttentionImpl.XLA),
        ("cpu", CHUNKED_MIN_SEQ_LEN - 1, AttentionImpl.XLA),
        ("cpu", CHUNKED_MIN_SEQ_LEN, AttentionImpl.XLA_CHUNKED),
    ],
)
def test_default_impl(platform, seq_len, expected, monkeypatch):
    monkeypatch.delenv(PALLAS_ENV, raising=False)
    assert default_impl(platform, seq_len) is expected


@pytest.mark.parametrize("verified", [False, True], ids=["unverified", "verified"])
@pytest.mark.parametrize("setting", ["on", "off", "auto", " ON ", "", "1", "no"])
def test_pallas_env_switch(setting, verified, monkeypatch):
    """JAXLAB_PALLAS flips both auto dispatches on GPU/TPU, at call time, and never on the CPU."""
    from jaxlab.nn.layers import default_matmul_impl

    table = {p: dict.fromkeys(pallas_switch.KERNELS, verified) for p in ("gpu", "tpu")}
    monkeypatch.setattr(pallas_switch, "PALLAS_VERIFIED_ON_HARDWARE", table)
    monkeypatch.setenv(PALLAS_ENV, setting)
    on = {"on": True, "1": True, "off": False, "no": False}.get(setting.strip().lower(), verified)
    for platform in ("gpu", "tpu"):
        want = AttentionImpl.PALLAS if on else AttentionImpl.XLA
        assert default_impl(platform, 128) is want
        assert default_matmul_impl(platform) == ("pallas" if on else "xla")
    assert default_impl("cpu", 128) is AttentionImpl.XLA
    assert default_impl("cpu", CHUNKED_MIN_SEQ_LEN) is AttentionImpl.XLA_CHUNKED
    assert default_matmul_impl("cpu") == "xla"


def test_bad_pallas_env_value_is_a_config_error(monkeypatch):
    from jaxlab.nn.layers import default_matmul_impl

    monkeypatch.setenv(PALLAS_ENV, "maybe")
    for call in (lambda: default_impl("gpu"), lambda: default_matmul_impl("cpu")):
        with pytest.raises(ConfigError, match="JAXLAB_PALLAS='maybe' must be auto, or") as err:
            call()
        assert "\n" not in str(err.value)


def test_pallas_errors_become_config_errors(monkeypatch):
    """The kernel's own errors (block sizes, platform) reach the user as ConfigError; shape
    errors never get there, the shared q/k/v check raises them first."""

    def refuse(*args, **kwargs):
        raise pallas_kernels.KernelConfigError("flash_attention: native TPU kernels need ...")

    monkeypatch.setattr(pallas_kernels, "flash_attention", refuse)
    q, k, v = _qkv(9)
    with pytest.raises(ConfigError, match="impl 'pallas': flash_attention: native TPU"):
        dot_product_attention(q, k, v, causal=True, impl="pallas")


@pytest.mark.parametrize("impl", ["xla", "xla_chunked", "pallas", "cudnn"])
def test_every_impl_gets_the_one_shape_check(impl):
    """One q/k/v check (pallas_kernels.check_qkv) serves every impl: the same one-line message,
    before any implementation runs (segment ids with fewer queries than keys, say)."""
    q, k, v = _qkv(9)
    with pytest.raises(ConfigError, match="segment_ids need as many keys as queries") as err:
        dot_product_attention(
            q[:, :6], k, v, causal=True, segment_ids=jnp.zeros((2, 6), jnp.int32), impl=impl
        )
    assert str(err.value).startswith("attention: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            dict(k=jnp.ones((2, 12, 3, 8))),
            "attention: 4 query heads are not a multiple of 3 kv heads",
        ),
        (dict(alibi_slopes=jnp.ones(3)), "attention: alibi_slopes(3,) must be (H,)=(4,)"),
        (dict(causal=True, k=jnp.ones((2, 6, 4, 8))), "attention: causal attention needs at least"),
    ],
)
def test_the_dispatch_and_the_flash_kernel_share_one_qkv_check(mutate, message):
    """One check (pallas_kernels.check_qkv): the kernel's message is the dispatch's, prefixed by
    the kernel's name."""
    q = jnp.ones((2, 12, 4, 8))
    kwargs = dict(q=q, k=q, v=q, causal=False)
    kwargs.update(mutate)
    kwargs["v"] = kwargs["k"]
    with pytest.raises(ConfigError) as ours:
        dot_product_attention(**kwargs)
    with pytest.raises(pallas_kernels.KernelConfigError) as kernel:
        pallas_kernels.flash_attention(**kwargs)
    assert str(ours.value).startswith(message) and "\n" not in str(ours.value)
    assert str(kernel.value) == "flash_" + str(ours.value)


def test_float64_inputs_give_float64_accurate_attention(x64):
    """With x64 on, the XLA reference and the chunked path (forward and its custom backward)
    accumulate in float64: 1e-12 against float64 numpy (float32 accumulation is ~1e-7 off); the
    kernel file's jnp reference too."""
    q, k, v = (x.astype(jnp.float64) for x in _qkv(9, T=13, K=2))
    seg = jnp.array([[1] * 6 + [2] * 7, [1] * 13])
    slopes = jnp.asarray(alibi_slopes(4), jnp.float64)
    want = numpy_attention(q, k, v, True, seg, slopes)
    masks = dict(causal=True, segment_ids=seg, alibi_slopes=slopes)
    chunked = lambda *a: xla_chunked_attention(*a, chunk_size=5, **masks)  # noqa: E731
    reference = lambda *a: xla_attention(*a, **masks)  # noqa: E731
    kernel_reference = lambda *a: pallas_kernels.flash_attention_reference(*a, **masks)  # noqa: E731
    for fn in (reference, chunked, kernel_reference):
        got = jax.jit(fn)(q, k, v)
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)
    do = jax.random.normal(jax.random.key(10), q.shape, jnp.float64)
    grad = lambda f: jax.jit(jax.grad(lambda *a: jnp.vdot(f(*a), do), (0, 1, 2)))(q, k, v)  # noqa: E731
    for g, r in zip(grad(chunked), grad(reference), strict=True):
        assert g.dtype == jnp.float64
        np.testing.assert_allclose(g, r, atol=1e-12, rtol=0)


@pytest.mark.parametrize("impl", ["xla", "xla_chunked", "pallas", "auto"])
@pytest.mark.parametrize(
    "B, T, S", [(0, 8, 8), (2, 0, 8), (2, 0, 0), (2, 4, 0)], ids=["B=0", "T=0", "T=S=0", "S=0"]
)
def test_empty_axes_give_what_jax_gives(B, T, S, impl):
    """An empty batch, query or key axis (before: a ZeroDivisionError from the chunked path) gives
    jax.nn.dot_product_attention's result (empty, or zeros for queries without keys; non-causal,
    as JAX's has no causal mask for T != S), through every impl."""
    q = jnp.ones((B, T, 4, 8))
    k = jnp.ones((B, S, 2, 8))
    out = dot_product_attention(q, k, k, causal=False, impl=impl)
    want = jax.nn.dot_product_attention(q, k, k)
    assert out.shape == want.shape == (B, T, 4, 8)
    np.testing.assert_array_equal(out, want)
    if impl == "xla_chunked":
        np.testing.assert_array_equal(xla_chunked_attention(q, k, k, causal=False), want)


def test_a_repeated_eager_chunked_call_compiles_nothing():
    """Called outside jit, the chunked path is one program: the second call with the same shapes
    compiles nothing (its key-chunk scan was traced and compiled again on every call)."""
    q = jax.random.normal(jax.random.key(5), (1, 48, 2, 8))
    call = lambda: xla_chunked_attention(q, q, q, causal=True, chunk_size=16)  # noqa: E731
    call()
    with backend_compiles() as names:
        call()
    assert names == []
