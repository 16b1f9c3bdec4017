"""MLR attention: the blockwise form against the dense construction and an independent numpy one.

The numpy oracle decides, pair by pair, which levels cover it (same block of length T / 2^l) and
sums those levels' scaled dot products, written without the jnp code's reshapes or masks.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_kernels
from jaxlab.core.errors import ConfigError
from jaxlab.nn.attention import alibi_slopes, dot_product_attention
from jaxlab.nn.mlr_attention import (
    blockwise_full_attention,
    mlr_attention,
    mlr_attention_reference,
    mlr_covering_levels,
    mlr_qk_flop_ratio,
)
from jaxlab.testing.compiles import backend_compiles

RANKS = (4, 2, 1, 1)  # D = 8, finest blocks of T / 8


def numpy_mlr_logits(q, k, ranks, normalize):
    """Float64 ``(B, H, T, T)`` MLR logits, pair by pair."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    B, T, H, _ = q.shape
    starts = np.concatenate([[0], np.cumsum(ranks)])
    out = np.zeros((B, H, T, T))
    for i in range(T):
        for j in range(T):
            total, covering = np.zeros((B, H)), 0
            for level, r in enumerate(ranks):
                block = T // 2**level
                if i // block == j // block:
                    a, b = starts[level], starts[level + 1]
                    total += np.einsum("bhd,bhd->bh", q[:, i, :, a:b], k[:, j, :, a:b]) / r
                    covering += 1
            if normalize == "levels":
                total /= len(ranks)
            elif normalize == "block_levels":
                total /= covering
            out[:, :, i, j] = total
    return out


