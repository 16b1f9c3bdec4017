"""A tiny regression :class:`~jaxlab.core.loop.Task` for fast tests of the training loop.

A two-layer MLP fits ``y = sin(x @ w)`` on seeded Gaussian inputs served by a real grain pipeline
(checkpointable iterator), so the loop, checkpoints, resume and error paths are exercised end to end
in a second or two. ``nan_at_row`` plants a NaN in one training row to test the non-finite guard.
"""

from __future__ import annotations

import dataclasses

import grain
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.nn.layers import MLP

__all__ = ["ToyTask"]


class _Regressor(nnx.Module):
    def __init__(self, dim: int, hidden: int, *, rngs: nnx.Rngs):
        self.mlp = MLP(dim, hidden, out_std=0.1, rngs=rngs)

    def __call__(self, x):
        return self.mlp(x).sum(-1)


@dataclasses.dataclass
class ToyTask:
    """Regression of ``sin(x @ w)`` with an MLP; ``nan_at_row`` poisons one training row."""

    dim: int = 8
    hidden: int = 16
    rows: int = 256
    nan_at_row: int | None = None

    def __post_init__(self) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(self.rows + 64, self.dim)).astype(np.float32)
        self.y = np.sin(self.x @ rng.normal(size=self.dim)).astype(np.float32)
        if self.nan_at_row is not None:
            self.x[self.nan_at_row] = np.nan

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        return _Regressor(self.dim, self.hidden, rngs=rngs)

    def loss(self, model, batch, key=None):
        del key
        err = model(batch["x"]) - batch["y"]
        loss = jnp.mean(err**2)
        return loss, {"loss": loss}

    def train_iterator(self, batch_size: int, seed: int):
        idx = np.arange(self.rows)
        ds = (
            grain.MapDataset.source(idx)
            .repeat(None)
            .map(lambda i: {"x": self.x[i], "y": self.y[i]})
            .batch(batch_size, drop_remainder=True)
        )
        del seed  # Unshuffled, so a planted NaN row arrives at a known step.
        return iter(ds.to_iter_dataset())

    def eval_batches(self, batch_size: int, num_batches: int):
        x, y = self.x[self.rows :], self.y[self.rows :]
        return [
            {
                "x": x[i * batch_size : (i + 1) * batch_size],
                "y": y[i * batch_size : (i + 1) * batch_size],
            }
            for i in range(min(num_batches, len(x) // batch_size))
        ]

    def tokens_per_example(self) -> int:
        return 1
