"""The linear-map constructor: every kind against an independent numpy construction of its matrix,
implied ranks, parameter counts, init variance, gradients, sharding axes, dtypes and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.nn.layers import count_params
from jaxlab.nn.linear import (
    BTT,
    LINEAR_KINDS,
    Dense,
    LinearKind,
    LinearSpec,
    MatmulImpl,
    btt_blocks,
)
from jaxlab.nn.spectral import Spectral

AXES = ("embed", "mlp")
# name: (spec, d_in, d_out)
CASES = {
    "dense": (LinearSpec(matmul_impl="xla"), 24, 40),
    "low_rank": (LinearSpec(kind="low_rank", rank=5), 24, 40),
    "btt_s1": (LinearSpec(kind="btt"), 32, 48),
    "btt_s3": (LinearSpec(kind="btt", btt_rank=3), 48, 20),
    "mlr": (LinearSpec(kind="mlr", mlr_ranks=(4, 2, 1)), 32, 48),
    "spectral": (LinearSpec(kind="spectral", rank=5), 24, 40),
}


def build(name, seed=0, std=0.3):
    spec, d_in, d_out = CASES[name]
    return spec(d_in, d_out, std=std, axes=AXES, rngs=nnx.Rngs(seed))


def numpy_matrix(layer) -> np.ndarray:
    """The implied (d_in, d_out) matrix from the raw factors, by the definitions in numpy."""
    p = lambda v: np.asarray(v[...], np.float64)  # noqa: E731
    if isinstance(layer, Dense):
        return p(layer.kernel)
    if hasattr(layer, "u"):
        return p(layer.u) @ p(layer.vt)
    if hasattr(layer, "u_active"):  # spectral: U diag(s) Vᵀ over the active and frozen columns
        u = np.concatenate([p(layer.u_active), p(layer.u_frozen)], axis=1)
        v = np.concatenate([p(layer.v_active), p(layer.v_frozen)], axis=1)
        return (u * p(layer.s)) @ v.T
    if hasattr(layer, "first"):  # BTT: block-diagonal stage, regrouping, block-diagonal stage
        n1, n2, m2, m1, s = layer.shape
        first, second = p(layer.first), p(layer.second)
        stage1 = scipy.linalg.block_diag(*[first[j * n2 : (j + 1) * n2] for j in range(n1)])
        # stage1's columns run over (j, k, a); the second stage wants them grouped by k: (k, j, a)
        regroup = np.zeros((n1 * m2 * s, n1 * m2 * s))
        for j in range(n1):
            for k in range(m2):
                for a in range(s):
                    regroup[(j * m2 + k) * s + a, (k * n1 + j) * s + a] = 1.0
        stage2 = scipy.linalg.block_diag(*[second[:, k * m1 : (k + 1) * m1] for k in range(m2)])
        return stage1 @ regroup @ stage2
    m = np.zeros((layer.d_in, layer.d_out))  # MLR: one rank-r_l product per block and level
    for level, (right, left) in enumerate(zip(layer.right, layer.left, strict=True)):
        k = 2**level
        bi, bo = layer.d_in // k, layer.d_out // k
        for b in range(k):
            rows, cols = slice(b * bi, (b + 1) * bi), slice(b * bo, (b + 1) * bo)
            m[rows, cols] += p(right)[rows] @ p(left)[:, cols]
    return m


@pytest.mark.parametrize("name", CASES)
def test_forward_and_dense_matrix_equal_the_numpy_construction(name):
    layer = build(name)
    want = numpy_matrix(layer)
    np.testing.assert_allclose(layer.dense_matrix(), want, rtol=1e-5, atol=1e-6)
    x = jax.random.normal(jax.random.key(1), (2, 3, layer.d_in))
    with jax.default_matmul_precision("highest"):
        y, y_gelu = layer(x), layer(x, activation="gelu")
    np.testing.assert_allclose(y, np.asarray(x, np.float64) @ want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_gelu, jax.nn.gelu(y), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "spec, d_in, d_out, rank",
    [
        (LinearSpec(kind="low_rank", rank=5), 24, 40, 5),
        (LinearSpec(kind="mlr", mlr_ranks=(4, 2, 1)), 32, 32, 4 + 2 * 2 + 1 * 4),
        (LinearSpec(kind="mlr", mlr_ranks=(16, 8, 8)), 32, 32, 32),  # sum r_l 2^l = 64 > D
        (LinearSpec(kind="mlr", mlr_ranks=(2, 3)), 16, 48, 2 + 3 * 2),
        (LinearSpec(kind="btt"), 32, 32, 32),  # s = 1: full rank
        (LinearSpec(kind="btt"), 48, 48, 48),
        (LinearSpec(kind="btt"), 128, 128, 128),
        (LinearSpec(kind="btt"), 32, 72, 32),
    ],
)
def test_implied_rank(spec, d_in, d_out, rank):
    layer = spec(d_in, d_out, std=1.0, rngs=nnx.Rngs(3))
    # From the factors in float64 (checked against dense_matrix() above), so that float32 rounding
    # does not pass for rank.
    assert np.linalg.matrix_rank(numpy_matrix(layer)) == rank


def _authors_factorize(d):
    """Kuang et al.'s ``factorize(d, 2)``: ``[d // b, b]`` for ``b`` the first divisor of ``d``
    strictly greater than ``sqrt(d)`` (theirs runs over sympy's ``divisors``)."""
    b = next(f for f in range(1, d + 1) if d % f == 0 and f > d**0.5)
    return d // b, b


@pytest.mark.parametrize("d", [2, 7, 16, 20, 32, 48, 64, 72, 128, 256])
def test_btt_blocks_are_the_authors_factorize(d):
    assert btt_blocks(d) == _authors_factorize(d)


def test_btt_block_layout_is_the_authors():
    # Theirs at D = 64: x as c = 4 blocks of d = 16 (W_K (c, d, H b s)), output in b = 16 groups.
    layer = LinearSpec(kind="btt")(64, 64, std=1.0, rngs=nnx.Rngs(0))
    n1, n2, m2, m1, s = layer.shape
    assert (n1, n2, m2, m1, s) == (4, 16, 16, 4, 1)
    assert btt_blocks(1) == (1, 1)


def test_btt_group_minor_order_interleaves_the_output_blocks():
    # Same cores, columns k m1 + i1 (the linear layer) against i1 m2 + k (the authors' bilinear
    # score, "(a b)"); the linear layer's order is the block-major one that numpy_matrix builds.
    major = BTT(24, 40, btt_rank=2, std=0.3, rngs=nnx.Rngs(1))
    minor = BTT(24, 40, btt_rank=2, std=0.3, output_order="group_minor", rngs=nnx.Rngs(1))
    _, _, m2, m1, _ = major.shape
    want = numpy_matrix(major).reshape(24, m2, m1).transpose(0, 2, 1).reshape(24, 40)
    np.testing.assert_allclose(minor.dense_matrix(), want, rtol=1e-5, atol=1e-6)
    x = jax.random.normal(jax.random.key(0), (3, 24))
    np.testing.assert_allclose(minor(x), np.float64(x) @ want, rtol=1e-4, atol=1e-5)


def test_parameter_counts_match_closed_forms():
    # dense d_in*d_out; low rank r(d_in + d_out); BTT s(m2 d_in + n1 d_out) with n1 = 4 (32 = 4*8),
    # m2 = 8 (48 = 6*8), and for 48 -> 20: n1 = 6, m2 = 5; MLR sum_l r_l (d_in + d_out); spectral
    # r(d_in + d_out) + k trainable (s and the r active pairs; the k - r frozen pairs are not
    # parameters), k = min(d_in, d_out).
    want = {
        "dense": 24 * 40,
        "low_rank": 5 * (24 + 40),
        "btt_s1": 1 * (8 * 32 + 4 * 48),
        "btt_s3": 3 * (5 * 48 + 6 * 20),
        "mlr": (4 + 2 + 1) * (32 + 48),
        "spectral": 5 * (24 + 40) + 24,
    }
    assert {name: count_params(build(name)) for name in CASES} == want
    for name, (spec, d_in, d_out) in CASES.items():  # FLOPs follow the shapes built
        if name != "spectral":  # (its forward uses all k pairs, frozen ones too)
            assert spec.flops(d_in, d_out) == 2 * want[name], name


@pytest.mark.parametrize(
    "spec",
    [
        LinearSpec(),
        LinearSpec(kind="low_rank", rank=16),
        LinearSpec(kind="btt", btt_rank=2),
        LinearSpec(kind="mlr", mlr_ranks=(8, 4, 4, 2)),
    ],
    ids=lambda s: s.kind,
)
def test_init_matches_the_dense_variance(spec):
    """The implied matrix's entries have the dense init's variance std^2 (MLR: on average)."""
    std = 0.05
    m = np.asarray(spec(512, 512, std=std, rngs=nnx.Rngs(0)).dense_matrix(), np.float64)
    assert np.mean(m**2) == pytest.approx(std**2, rel=0.15)


@pytest.mark.parametrize("name", CASES)
def test_gradients_reach_every_factor(name):
    layer = build(name)
    x = jax.random.normal(jax.random.key(2), (4, layer.d_in))
    grads = nnx.jit(nnx.grad(lambda m: jnp.sum(m(x, activation="gelu") ** 2)))(layer)
    leaves = jax.tree.leaves(nnx.state(grads, nnx.Param))
    assert leaves and all(
        bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).max()) > 0 for g in leaves
    )


