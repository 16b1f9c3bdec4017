"""The grain pipeline shared by the text and image datasets: shuffled index batches, then a gather.

In-memory datasets are batched by index: grain shuffles the row indices, groups them into batches
(dropping each epoch's remainder), and one ``gather`` call per batch fancy-indexes the arrays. That
is one vectorised copy per batch instead of stacking rows one by one. Shuffling is grain's
``MapDataset.shuffle`` followed by ``repeat``, which reshuffles every epoch with a per-epoch seed,
so the order is a pure function of (seed, step) and the iterator's state is just its position:
``get_state``/``set_state`` and orbax checkpointing restore it exactly. No worker processes and no
prefetch threads: the gather takes microseconds, and on small machines threads only compete with
the training step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grain
import numpy as np

from jaxlab.core.errors import ConfigError

__all__ = ["index_batch_dataset", "mix_seed"]


def mix_seed(seed: int) -> int:
    """Maps a user seed to a 32-bit shuffle seed.

    grain reshuffles epoch ``e`` with seed ``seed + e``, so seeds 0 and 1 would share their data
    orders shifted by one epoch; hashing the user seed first makes neighbouring seeds unrelated.

    Args:
        seed: Any non-negative integer.

    Returns:
        A seed in ``[0, 2**31)``, leaving room for the per-epoch increments.
    """
    return int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0] >> 1)


def index_batch_dataset(
    num_rows: int,
    gather: Callable[[np.ndarray], dict[str, Any]],
    *,
    batch_size: int,
    seed: int,
    shuffle: bool = True,
    num_epochs: int | None = None,
) -> grain.IterDataset:
    """Builds an iterable dataset of ``gather(indices)`` over batches of row indices.

    Args:
        num_rows: Number of rows in the in-memory dataset.
        gather: Maps an int64 array of ``batch_size`` row indices to a batch.
        batch_size: Rows per batch; each epoch drops its last partial batch.
        seed: Shuffle seed (ignored when ``shuffle`` is False).
        shuffle: Whether to reshuffle the rows every epoch.
        num_epochs: Number of passes; ``None`` repeats forever.

    Returns:
        A grain ``IterDataset``; ``iter()`` of it supports ``get_state``/``set_state``.

    Raises:
        ConfigError: If there are fewer rows than one batch, or the sizes are not positive.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be positive, got {batch_size}")
    if num_epochs is not None and num_epochs < 1:
        raise ConfigError(f"num_epochs must be positive or None, got {num_epochs}")
    if num_rows < batch_size:
        raise ConfigError(f"dataset has {num_rows} rows, fewer than one batch of {batch_size}")
    ds = grain.MapDataset.range(num_rows)
    if shuffle:
        ds = ds.shuffle(seed=mix_seed(seed))
    ds = ds.batch(batch_size, drop_remainder=True, batch_fn=lambda idx: np.asarray(idx, np.int64))
    ds = ds.map(gather).repeat(num_epochs)
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
