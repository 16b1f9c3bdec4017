"""SST's draws of the active pairs follow the configured distribution (χ² tests with scipy).

Without replacement, an unordered pair {i, j} is drawn with probability
``p_i p_j / (1 - p_i) + p_j p_i / (1 - p_j)`` (sequential draws, as ``torch.multinomial`` and
numpy's ``choice(replace=False)`` make them); the test enumerates it and compares the counts of
20,000 jitted draws, and checks that the same counts reject a wrong distribution.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxlab.methods.sst import sample_active, sampling_probs
from jaxlab.methods.sst.sampling import active_permutation

S = jnp.array([4.0, 2.0, 1.0, 0.5, 0.25])  # k = 5 singular values
K, R, N = 5, 2, 20_000


def _pair_probs(p):
    pairs = list(itertools.combinations(range(K), R))
    probs = [p[i] * p[j] / (1 - p[i]) + p[j] * p[i] / (1 - p[j]) for i, j in pairs]
    return pairs, np.asarray(probs) / np.sum(probs)  # float32 weights: sum to 1 again


@pytest.mark.parametrize("sampling", ["s", "half_uniform"])
def test_sampling_frequencies_match_the_configured_distribution(sampling):
    p = np.asarray(sampling_probs(S, sampling), np.float64)
    want = S / S.sum() if sampling == "s" else 0.5 * (1 / K + S / S.sum())
    np.testing.assert_allclose(p, want, rtol=1e-6)
    keys = jax.random.split(jax.random.key(0), N)
    masks = np.asarray(jax.jit(jax.vmap(lambda k: sample_active(k, S, R, sampling)))(keys))
    assert (masks.sum(1) == R).all()  # r distinct pairs every time
    pairs, probs = _pair_probs(p)
    index = {pair: n for n, pair in enumerate(pairs)}
    counts = np.bincount([index[tuple(np.flatnonzero(m))] for m in masks], minlength=len(pairs))
    assert scipy.stats.chisquare(counts, probs * N).pvalue > 1e-3
    # The test has power: the other distribution's expected counts are rejected.
    other = "half_uniform" if sampling == "s" else "s"
    _, wrong = _pair_probs(np.asarray(sampling_probs(S, other), np.float64))
    assert scipy.stats.chisquare(counts, wrong * N).pvalue < 1e-6


def test_active_permutation_puts_the_drawn_pairs_first():
    mask = jnp.array([False, True, False, True, True])
    np.testing.assert_array_equal(active_permutation(mask), [1, 3, 4, 0, 2])


def test_zero_singular_values_are_never_drawn_under_s_weights():
    s = jnp.array([1.0, 0.0, 2.0, 0.0])
    masks = jax.vmap(lambda k: sample_active(k, s, 2))(jax.random.split(jax.random.key(1), 200))
    assert not np.asarray(masks)[:, [1, 3]].any()
