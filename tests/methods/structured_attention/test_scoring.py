"""Bilinear BTT and MLR scores equal ``x^T M_h x'`` for the reconstructed ``M_h``, whose rank is
``D`` (BTT, TT rank 1) and ``min(D, sum_l r_l 2^l)`` (MLR); the LayerNorm'd forms against the
same matrices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.core.experiment import load
from jaxlab.methods.structured_attention import BilinearBTTScore, BilinearMLRScore, DotProductScore
from jaxlab.nn.linear import btt_blocks
from tests.methods.structured_attention import authors_btt

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


@pytest.mark.parametrize(
    "make",
    [
        lambda r: BilinearBTTScore(D, 2, rngs=r),
        lambda r: BilinearMLRScore(D, 2, ranks=(2, 1, 1), qk_norm=False, rngs=r),
        lambda r: DotProductScore(D, 4, rngs=r),
    ],
    ids=["btt", "mlr", "mha"],
)
def test_an_unbatched_or_misshapen_input_is_a_one_line_error(make, x):
    """Scores take ``(B, T, D)`` as every jaxlab sequence function; ``(T, D)`` (before: a
    traceback from unpacking three axes) is refused with the batch axis to add, as are a wrong
    feature width and a ``num_queries`` past T."""
    score = make(nnx.Rngs(4))
    name = type(score).__name__
    with pytest.raises(
        ConfigError,
        match=rf"{name}: x must be \(B, T, D=16\); got shape \(6, 16\); add a batch axis",
    ):
        score(x[0])
    with pytest.raises(ConfigError, match=r"x must be \(B, T, D=16\); got shape \(2, 6, 8\)$"):
        score(x[..., :8])
    with pytest.raises(ConfigError, match=r"num_queries=7 must lie in \[0, T=6\]"):
        score(x, num_queries=7)
    assert score(x, num_queries=2).shape == (2, score(x).shape[1], 2, 6)


def test_btt_with_tt_rank_one_is_full_rank():
    m = BilinearBTTScore(D, 3, rngs=nnx.Rngs(2)).dense_matrices()
    assert [_rank(mh) for mh in m] == [D] * 3


@pytest.mark.parametrize("ranks, want", [((2, 1, 1), 8), ((4, 2, 2, 1), D), ((1,), 1)])
def test_mlr_rank_is_min_of_d_and_sum_of_ranks_times_blocks(ranks, want):
    assert min(D, sum(r * 2**lv for lv, r in enumerate(ranks))) == want
    m = BilinearMLRScore(D, 2, ranks=ranks, qk_norm=False, rngs=nnx.Rngs(3)).dense_matrices()
    assert [_rank(mh) for mh in m] == [want] * 2


def test_mha_head_rank_is_the_head_dim():
    m = DotProductScore(D, 4, rngs=nnx.Rngs(4)).dense_matrices()
    assert [_rank(mh) for mh in m] == [D // 4] * 4


def test_btt_key_layernorm_is_applied_to_the_key_map(x):
    score = BilinearBTTScore(D, 1, rngs=nnx.Rngs(5))
    w = score.maps[0].dense_matrix()
    k = np.float64(x) @ np.float64(w)
    k = (k - k.mean(-1, keepdims=True)) / np.sqrt(k.var(-1, keepdims=True) + 1e-5)
    want = np.einsum("bti,bsi->bts", np.float64(x), k)[:, None] / np.sqrt(D)
    np.testing.assert_allclose(score(x), want, atol=1e-4, rtol=1e-4)


def test_flops_and_bad_ranks():
    mlr = BilinearMLRScore(D, 1, ranks=(3, 2, 1), rngs=nnx.Rngs(6))
    assert mlr.flops(6) == 2 * 2 * 6 * D * 6 + 2 * 36 * 11
    with pytest.raises(ConfigError, match="divide"):
        BilinearMLRScore(12, 1, ranks=(1, 1, 1, 1), rngs=nnx.Rngs(0))
    for thin in [(1, 2, 1), (3, 1, 1)]:  # a LayerNorm of 1 number (always 0), of 2 (a sign)
        with pytest.raises(ConfigError, match="LayerNorm"):
            BilinearMLRScore(D, 1, ranks=thin, rngs=nnx.Rngs(0))
        BilinearMLRScore(D, 1, ranks=thin, qk_norm=False, rngs=nnx.Rngs(0))
    assert jnp.isfinite(mlr(jnp.ones((1, 6, D)))).all()


def _np_layernorm(v, scale):
    """LayerNorm over the last axis without bias, epsilon 1e-5: the authors' F.layer_norm."""
    mu, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
    return (v - mu) / np.sqrt(var + 1e-5) * scale