@pytest.mark.parametrize("name", CASES)
def test_parameters_carry_the_logical_axes(name):
    specs = jax.tree.leaves(
        nnx.get_partition_spec(nnx.state(build(name), nnx.Param)),
        is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec),
    )
    shapes = [x.shape for x in jax.tree.leaves(nnx.state(build(name), nnx.Param))]
    assert all(len(spec) == len(shape) for spec, shape in zip(specs, shapes, strict=True))
    names = {axis for spec in specs for axis in spec}
    assert {"embed", "mlp"} <= names  # the input side and the output side are both sharded


@pytest.mark.parametrize("name", CASES)
def test_compute_dtype_apart_from_param_dtype(name):
    spec, d_in, d_out = CASES[name]
    spec = LinearSpec(**{**spec.__dict__, "dtype": "bfloat16"})
    layer = spec(d_in, d_out, std=0.3, rngs=nnx.Rngs(0))
    assert {str(x.dtype) for x in jax.tree.leaves(nnx.state(layer, nnx.Param))} == {"float32"}
    assert layer(jnp.ones((2, d_in))).dtype == jnp.bfloat16


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: LinearSpec(kind="low_rank")(8, 16, std=1, rngs=nnx.Rngs(0)), r"rank=0 must lie"),
        (lambda: LinearSpec(kind="low_rank", rank=9).check(8, 16), r"min\(d_in, d_out\)=8"),
        (lambda: LinearSpec(kind="mlr", mlr_ranks=(2, 2, 2)).check(18, 16), "4 blocks must divide"),
        (lambda: LinearSpec(kind="mlr", mlr_ranks=(2, 5)).check(8, 16), "level 1's rank 5"),
        (lambda: LinearSpec(kind="mlr").check(8, 8), "mlr_ranks is empty"),
        (lambda: LinearSpec(kind="btt", btt_rank=0).check(8, 8), "btt_rank=0 must be >= 1"),
        (
            lambda: BTT(8, 8, btt_rank=1, std=1.0, output_order="ab", rngs=nnx.Rngs(0)),
            r"output_order='ab': choose one of \['group_major', 'group_minor'\]",
        ),
        (lambda: LinearSpec(kind="lowrank"), "unknown linear kind 'lowrank'"),
        (lambda: LinearSpec(matmul_impl="cutlass"), "unknown matmul_impl 'cutlass'"),
        (lambda: build("dense")(jnp.ones((1, 24)), activation="tanh"), "unknown activation"),
    ],
)
def test_bad_options_are_one_line_config_errors(make, message):
    with pytest.raises(ConfigError, match=message) as err:
        make()
    assert "\n" not in str(err.value)


