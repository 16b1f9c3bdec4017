"""Partial domain-adaptation tasks on real handwriting and clothing, in the 8×8 optdigits format.

Source and target are images of the same classes from two *domains*; the target holds only a subset
of the source classes (partial DA, Cao et al. 2018; Naram et al., ICML 2025, Sec. 2). Every task is
64-dimensional so one network serves all of them:

* ``digits_to_mnist``: source = scikit-learn's bundled 8×8 digits (UCI optdigits, all 10 classes);
  target = the shipped MNIST converted to the optdigits format by :func:`to_optdigits` (the UCI
  recipe: crop to the ink's bounding box, pad to a square, resize to 32×32, threshold at 0.5, count
  the on-pixels of each 4×4 block, giving 0–16 per cell) and restricted to ``target_classes``;
* ``mnist_to_digits``: the reverse direction;
* ``fashion``: source = Fashion-MNIST averaged down to 8×8 (grey levels, the whole frame); target =
  Fashion-MNIST through :func:`to_optdigits` (binarised, bounding-box normalised) with classes
  dropped — the same garments seen through a different sensor pipeline.

The target split is transductive, as in the partial-DA literature and the authors' code: the
unlabelled target images the method adapts to are the ones its accuracy is measured on.

Structure that per-sample weights can use and per-class weights cannot (:func:`load_task`'s
``outlier_factor`` and ``variant_frac``): the outlier classes (absent from the target) oversampled
by resampling with replacement, and a *variant* subgroup of the shared classes: a share of each
shared class's source images rotated by a quarter turn (:func:`quarter_turn`), which the target
never holds. Per-class weights must give a variant the weight of its class; a per-sample weight can
give it none. ``DATask.variant`` flags those source points.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from jaxtyping import Bool, Float, Int, UInt8

from jaxlab.core.errors import ConfigError
from jaxlab.data.images import load_digits_8x8, load_fashion_mnist, load_mnist

__all__ = ["TASKS", "DATask", "area_downsample", "load_task", "quarter_turn", "to_optdigits"]

TASKS = ("digits_to_mnist", "mnist_to_digits", "fashion")


class DATask(NamedTuple):
    """A partial-DA task: labelled source, unlabelled target (labels kept for evaluation only).

    Attributes:
      xs, ys: source images ``(Ns, 64)`` in [0, 1] and labels.
      xt, yt: target images ``(Nt, 64)`` and their labels (never used for training).
      num_classes: classes of the source label space.
      target_classes: the classes present in the target.
      variant: per source point, whether it belongs to the shared-class subgroup the target does
        not hold (None: no such subgroup).
    """

    xs: Float[np.ndarray, "Ns 64"]
    ys: Int[np.ndarray, " Ns"]
    xt: Float[np.ndarray, "Nt 64"]
    yt: Int[np.ndarray, " Nt"]
    num_classes: int
    target_classes: tuple[int, ...]
    variant: Bool[np.ndarray, " Ns"] | None = None

    @property
    def source_variant(self) -> Bool[np.ndarray, " Ns"]:
        """``variant``, all False when the task has no such subgroup."""
        return np.zeros(len(self.ys), bool) if self.variant is None else self.variant

    @property
    def outlier_classes(self) -> tuple[int, ...]:
        """Source classes absent from the target."""
        return tuple(c for c in range(self.num_classes) if c not in self.target_classes)


def _resize(image: np.ndarray, size: int) -> np.ndarray:
    from scipy.ndimage import zoom  # scipy is a main dependency; imported on use

    out = zoom(image, (size / image.shape[0], size / image.shape[1]), order=1)
    return out[:size, :size]


def to_optdigits(images: UInt8[np.ndarray, "N height width"]) -> Float[np.ndarray, "N 8 8"]:
    """Images in the UCI optdigits format: 8×8 counts of on-pixels in 4×4 blocks, scaled to [0, 1].

    Each image is cropped to the bounding box of its ink (pixels > 0), padded with background to a
    centred square, resized (bilinear) to 32×32, thresholded at half the maximum intensity, and the
    on-pixels of each 4×4 block are counted (0–16) and divided by 16, like ``load_digits_8x8``.
    """
    images = np.asarray(images, np.float32)
    if images.ndim != 3:
        raise ConfigError(f"expected images (N, H, W), got shape {images.shape}")
    out = np.zeros((len(images), 8, 8), np.float32)
    for k, img in enumerate(images / max(float(images.max()), 1e-12)):
        rows, cols = np.nonzero(img > 0)
        if rows.size == 0:
            continue  # a blank image stays blank
        crop = img[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        side = max(crop.shape)
        square = np.zeros((side, side), np.float32)
        r0, c0 = (side - crop.shape[0]) // 2, (side - crop.shape[1]) // 2
        square[r0 : r0 + crop.shape[0], c0 : c0 + crop.shape[1]] = crop
        bits = _resize(square, 32) >= 0.5
        out[k] = bits.reshape(8, 4, 8, 4).sum(axis=(1, 3)) / 16.0
    return out


def area_downsample(images: UInt8[np.ndarray, "N 28 28"]) -> Float[np.ndarray, "N 8 8"]:
    """Grey-level 8×8 images by area averaging (28×28 padded to 32×32, mean over 4×4 blocks)."""
    images = np.asarray(images, np.float32) / 255.0
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2)))
    return padded.reshape(len(images), 8, 4, 8, 4).mean(axis=(2, 4)).astype(np.float32)


def quarter_turn(x: Float[np.ndarray, "N 64"]) -> Float[np.ndarray, "N 64"]:
    """Flattened 8×8 images turned a quarter (90° counter-clockwise): the variant subgroup."""
    return np.rot90(x.reshape(len(x), 8, 8), k=1, axes=(1, 2)).reshape(len(x), 64).copy()


def _structure(xs, ys, classes, outlier_factor, variant_frac, rng):
    """Oversamples the outlier classes and turns a share of each shared class's images.

    Outlier class images are resampled with replacement to ``outlier_factor`` times their count;
    ``round(variant_frac · n_c)`` images of each shared class c, drawn at random, are replaced by
    their :func:`quarter_turn` (labels kept) and flagged as variants.
    """
    parts_x, parts_y, parts_v = [], [], []
    for c in range(10):
        idx = np.flatnonzero(ys == c)
        if c not in classes:
            idx = np.concatenate([idx, rng.choice(idx, (outlier_factor - 1) * len(idx))])
        x, v = xs[idx].copy(), np.zeros(len(idx), bool)
        if c in classes:
            turned = rng.permutation(len(idx))[: int(round(variant_frac * len(idx)))]
            x[turned] = quarter_turn(x[turned])
            v[turned] = True
        parts_x.append(x)
        parts_y.append(ys[idx])
        parts_v.append(v)
    order = rng.permutation(sum(len(p) for p in parts_y))
    cat = lambda parts: np.concatenate(parts)[order]
    return cat(parts_x), cat(parts_y), cat(parts_v)


def _restrict(x, y, classes, limit, rng):
    # A seeded random order (the shipped MNIST is sorted by class), at most ``limit`` images.
    keep = rng.permutation(np.flatnonzero(np.isin(y, classes)))[:limit]
    return x[keep], y[keep]


def load_task(
    name: str,
    *,
    target_classes: tuple[int, ...] = (0, 1, 2, 3, 4),
    max_source: int | None = 2000,
    max_target: int | None = 1000,
    seed: int = 0,
    outlier_factor: int = 1,
    variant_frac: float = 0.0,
) -> DATask:
    """Builds one of :data:`TASKS` (flattened 64-pixel images).

    Args:
      name: ``digits_to_mnist``, ``mnist_to_digits`` or ``fashion``.
      target_classes: classes kept in the target (the source keeps all 10).
      max_source, max_target: subsample each domain to at most this many images (seeded; None
        keeps everything) to bound the cost of a run.
      seed: seed of the subsampling (and of the structure below).
      outlier_factor: the source's outlier-class images are resampled with replacement to this
        many times their count (after the ``max_source`` subsample; 1 = none).
      variant_frac: the share of each shared class's source images replaced by their quarter
        turn and flagged in ``DATask.variant`` (0 = no subgroup; the target never holds one).

    Raises:
      ConfigError: unknown task, classes outside 0–9, or structure out of range.
    """
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    classes = tuple(int(c) for c in target_classes)
    if not classes or any(c < 0 or c > 9 for c in classes) or len(set(classes)) != len(classes):
        raise ConfigError(f"target_classes must be distinct labels in 0..9, got {target_classes}")
    if int(outlier_factor) != outlier_factor or outlier_factor < 1 or not 0 <= variant_frac < 1:
        raise ConfigError(
            f"need an integer outlier_factor >= 1 and 0 <= variant_frac < 1, got "
            f"{outlier_factor} and {variant_frac}"
        )
    rng = np.random.default_rng(seed)
    if name == "fashion":
        images, labels = load_fashion_mnist("train")
        half = len(images) // 2  # disjoint images for the two domains
        xs, ys = area_downsample(images[:half]), labels[:half]
        xt, yt = _restrict(images[half:], labels[half:], classes, max_target, rng)
        xt = to_optdigits(xt)
    else:
        digits = load_digits_8x8()
        images, labels = load_mnist("train")
        mnist = (images, labels)
        if name == "digits_to_mnist":
            xs, ys = digits
            xt, yt = _restrict(*mnist, classes, max_target, rng)
            xt = to_optdigits(xt)
        else:
            xs, ys = _restrict(*mnist, tuple(range(10)), max_source, rng)
            xs = to_optdigits(xs)
            xt, yt = _restrict(*digits, classes, max_target, rng)
    xs, ys = _restrict(xs, ys, tuple(range(10)), max_source, rng)
    flat = lambda x: np.asarray(x, np.float32).reshape(len(x), 64)
    xs, ys = flat(xs), ys.astype(np.int32)
    if outlier_factor == 1 and variant_frac == 0:
        return DATask(xs, ys, flat(xt), yt.astype(np.int32), 10, classes)
    xs, ys, variant = _structure(xs, ys, classes, int(outlier_factor), variant_frac, rng)
    return DATask(xs, ys, flat(xt), yt.astype(np.int32), 10, classes, variant)