def _random_norm_scales(norms, seed):
    # LayerNorm scales start at 1; random ones make the order of the normalised entries matter.
    rng = np.random.default_rng(seed)
    for norm in norms:
        norm.scale[...] = jnp.asarray(rng.uniform(0.5, 1.5, norm.scale[...].shape), jnp.float32)


def _np_mlr_levels(score, x, ranks, cap):
    """Each level's logits of bilinear MLR with its LayerNorms, in float64 from the paper (Sec. 3.2)
    and the authors' BilinearMLRAttention: level l splits x into 2^l blocks; block k maps through
    its own (D / 2^l, r_l) query and key factors per head (under ``cap`` all heads' factors of a
    level scaled as one tensor to RMS <= sqrt(min(D / 2^l, H r_l)) / (D / 2^l)); a head's r_l 2^l
    numbers (rank index major, block minor) pass a LayerNorm per side; the level's logits are
    their dot product at 1/sqrt(r_l 2^l)."""
    xb = np.float64(x)
    D, H = xb.shape[-1], score.num_heads
    levels = []
    for level, r in enumerate(ranks):
        p, size = 2**level, D // 2**level
        sides = []
        for w, norm in (
            (score.wq[level], score.norms_q[level]),
            (score.wk[level], score.norms_k[level]),
        ):
            w = np.float64(w[...])
            if cap:
                limit = min(size, H * r) ** 0.5 / size
                w = w / max(1.0, np.sqrt(np.mean(w**2) + 1e-8) / limit)
            w = w.reshape(p, size, H, r)
            y = np.zeros(xb.shape[:2] + (H, r * p))
            for k in range(p):
                part = xb[..., k * size : (k + 1) * size] @ w[k].reshape(size, H * r)
                y[..., np.arange(r) * p + k] = part.reshape(*xb.shape[:2], H, r)
            sides.append(_np_layernorm(y, np.float64(norm.scale[...])))
        levels.append(np.einsum("bthe,bshe->bhts", *sides) / np.sqrt(r * p))
    return levels


def test_bilinear_mlr_with_layernorms_matches_a_float64_construction(x):
    ranks = (3, 2, 1)
    score = BilinearMLRScore(D, 2, ranks=ranks, rngs=nnx.Rngs(8))
    _random_norm_scales([*score.norms_q, *score.norms_k], 0)
    want = sum(_np_mlr_levels(score, x, ranks, cap=False))
    np.testing.assert_allclose(score(x), want, atol=2e-5, rtol=2e-5)


def _to_float64(module):
    """Every parameter of ``module`` in float64, and its BTT maps computing in float64 (x64 on)."""
    nnx.update(module, jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), nnx.state(module)))
    for m in getattr(module, "maps", []):
        m.dtype = jnp.dtype(jnp.float64)
    return module


@pytest.mark.parametrize("exp", ["icl_regression", "icl_retrieval"])
def test_the_experiments_mlr8_matches_float64_and_every_level_sees_the_key(exp, repo_root, x64):
    # The MLR-8 arm as the experiments build it (8 heads, RMS cap, QK LayerNorm on). Each level's
    # logits must vary with the key for a fixed query: a level whose LayerNorm sees 1 number per
    # head scores exactly 0, one that sees 2 scores a sign (the 1|1|1|1 layout at D = 32).
    cfg = load(repo_root / "experiments", exp).get_config()
    model = cfg.model("mlr8") if exp == "icl_retrieval" else cfg.model("mlr8", 8, cfg.widths[0])
    score = BilinearMLRScore(model.d_model, model.num_heads, ranks=model.mlr_ranks,
                             rms_cap=model.rms_cap, rngs=nnx.Rngs(4))  # fmt: skip
    _random_norm_scales([*score.norms_q, *score.norms_k], 2)
    _to_float64(score)
    xe = jax.random.normal(jax.random.key(5), (2, 12, model.d_model), jnp.float64)
    levels = _np_mlr_levels(score, xe, model.mlr_ranks, cap=True)
    np.testing.assert_allclose(score(xe), sum(levels), atol=1e-10, rtol=1e-10)
    for lv, logits_BHTS in enumerate(levels):
        # per query (b, h, t): how many distinct values over the 12 keys
        distinct = np.array(
            [len(np.unique(np.round(row, 9))) for row in logits_BHTS.reshape(-1, 12)]
        )
        assert distinct.min() > 2, f"level {lv} of {model.mlr_ranks} ignores the key"


