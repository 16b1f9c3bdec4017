"""Bilinear BTT and MLR scores equal ``x^T M_h x'`` for the reconstructed ``M_h``, whose rank is
``D`` (BTT, TT rank 1) and ``min(D, sum_l r_l 2^l)`` (MLR); the LayerNorm'd forms against the
same matrices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.methods.structured_attention import BilinearBTTScore, BilinearMLRScore, DotProductScore

D = 16


@pytest.fixture(scope="module")
def x():
    return jax.random.normal(jax.random.key(0), (2, 6, D))


def _rank(m):
    """Numerical rank of a float32-built matrix: singular values above 1e-5 of the largest."""
    s = np.linalg.svd(np.float64(m), compute_uv=False)
    return int((s > 1e-5 * s[0]).sum())


def _bilinear(x, m_HDD):
    return np.einsum("bti,hij,bsj->bhts", np.float64(x), np.float64(m_HDD), np.float64(x))


@pytest.mark.parametrize(
    "make",
    [
        lambda r: BilinearBTTScore(D, 2, qk_norm=False, rngs=r),
        lambda r: BilinearBTTScore(D, 1, btt_rank=2, qk_norm=False, rngs=r),
        lambda r: BilinearMLRScore(D, 2, ranks=(2, 1, 1), qk_norm=False, rngs=r),
        lambda r: DotProductScore(D, 4, rngs=r),
    ],
    ids=["btt", "btt_s2", "mlr", "mha"],
)
def test_scores_are_the_bilinear_form_of_the_reconstructed_matrix(make, x):
    score = make(nnx.Rngs(1))
    np.testing.assert_allclose(score(x), _bilinear(x, score.dense_matrices()), atol=1e-4, rtol=1e-4)


def test_btt_with_tt_rank_one_is_full_rank():
    m = BilinearBTTScore(D, 3, rngs=nnx.Rngs(2)).dense_matrices()
    assert [_rank(mh) for mh in m] == [D] * 3


@pytest.mark.parametrize("ranks, want", [((2, 1, 1), 8), ((4, 2, 2, 1), D), ((1,), 1)])
def test_mlr_rank_is_min_of_d_and_sum_of_ranks_times_blocks(ranks, want):
    assert min(D, sum(r * 2**lv for lv, r in enumerate(ranks))) == want
    m = BilinearMLRScore(D, 2, ranks=ranks, rngs=nnx.Rngs(3)).dense_matrices()
    assert [_rank(mh) for mh in m] == [want] * 2


def test_mha_head_rank_is_the_head_dim():
    m = DotProductScore(D, 4, rngs=nnx.Rngs(4)).dense_matrices()
    assert [_rank(mh) for mh in m] == [D // 4] * 4


def test_btt_key_layernorm_is_applied_to_the_key_map(x):
    score = BilinearBTTScore(D, 1, rngs=nnx.Rngs(5))
    w = score.maps[0].dense_matrix()
    k = np.float64(x) @ np.float64(w)
    k = (k - k.mean(-1, keepdims=True)) / np.sqrt(k.var(-1, keepdims=True) + 1e-6)
    want = np.einsum("bti,bsi->bts", np.float64(x), k)[:, None] / np.sqrt(D)
    np.testing.assert_allclose(score(x), want, atol=1e-4, rtol=1e-4)


def test_flops_and_bad_ranks():
    mlr = BilinearMLRScore(D, 1, ranks=(2, 1, 1), rngs=nnx.Rngs(6))
    assert mlr.flops(6) == 2 * 2 * 6 * D * 4 + 2 * 36 * 8
    with pytest.raises(ConfigError, match="divide"):
        BilinearMLRScore(12, 1, ranks=(1, 1, 1, 1), rngs=nnx.Rngs(0))
    assert jnp.isfinite(mlr(jnp.ones((1, 6, D)))).all()
