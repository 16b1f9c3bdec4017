"""Small image-classification datasets that need no network, and their grain pipeline.

``load_mnist`` and ``load_fashion_mnist`` read the subsets shipped in ``assets/`` (MNIST: 8,000
train / 2,000 test with a class-balanced test set; Fashion-MNIST: 10,000 / 2,000, balanced; see
``assets/PROVENANCE.md``) as uint8 ``(N, 28, 28)`` images and int32 labels; both accept ``path=``
to load the same format from a user ``.npz`` (arrays ``images`` and ``labels``), so a full-size
run is a config change. ``load_digits_8x8`` wraps scikit-learn's bundled 8×8 digits.
:func:`image_dataset` turns any such pair into batches of float32 images in [0, 1] with a trailing
channel axis, shuffled per epoch by grain exactly like the text pipeline.
"""

from __future__ import annotations

import os

import grain
import numpy as np
from jaxtyping import Float, Int, Num, UInt8

from jaxlab.core.errors import ConfigError
from jaxlab.data.batching import index_batch_dataset
from jaxlab.data.shipped import asset_path

__all__ = ["image_dataset", "load_digits_8x8", "load_fashion_mnist", "load_images", "load_mnist"]

Images = tuple[UInt8[np.ndarray, "N 28 28"], Int[np.ndarray, " N"]]


def load_images(path: str | os.PathLike, split: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Loads ``images`` and ``labels`` (or ``{split}_images``/``{split}_labels``) from an .npz.

    Args:
        path: Path of the ``.npz`` file.
        split: If given, the prefix of the arrays to read (the shipped files hold ``train_*`` and
            ``test_*``); if None, the arrays ``images`` and ``labels``.

    Returns:
        The images as stored and the labels as int32.

    Raises:
        ConfigError: If the file or the arrays are missing, or their lengths differ.
    """
    if not os.path.isfile(path):
        raise ConfigError(f"image file {path} does not exist")
    keys = ("images", "labels") if split is None else (f"{split}_images", f"{split}_labels")
    with np.load(path, allow_pickle=False) as data:
        missing = [k for k in keys if k not in data.files]
        if missing:
            raise ConfigError(f"{path} lacks array(s) {missing}; it holds {data.files}")
        images, labels = data[keys[0]], data[keys[1]].astype(np.int32)
    if len(images) != len(labels):
        raise ConfigError(f"{path}: {len(images)} images but {len(labels)} labels")
    return images, labels


def _load_shipped(asset: str, split: str, path: str | os.PathLike | None) -> Images:
    if path is not None:
        return load_images(path)
    if split not in ("train", "test"):
        raise ConfigError(f"unknown split {split!r}; expected 'train' or 'test'")
    return load_images(asset_path(asset), split)


def load_mnist(split: str = "train", *, path: str | os.PathLike | None = None) -> Images:
    """MNIST digits: the shipped 8,000 train / 2,000 test subset, or a user .npz.

    Args:
        split: ``"train"`` or ``"test"`` (ignored when ``path`` is given).
        path: Optional ``.npz`` with arrays ``images`` (uint8 ``(N, 28, 28)``) and ``labels``.

    Returns:
        Images uint8 ``(N, 28, 28)`` and labels int32 ``(N,)``.
    """
    return _load_shipped("mnist.npz", split, path)


def load_fashion_mnist(split: str = "train", *, path: str | os.PathLike | None = None) -> Images:
    """Fashion-MNIST: the shipped balanced 10,000 train / 2,000 test subset, or a user .npz.

    Args:
        split: ``"train"`` or ``"test"`` (ignored when ``path`` is given).
        path: Optional ``.npz`` with arrays ``images`` (uint8 ``(N, 28, 28)``) and ``labels``.

    Returns:
        Images uint8 ``(N, 28, 28)`` and labels int32 ``(N,)``.
    """
    return _load_shipped("fashion_mnist.npz", split, path)


def load_digits_8x8() -> tuple[Float[np.ndarray, "N 8 8"], Int[np.ndarray, " N"]]:
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images, pixel counts 0–16).

    Returns:
        Images float32 ``(N, 8, 8)`` scaled to [0, 1] by dividing by 16, and labels int32 ``(N,)``.
    """
    from sklearn.datasets import load_digits  # sklearn is slow to import: only on use

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    return images, digits.target.astype(np.int32)


def _to_float(images: Num[np.ndarray, "B height width"]) -> np.ndarray:
    # uint8 pixels are bytes; anything else is taken to be in [0, 1] already.
    if images.dtype == np.uint8:
        return images.astype(np.float32)[..., None] / np.float32(255.0)
    return images.astype(np.float32)[..., None]


def image_dataset(
    images: Num[np.ndarray, "N height width"],
    labels: Int[np.ndarray, " N"],
    *,
    batch_size: int,
    seed: int,
    shuffle: bool = True,
    num_epochs: int | None = None,
) -> grain.IterDataset:
    """A grain dataset of image batches.

    Args:
        images: ``(N, H, W)`` uint8 pixels (scaled by 1/255) or floats already in [0, 1].
        labels: ``(N,)`` integer labels.
        batch_size: Images per batch; each epoch drops its last partial batch.
        seed: Shuffle seed; every epoch is reshuffled deterministically from it.
        shuffle: Whether to shuffle.
        num_epochs: Number of passes; ``None`` repeats forever.

    Returns:
        A ``grain.IterDataset`` of ``{"image": float32 (B, H, W, 1), "label": int32 (B,)}``.

    Raises:
        ConfigError: If the arrays disagree in length or are not ``(N, H, W)``.
    """
    if images.ndim != 3 or len(images) != len(labels):
        raise ConfigError(
            f"expected images (N, H, W) and labels (N,), got {images.shape} and {labels.shape}"
        )
    labels = np.asarray(labels, np.int32)
    return index_batch_dataset(
        len(images),
        lambda index: {"image": _to_float(images[index]), "label": labels[index]},
        batch_size=batch_size,
        seed=seed,
        shuffle=shuffle,
        num_epochs=num_epochs,
    )