def numpy_attention_from_logits(s, v, causal, segment_ids=None, slopes=None):
    B, H, T, _ = s.shape
    i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    if slopes is not None:
        s = s - np.asarray(slopes, np.float64)[None, :, None, None] * np.abs(i - j)
    allowed = np.ones((B, 1, T, T), bool)
    if causal:
        allowed &= (j <= i)[None, None]
    if segment_ids is not None:
        seg = np.asarray(segment_ids)
        allowed &= (seg[:, :, None] == seg[:, None, :])[:, None]
    s = np.where(allowed, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", p, np.asarray(v, np.float64))


def _qkv(seed, B=2, T=16, H=2, D=8, Dv=4):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return (
        jax.random.normal(kq, (B, T, H, D)),
        jax.random.normal(kk, (B, T, H, D)),
        jax.random.normal(kv, (B, T, H, Dv)),
    )


def test_flop_ratio_of_the_paper_ranks():
    assert mlr_qk_flop_ratio((32, 8, 6, 4, 4, 4, 4, 2)) == pytest.approx(0.6006, abs=5e-4)
    assert mlr_qk_flop_ratio((16,)) == 1.0


def test_covering_levels_match_the_pairwise_rule():
    count = mlr_covering_levels(16, 4)
    for i in range(16):
        for j in range(16):
            assert count[i, j] == sum(i // (16 >> lv) == j // (16 >> lv) for lv in range(4))
    # The block structure: the finest 2x2 blocks on the diagonal are covered by all 4 levels,
    # the two halves' cross block by level 0 only.
    assert (count[:2, :2] == 4).all() and (count[8:, :8] == 1).all() and count[4, 0] == 2


@pytest.mark.parametrize("normalize", [None, "levels", "block_levels"])
@pytest.mark.parametrize("causal", [True, False])
def test_blockwise_and_dense_match_numpy(normalize, causal):
    q, k, v = _qkv(0)
    want = numpy_attention_from_logits(numpy_mlr_logits(q, k, RANKS, normalize), v, causal)
    kw = dict(ranks=RANKS, causal=causal, normalize=normalize)
    for fn in (mlr_attention, mlr_attention_reference):
        got = jax.jit(functools.partial(fn, **kw))(q, k, v)
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


def test_segments_alibi_and_logit_scale_match_numpy():
    q, k, v = _qkv(1)
    seg = jnp.array([[1] * 5 + [2] * 11, [3] * 16])
    slopes = alibi_slopes(2)
    fn = functools.partial(mlr_attention, ranks=RANKS, normalize="block_levels", logit_scale=0.5)
    got = jax.jit(fn)(q, k, v, segment_ids=seg, alibi_slopes=slopes)
    s = numpy_mlr_logits(q, k, RANKS, "block_levels") * 0.5
    np.testing.assert_allclose(got, numpy_attention_from_logits(s, v, True, seg, slopes), atol=2e-5)


def test_one_level_is_causal_softmax_with_scale_one_over_r():
    q, k, v = _qkv(2, Dv=8)
    got = mlr_attention(q, k, v, ranks=(8,))
    want = dot_product_attention(q, k, v, causal=True, scale=1 / 8, impl="xla")
    np.testing.assert_allclose(got, want, atol=2e-6)


def test_blockwise_full_attention_is_plain_attention():
    q, k, v = _qkv(3, Dv=8)
    for causal in (True, False):
        got = blockwise_full_attention(q, k, v, num_levels=4, causal=causal)
        want = dot_product_attention(q, k, v, causal=causal, impl="xla")
        np.testing.assert_allclose(got, want, atol=2e-6)


def test_halves_interact_only_through_level_zero():
    """A query in the second half depends on a first-half key's channels of level 0 only."""
    q, k, v = _qkv(4, B=1, T=8, H=1)
    ranks = (2, 2, 2, 2)

    def out_last(k_):
        return mlr_attention(q, k_, v, ranks=ranks, normalize="block_levels")[0, -1].sum()

    dk = jax.jit(jax.grad(out_last))(k)[0, :, 0].reshape(8, 4, 2)  # (key, level, channel)
    for j in range(8):
        for level in range(4):
            block = 8 >> level
            covers = 7 // block == j // block
            size = float(jnp.abs(dk[j, level]).max())
            assert (size > 1e-6) if covers else (size == 0.0), (j, level, size)
    # In particular the first half (keys 0..3) is reached by level 0 alone.
    np.testing.assert_array_equal(dk[:4, 1:], 0.0)


@pytest.mark.parametrize("normalize", [None, "block_levels"])
def test_gradients_match_the_dense_reference(normalize):
    q, k, v = _qkv(5)
    seg = jnp.array([[1] * 9 + [2] * 7, [1] * 16])
    w = jax.random.normal(jax.random.key(9), v.shape)

    def loss(fn):
        return lambda q_, k_, v_: jnp.sum(
            w * fn(q_, k_, v_, ranks=RANKS, normalize=normalize, segment_ids=seg)
        )

    got = jax.jit(jax.grad(loss(mlr_attention), argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(loss(mlr_attention_reference), argnums=(0, 1, 2)))(q, k, v)
    for g, r in zip(got, want, strict=True):
        np.testing.assert_allclose(g, r, atol=2e-5, rtol=2e-5)


def test_an_eager_call_runs_the_blockwise_path_as_one_program():
    """Called outside ``jit``, the blockwise path (a scan per region, hundreds of small operations)
    is one compiled program with its gradient's, not an op-by-op dispatch, which compiled each
    operation on its own."""
    q, k, v = _qkv(7, T=32, D=11)  # shapes no other test compiles
    ranks = (5, 3, 2, 1)
    with backend_compiles() as compiles:
        out = mlr_attention(q, k, v, ranks=ranks, normalize="block_levels")
        jax.grad(lambda q: mlr_attention(q, k, v, ranks=ranks).sum())(q)
    assert len(compiles) <= 8, compiles  # op by op: hundreds
    want = numpy_attention_from_logits(numpy_mlr_logits(q, k, ranks, "block_levels"), v, True)
    np.testing.assert_allclose(out, want, atol=2e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("tile", [48, 64])
def test_regions_run_in_steps_match_numpy(tile, causal):
    """Regions run a few query rows at a time (``tile`` 48: 3 rows of the coarse regions' 16 keys,
    padding every one of them, 1 row of the finest; 64: 4 rows, dividing them), with segments and
    ALiBi: the same attention as the numpy oracle."""
    q, k, v = _qkv(10, T=32)
    seg = jnp.array([[1] * 13 + [2] * 19, [4] * 32])
    slopes = alibi_slopes(2)
    fn = functools.partial(
        mlr_attention, ranks=RANKS, causal=causal, normalize="block_levels", tile=tile
    )
    got = jax.jit(fn)(q, k, v, segment_ids=seg, alibi_slopes=slopes)
    s = numpy_mlr_logits(q, k, RANKS, "block_levels")
    want = numpy_attention_from_logits(s, v, causal, seg, slopes)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


def test_stepped_gradients_match_the_dense_reference():
    """The backward pass (per region, recomputed from the saved log-sum-exp) on padded steps."""
    q, k, v = _qkv(11, T=32)
    seg = jnp.array([[1] * 20 + [2] * 12, [1] * 32])
    w = jax.random.normal(jax.random.key(12), v.shape)
    kw = dict(ranks=RANKS, normalize="block_levels", segment_ids=seg, alibi_slopes=alibi_slopes(2))

    def loss(fn, **extra):
        return lambda q_, k_, v_: jnp.sum(w * fn(q_, k_, v_, **kw, **extra))

    got = jax.jit(jax.grad(loss(mlr_attention, tile=48), argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(loss(mlr_attention_reference), argnums=(0, 1, 2)))(q, k, v)
    for g, r in zip(got, want, strict=True):
        np.testing.assert_allclose(g, r, atol=2e-5, rtol=2e-5)


def test_stepped_full_attention_and_repeated_blocks():
    """One level (a causal diagonal region, one query row a step) and level-0 blocks that repeat
    past ``block_len``, both in steps."""
    q, k, v = _qkv(13, T=32, Dv=8)
    want = dot_product_attention(q, k, v, causal=True, impl="xla")
    for levels in (1, 3):
        got = jax.jit(functools.partial(blockwise_full_attention, num_levels=levels, tile=48))
        np.testing.assert_allclose(got(q, k, v), want, atol=2e-6)
    full = jax.jit(functools.partial(mlr_attention, ranks=RANKS, tile=48))(q, k, v)
    twice = [jnp.concatenate([a, a], axis=1) for a in (q, k, v)]
    rep = jax.jit(functools.partial(mlr_attention, ranks=RANKS, block_len=32, tile=48))(*twice)
    np.testing.assert_allclose(rep[:, 32:], full, atol=2e-6)
    with pytest.raises(ConfigError, match="tile"):
        mlr_attention(q, k, v, ranks=RANKS, tile=0)


@pytest.mark.parametrize(
    "ranks, T, match",
    [((4, 2), 16, "sum to"), ((), 16, "non-empty"), ((2, 2, 2, 1, 1), 12, "divide")],
)
def test_bad_ranks_raise_one_line_config_errors(ranks, T, match):
    q, k, v = _qkv(6, T=T)
    with pytest.raises(ConfigError, match=match):
        mlr_attention(q, k, v, ranks=ranks)


def test_bad_normalize_raises():
    q, k, v = _qkv(6)
    with pytest.raises(ConfigError, match="normalize"):
        mlr_attention(q, k, v, ranks=RANKS, normalize="rows")


def test_shorter_inputs_keep_the_blocks_of_a_full_row():
    """A causal prefix (any length) sees exactly what it sees inside the full row; past
    ``block_len`` the level-0 blocks repeat."""
    q, k, v = _qkv(7)
    full = mlr_attention(q, k, v, ranks=RANKS, normalize="block_levels")
    for t in (1, 5, 11):
        part = mlr_attention(
            q[:, :t], k[:, :t], v[:, :t], ranks=RANKS, normalize="block_levels", block_len=16
        )
        np.testing.assert_allclose(part, full[:, :t], atol=2e-6)
    twice = [jnp.concatenate([a, a], axis=1) for a in (q, k, v)]
    rep = mlr_attention(*twice, ranks=RANKS, normalize="block_levels", block_len=16)
    np.testing.assert_allclose(rep[:, 16:], full, atol=2e-6)
    with pytest.raises(ConfigError, match="non-causal"):
        mlr_attention(q[:, :5], k[:, :5], v[:, :5], ranks=RANKS, causal=False, block_len=16)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (dict(alibi_slopes=jnp.ones(3)), r"mlr_attention: alibi_slopes(3,) must be (H,)=(2,)"),
        (dict(segment_ids=jnp.ones((1, 5), int)), r"mlr_attention: segment_ids(1, 5) must be"),
        (dict(k=jnp.ones((1, 8, 2, 8))), r"mlr_attention: q(1, 16, 2, 8), k(1, 8, 2, 8), v("),
    ],
)
def test_the_xla_path_and_the_kernel_share_one_qkv_check(mutate, message):
    """One check (pallas_kernels.check_qkv) for both entry points: the same one-line message, a
    ConfigError here and a KernelConfigError from the kernel."""
    q = jnp.ones((1, 16, 2, sum(RANKS)))
    kwargs = dict(q=q, k=q, v=q, ranks=RANKS)
    kwargs.update(mutate)
    with pytest.raises(ConfigError) as ours:
        mlr_attention(**kwargs)
    with pytest.raises(pallas_kernels.KernelConfigError) as kernel:
        pallas_kernels.mlr_attention(**kwargs)
    assert str(ours.value) == str(kernel.value)
    assert str(ours.value).startswith(message) and "\n" not in str(ours.value)


def _qkv64(seed, **shape):
    return [x.astype(jnp.float64) for x in _qkv(seed, **shape)]


def test_float64_inputs_give_float64_accurate_attention(x64):
    """With x64 on, float64 inputs accumulate in float64 (promote_types(float64, float32)), in
    steps, with segments and ALiBi: 1e-12 against the float64 numpy construction (float32
    accumulation is ~1e-7 off), forward and gradients; the kernel file's dense reference too."""
    q, k, v = _qkv64(14, T=32)
    seg = jnp.array([[1] * 13 + [2] * 19, [4] * 32])
    kw = dict(ranks=RANKS, normalize="block_levels", logit_scale=0.7, segment_ids=seg,
              alibi_slopes=jnp.asarray(alibi_slopes(2), jnp.float64))  # fmt: skip
    want = numpy_attention_from_logits(
        numpy_mlr_logits(q, k, RANKS, "block_levels") * 0.7, v, True, seg, kw["alibi_slopes"]
    )
    for fn in (
        functools.partial(mlr_attention, tile=48),
        mlr_attention_reference,
        pallas_kernels.mlr_attention_reference,
    ):
        got = jax.jit(functools.partial(fn, **kw))(q, k, v)
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)
    w = jax.random.normal(jax.random.key(15), v.shape, jnp.float64)
    loss = lambda fn: lambda *a: jnp.vdot(w, fn(*a, **kw))  # noqa: E731
    got = jax.jit(jax.grad(loss(functools.partial(mlr_attention, tile=48)), (0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(loss(mlr_attention_reference), (0, 1, 2)))(q, k, v)
    for g, r in zip(got, want, strict=True):
        assert g.dtype == jnp.float64
        np.testing.assert_allclose(g, r, atol=1e-12, rtol=0)
    full = blockwise_full_attention(q, k, v, num_levels=3, tile=48)
    s = np.einsum("bthd,bshd->bhts", np.asarray(q), np.asarray(k)) / np.sqrt(8)
    np.testing.assert_allclose(full, numpy_attention_from_logits(s, v, True), atol=1e-12, rtol=0)


@pytest.mark.parametrize("impl", ["xla", "pallas", "auto"])
@pytest.mark.parametrize("shape", [(0, 16, 2), (2, 0, 2)], ids=["B=0", "T=0"])
def test_an_empty_batch_or_sequence_gives_the_empty_result(shape, impl):
    """B = 0 or T = 0 (before: ZeroDivisionError tracebacks) gives the empty ``(B, T, H, Dv)``
    array in v's dtype, as ``jax.nn.dot_product_attention`` does, differentiably; the ranks are
    still checked against the head dim."""
    q = jnp.ones((*shape, sum(RANKS)), jnp.float32)
    v = jnp.ones((*shape, 3), jnp.bfloat16)
    out = mlr_attention(q, q, v, ranks=RANKS, impl=impl)
    assert out.shape == (*shape, 3) and out.dtype == v.dtype
    assert jax.nn.dot_product_attention(q, q, q).shape == (*shape, sum(RANKS))  # JAX's empties
    grad = jax.grad(lambda q: jnp.sum(mlr_attention(q, q, v, ranks=RANKS, impl=impl)))(q)
    assert grad.shape == q.shape
    with pytest.raises(ConfigError, match="sum to 8; they must sum to the head dim 4"):
        mlr_attention(q[..., :4], q[..., :4], v, ranks=RANKS, impl=impl)
    with pytest.raises(ConfigError, match="block_len=0 must be a positive int"):
        mlr_attention(q, q, v, ranks=RANKS, block_len=0)
