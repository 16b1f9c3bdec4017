"""JEST's joint example selection against an independent numpy implementation.

The sub-batch learnability is recomputed from the embeddings in float64 numpy (SigLIP's pair loss
summed over S × S, learner minus reference); each candidate's conditional score must equal the
brute-force change of that learnability when it is added; deterministic selection must equal a
numpy greedy loop over chunks (and the marginal top-k for one chunk); sampled selections hold no
duplicates and follow the softmax; everything runs under jit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.methods.drrho_clip import jest as J

B, D, TAU, BIAS = 12, 6, 0.2, -2.0


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def embeddings():
    rng = np.random.default_rng(0)
    return [_unit(rng.normal(size=(B, D))).astype(np.float32) for _ in range(4)]


def numpy_subbatch_loss(img, txt, subset):
    """SigLIP loss of the sub-batch ``subset`` (a sum over its pairs), float64, explicit loops."""
    img, txt = np.float64(img), np.float64(txt)
    total = 0.0
    for i in subset:
        for j in subset:
            z = 1.0 if i == j else -1.0
            total += np.logaddexp(0.0, -z * (img[i] @ txt[j] / TAU + BIAS))
    return total


def numpy_learnability(emb, subset):
    img, txt, rimg, rtxt = emb
    return numpy_subbatch_loss(img, txt, subset) - numpy_subbatch_loss(rimg, rtxt, subset)


@pytest.fixture(scope="module")
def scores(embeddings):
    return jax.jit(lambda *e: J.learnability_matrix(*e, tau=TAU, bias=BIAS))(*embeddings)


def test_subbatch_learnability_matches_numpy(embeddings, scores):
    subset = [0, 3, 4, 9]
    mask = np.zeros(B, bool)
    mask[subset] = True
    got = J.subbatch_learnability(scores, jnp.asarray(mask))
    np.testing.assert_allclose(got, numpy_learnability(embeddings, subset), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("subset", [[], [5], [1, 2, 7, 10, 11]], ids=["empty", "one", "five"])
def test_conditional_score_is_the_brute_force_gain(embeddings, scores, subset):
    mask = np.zeros(B, bool)
    mask[subset] = True
    got = np.asarray(jax.jit(J.conditional_learnability)(scores, jnp.asarray(mask)))
    base = numpy_learnability(embeddings, subset)
    for k in set(range(B)) - set(subset):
        want = numpy_learnability(embeddings, [*subset, k]) - base
        np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-4, err_msg=f"candidate {k}")


def numpy_greedy(emb, n_select, n_chunks):
    """Chunked selection by brute force: each chunk takes the largest gains given the chosen."""
    chosen = []
    for _ in range(n_chunks):
        base = numpy_learnability(emb, chosen)
        gains = {
            k: numpy_learnability(emb, [*chosen, k]) - base for k in range(B) if k not in chosen
        }
        chosen += sorted(gains, key=gains.get, reverse=True)[: n_select // n_chunks]
    return chosen


@pytest.mark.parametrize("n_select,n_chunks", [(6, 1), (6, 3), (4, 4)])
def test_deterministic_selection_matches_numpy_chunks(embeddings, scores, n_select, n_chunks):
    select = jax.jit(lambda s: J.joint_select(s, n_select, n_chunks=n_chunks))
    got = np.asarray(select(scores)).tolist()
    want = numpy_greedy(embeddings, n_select, n_chunks)
    for c in range(n_chunks):  # the order within a chunk is top_k's; compare each chunk as a set
        part = slice(c * (n_select // n_chunks), (c + 1) * (n_select // n_chunks))
        assert set(got[part]) == set(want[part])
    if n_chunks == 1:  # one chunk: the independent (marginal) top-k of the diagonal
        assert set(got) == set(np.argsort(-np.diagonal(np.asarray(scores)))[:n_select].tolist())


def test_joint_differs_from_independent_selection():
    # Two candidates with the best own scores that are bad together: joint selection (chunks of
    # one) takes the best one and then avoids its partner; the marginal top-2 takes both.
    a = np.zeros((4, 4), np.float32)
    a[np.diag_indices(4)] = [3.0, 2.9, 1.0, 0.0]
    a[0, 1] = a[1, 0] = -5.0
    joint = J.joint_select(jnp.asarray(a), 2, n_chunks=2)
    marginal = J.joint_select(jnp.asarray(a), 2, n_chunks=1)
    assert set(np.asarray(joint).tolist()) == {0, 2}
    assert set(np.asarray(marginal).tolist()) == {0, 1}


def test_sampled_selection_has_no_duplicates_and_follows_the_softmax(scores):
    keys = jax.random.split(jax.random.key(0), 64)
    draws = jax.jit(jax.vmap(lambda k: J.joint_select(scores, 8, n_chunks=4, key=k)))(keys)
    draws = np.asarray(draws)
    assert all(len(set(row)) == 8 for row in draws)
    assert len({tuple(sorted(row)) for row in draws}) > 1  # it is random
    # One draw from three candidates: the frequencies follow softmax(diagonal).
    s = jnp.diag(jnp.asarray([0.0, 1.0, 2.0]))
    keys = jax.random.split(jax.random.key(1), 4000)
    first = np.asarray(jax.jit(jax.vmap(lambda k: J.joint_select(s, 1, n_chunks=1, key=k)))(keys))
    freq = np.bincount(first[:, 0], minlength=3) / len(keys)
    want = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(freq, want, atol=0.03)


def test_no_gradient_reaches_the_reference_or_the_selection(embeddings):
    img, txt, rimg, rtxt = map(jnp.asarray, embeddings)

    def loss_on_selected(img, txt, rimg, rtxt):
        scores = J.learnability_matrix(img, txt, rimg, rtxt, tau=TAU, bias=BIAS)
        keep = J.joint_select(scores, 6, n_chunks=2, key=jax.random.key(0))
        return jnp.sum(img[keep] * txt[keep])

    g_img, g_txt, g_rimg, g_rtxt = jax.jit(jax.grad(loss_on_selected, argnums=(0, 1, 2, 3)))(
        img, txt, rimg, rtxt
    )
    np.testing.assert_array_equal(g_rimg, 0)
    np.testing.assert_array_equal(g_rtxt, 0)
    assert np.abs(np.asarray(g_img)).sum() > 0  # the learner's own loss still trains it


def test_bad_chunking_is_a_config_error(scores):
    with pytest.raises(ConfigError, match="jest_chunks"):
        J.joint_select(scores, 6, n_chunks=4)
    with pytest.raises(ConfigError, match="cannot select"):
        J.joint_select(scores, B + 1, n_chunks=1)


# --------------------------------------------------------------------------------------------
# The DRRho-CLIP authors' JEST (``jointly_sample_batch_softmax``): softmax-loss scores.
# Written from its definition: pair k's InfoNCE loss when the chosen pairs S are its candidates
# (both directions averaged, k's own positive not among them), learner at logit scale T, the
# reference at T_REF; the marginal score is the negated positive logit alone.

T, T_REF = 4.0, 9.0


def numpy_infonce_against(img, txt, scale, k, subset):
    img, txt = np.float64(img), np.float64(txt)
    own = -scale * (img[k] @ txt[k])
    if not subset:
        return own
    i2t = np.log(sum(np.exp(scale * (img[k] @ txt[j])) for j in subset))
    t2i = np.log(sum(np.exp(scale * (img[j] @ txt[k])) for j in subset))
    return own + 0.5 * (i2t + t2i)


def numpy_softmax_score(emb, k, subset, scale=T, ref_scale=T_REF):
    img, txt, rimg, rtxt = emb
    learner = numpy_infonce_against(img, txt, scale, k, subset)
    return learner - numpy_infonce_against(rimg, rtxt, ref_scale, k, subset)


@pytest.mark.parametrize("subset", [[], [5], [1, 2, 7, 10, 11]], ids=["empty", "one", "five"])
def test_softmax_scores_match_numpy(embeddings, subset):
    emb = [jnp.asarray(e) for e in embeddings]
    if subset:
        mask = jnp.zeros(B, bool).at[jnp.asarray(subset)].set(True)
        fn = jax.jit(lambda *e: J.softmax_conditional_learnability(*e, scale=T, ref_scale=T_REF))
        got = np.asarray(fn(*emb, mask))
    else:
        fn = jax.jit(lambda *e: J.softmax_marginal_learnability(*e, scale=T, ref_scale=T_REF))
        got = np.asarray(fn(*emb))
    for k in set(range(B)) - set(subset):
        want = numpy_softmax_score(embeddings, k, subset)
        np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-5, err_msg=f"pair {k}")


def numpy_softmax_greedy(emb, n_select, n_chunks):
    chosen = []
    for _ in range(n_chunks):
        gains = {k: numpy_softmax_score(emb, k, chosen) for k in range(B) if k not in chosen}
        chosen += sorted(gains, key=gains.get, reverse=True)[: n_select // n_chunks]
    return chosen


@pytest.mark.parametrize("n_select,n_chunks", [(6, 2), (6, 3), (4, 1)])
def test_softmax_deterministic_selection_matches_numpy(embeddings, n_select, n_chunks):
    emb = [jnp.asarray(e) for e in embeddings]
    fn = jax.jit(
        lambda *e: J.softmax_joint_select(*e, n_select, n_chunks=n_chunks, scale=T, ref_scale=T_REF)
    )
    got = np.asarray(fn(*emb)).tolist()
    want = numpy_softmax_greedy(embeddings, n_select, n_chunks)
    size = n_select // n_chunks
    for c in range(n_chunks):
        assert set(got[c * size : (c + 1) * size]) == set(want[c * size : (c + 1) * size])


def test_softmax_sampling_follows_the_authors_weights(embeddings):
    """First chunk ∝ m − min m (linear); second chunk ∝ exp c(k | S); no duplicates."""
    emb = [jnp.asarray(e) for e in embeddings]
    n = 6000
    keys = jax.random.split(jax.random.key(0), n)
    draw = jax.jit(
        jax.vmap(
            lambda k: J.softmax_joint_select(*emb, 2, n_chunks=2, scale=T, ref_scale=T_REF, key=k)
        )
    )
    pairs = np.asarray(draw(keys))
    assert (pairs[:, 0] != pairs[:, 1]).all()
    m = np.array([numpy_softmax_score(embeddings, k, []) for k in range(B)])
    first = np.bincount(pairs[:, 0], minlength=B) / n
    np.testing.assert_allclose(first, (m - m.min()) / (m - m.min()).sum(), atol=0.025)
    f = int(np.argmax(first))  # given the most frequent first pick, the second one's law
    seconds = pairs[pairs[:, 0] == f, 1]
    c = np.array([numpy_softmax_score(embeddings, k, [f]) for k in range(B)])
    c[f] = -np.inf
    want = np.exp(c - c.max()) / np.exp(c - c.max()).sum()
    got = np.bincount(seconds, minlength=B) / len(seconds)
    np.testing.assert_allclose(got, want, atol=4 / np.sqrt(len(seconds)))


def test_softmax_selection_sends_no_gradient_and_refuses_bad_chunks(embeddings):
    img, txt, rimg, rtxt = map(jnp.asarray, embeddings)

    def loss_on_selected(img, txt, rimg, rtxt):
        keep = J.softmax_joint_select(
            img, txt, rimg, rtxt, 6, n_chunks=2, scale=T, ref_scale=T_REF, key=jax.random.key(0)
        )
        return jnp.sum(img[keep] * txt[keep])

    grads = jax.jit(jax.grad(loss_on_selected, argnums=(0, 1, 2, 3)))(img, txt, rimg, rtxt)
    np.testing.assert_array_equal(grads[2], 0)
    np.testing.assert_array_equal(grads[3], 0)
    with pytest.raises(ConfigError, match="jest_chunks"):
        J.softmax_joint_select(img, txt, rimg, rtxt, 6, n_chunks=4, scale=T, ref_scale=T_REF)