def test_every_kind_has_a_class():
    assert set(LINEAR_KINDS) == set(LinearKind)


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_dense_pallas_matmul_equals_xla(activation):
    """The dense kind's Pallas path (interpreted on CPU): same parameters, same values and grads."""
    xla = Dense(16, 24, std=0.3, matmul_impl="xla", rngs=nnx.Rngs(0))
    pallas = Dense(16, 24, std=0.3, matmul_impl="pallas", rngs=nnx.Rngs(0))
    assert pallas.matmul_impl is MatmulImpl.PALLAS
    x = jax.random.normal(jax.random.key(4), (2, 3, 16))

    def value_and_grads(layer):
        loss = lambda m: jnp.sum(m(x, activation=activation) ** 2)  # noqa: E731
        return nnx.jit(nnx.value_and_grad(loss))(layer)

    with jax.default_matmul_precision("highest"):
        (want, g_want), (got, g_got) = value_and_grads(xla), value_and_grads(pallas)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g_got), jax.tree.leaves(g_want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_spectral_without_an_init_scale_is_a_one_line_error():
    """``Spectral`` built from a random draw needs ``std`` (and ``rngs``), as ``Dense`` does: no
    default scale, which would be the zero matrix (``std=0``) without a word. Given one, its
    weight has that entry scale (the SVD of the dense draw; 64 x 48 entries, so the sample std is
    within a few percent)."""
    with pytest.raises(ConfigError, match=r"Spectral\(8, 6\): give std >= 0 and rngs"):
        Spectral(8, 6, rank=2, rngs=nnx.Rngs(0))
    with pytest.raises(ConfigError, match="give std >= 0"):
        Spectral(8, 6, rank=2, std=-0.1, rngs=nnx.Rngs(0))
    with pytest.raises(ConfigError, match="rngs=None"):
        Spectral(8, 6, rank=2, std=0.1)
    layer = Spectral(64, 48, rank=4, std=0.5, rngs=nnx.Rngs(0))
    assert np.std(np.asarray(layer.dense_matrix())) == pytest.approx(0.5, rel=0.05)
    m = np.arange(12.0).reshape(4, 3)
    np.testing.assert_allclose(Spectral.from_matrix(m, 1).dense_matrix(), m, atol=1e-5)
