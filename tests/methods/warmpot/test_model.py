"""WARMPOT's trained head against the authors' ``ResNetFc_OfficeHome`` (JayD2106/WARMPOT,
``network.py``): a linear bottleneck with no ReLU, torch's ``xavier_normal_`` weights (an
untruncated normal of std ``gain·sqrt(2/(fan_in + fan_out))``, gain 1) and zero biases; and the
earlier ``pada_relu`` head (PADA's ``N(0, 0.005²)`` / ``N(0, 0.01²)``, with a ReLU)."""

import numpy as np
import pytest
import scipy.stats
from flax import nnx

from jaxlab.methods.warmpot.model import Head


def _kernels(head: Head) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(head.f1.kernel[...], np.float64), np.asarray(head.g.kernel[...], np.float64)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_authors_head_starts_from_torchs_xavier_normal_with_zero_biases(seed):
    d_in, features, classes = 300, 256, 10
    head = Head(d_in, features, classes, rngs=nnx.Rngs(seed))
    w_f, w_g = _kernels(head)
    # torch.nn.init.xavier_normal_(w, gain=1): std = gain * sqrt(2 / (fan_in + fan_out)).
    std_f = 1.0 * np.sqrt(2.0 / (d_in + features))
    std_g = 1.0 * np.sqrt(2.0 / (features + classes))
    # Relative sd of a sample std is 1/sqrt(2n): 0.26% for the bottleneck, 1.4% for g.
    np.testing.assert_allclose(w_f.std(), std_f, rtol=0.015)
    np.testing.assert_allclose(w_g.std(), std_g, rtol=0.06)
    assert abs(w_f.mean()) < 4 * std_f / np.sqrt(w_f.size)
    # An untruncated normal: the whole shape, and its tails (1.24% beyond 2.5 sd; a normal
    # truncated at 2 sd, flax's xavier_normal, has none there).
    assert scipy.stats.kstest(w_f.ravel() / std_f, "norm").pvalue > 1e-3
    tail = np.mean(np.abs(w_f) > 2.5 * std_f)
    assert 0.009 < tail < 0.016, tail
    for layer in (head.f1, head.g):
        np.testing.assert_array_equal(np.asarray(layer.bias[...]), 0.0)


def test_the_authors_bottleneck_is_linear_negative_values_pass_through():
    rng = np.random.default_rng(0)
    head = Head(5, 4, 3, rngs=nnx.Rngs(0))
    w_f, b_f = rng.standard_normal((5, 4)), rng.standard_normal(4)
    w_g, b_g = rng.standard_normal((4, 3)), rng.standard_normal(3)
    for var, value in ((head.f1.kernel, w_f), (head.f1.bias, b_f), (head.g.kernel, w_g),
                       (head.g.bias, b_g)):  # fmt: skip
        var[...] = value.astype(np.float32)
    x = rng.standard_normal((8, 5))
    z = x @ w_f + b_f  # the authors' forward: x = self.bottleneck(x); y = self.fc(x)
    assert (z < -0.1).sum() >= 5  # negative pre-activations that a ReLU would zero
    got_z = np.asarray(head.features(x.astype(np.float32)))
    np.testing.assert_allclose(got_z, z, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(head(x.astype(np.float32))), z @ w_g + b_g,
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_the_pada_relu_head_is_jaxlabs_earlier_one():
    head = Head(300, 256, 10, kind="pada_relu", rngs=nnx.Rngs(0))
    w_f, w_g = _kernels(head)
    np.testing.assert_allclose(w_f.std(), 0.005, rtol=0.015)
    np.testing.assert_allclose(w_g.std(), 0.01, rtol=0.06)
    x = np.random.default_rng(1).standard_normal((6, 300)).astype(np.float32)
    z = x.astype(np.float64) @ w_f  # biases start at 0
    np.testing.assert_allclose(np.asarray(head.features(x)), np.maximum(z, 0.0), atol=1e-6)


def test_an_unknown_head_kind_is_one_line():
    with pytest.raises(ValueError, match="kind='relu'.*authors"):
        Head(3, 2, 2, kind="relu", rngs=nnx.Rngs(0))