@pytest.mark.parametrize("H, s", [(2, 2), (3, 1)])
def test_bilinear_btt_matches_the_authors_forward_in_float64(x, H, s):
    # Paper Sec. 3.1, s_h(t, t') = x_t . LN_h(BTT_h(x_t')) / sqrt(D), against the authors'
    # BilinearBTTAttention forward (their reshapes and permutations, keys in (a b) order) on
    # random W_K (c, d, H b s) and W_Q (H b, a, c s) loaded into jaxlab's maps.
    score = BilinearBTTScore(D, H, btt_rank=s, rngs=nnx.Rngs(9))
    _random_norm_scales(score.norms, 1)
    c, d, b, a, _ = score.maps[0].shape
    rng = np.random.default_rng(0)
    wk, wq = rng.normal(size=(c, d, H * b * s)) / d**0.5, rng.normal(size=(H * b, a, c * s))
    authors_btt.load_into(score, wk, wq)
    scales = np.stack([np.float64(n.scale[...]) for n in score.norms])
    want = authors_btt.btt_scores(np.float64(x), wk, wq, H, scales, s=s)
    np.testing.assert_allclose(score(x), want, atol=2e-5, rtol=2e-5)
    m = authors_btt.btt_keys(np.eye(D)[None], wk, wq, H, s).reshape(H, D, D)  # rows: BTT_h(e_i)
    np.testing.assert_allclose(score.dense_matrices(), m.transpose(0, 2, 1) / D**0.5, atol=1e-5)


@pytest.mark.parametrize("D_", [16, 48, 64])
def test_rank_one_btt_cores_can_be_the_identity(D_):
    # The authors' (a b) layout: W_K[i_c, i_d, j_b] = [i_d = j_b], W_Q[j_b, i_a, i_c] = [i_a =
    # i_c] make each head's key map the identity, so a head can score a key against itself. In
    # the block-major order the same cores are a permutation (and no rank-1 cores give I).
    H = 2
    wk, wq = authors_btt.identity_weights(D_, H, btt_blocks)
    xe = np.random.default_rng(1).normal(size=(2, 5, D_))
    np.testing.assert_allclose(authors_btt.btt_keys(xe, wk, wq, H), np.tile(xe, (1, H, 1)))
    plain = BilinearBTTScore(D_, H, qk_norm=False, rngs=nnx.Rngs(0))
    authors_btt.load_into(plain, wk, wq)
    np.testing.assert_allclose(plain.dense_matrices(), np.tile(np.eye(D_), (H, 1, 1)) / D_**0.5)
    xj = jnp.asarray(xe, jnp.float32)
    np.testing.assert_allclose(plain._keys(xj), np.stack([xe] * H, axis=2), atol=1e-6)
    normed = BilinearBTTScore(D_, H, rngs=nnx.Rngs(0))  # with the key LayerNorm: LN(x)
    authors_btt.load_into(normed, wk, wq)
    want = authors_btt.layernorm(xe, 1.0)
    np.testing.assert_allclose(normed._keys(xj), np.stack([want] * H, axis=2), atol=1e-5)


@pytest.mark.parametrize("qk_norm, cap", [(True, True), (True, False), (False, True)])
def test_batched_btt_heads_equal_the_per_head_maps(qk_norm, cap, x64):
    # One einsum over the 8 heads' stacked cores and LayerNorm scales (the fast path) against
    # each head's BTT map and LayerNorm applied on its own, at float64.
    score = BilinearBTTScore(24, 8, btt_rank=2, qk_norm=qk_norm, rms_cap=cap, rngs=nnx.Rngs(3))
    _random_norm_scales(score.norms, 4)
    _to_float64(score)
    xe = jax.random.normal(jax.random.key(6), (2, 5, 24), jnp.float64)
    fast, slow = score._keys(xe), score._keys_per_head(xe)
    assert fast.dtype == jnp.float64 and fast.shape == (2, 5, 8, 24)
    np.testing.assert_allclose(fast, slow, atol=1e-12, rtol=1e-12)
