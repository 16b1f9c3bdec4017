"""Tiny :class:`~jaxlab.core.task.Task` s for fast tests of the training loop.

``ToyTask``: a two-layer MLP fits ``y = sin(x @ w)`` on seeded Gaussian inputs served by a real
grain pipeline (checkpointable iterator), so the loop, checkpoints, resume and error paths are
exercised end to end in a second or two. ``nan_at_row`` plants a NaN in one training row (the loss
goes NaN); ``nan_grad_at_row`` makes one row's loss finite but its gradient NaN (the derivative of
``sqrt`` at 0 times a zero coefficient is ``0 * inf``).

``ClimbTask``: one scalar parameter climbs by the learning rate each step (Adam's update of a
constant gradient) towards a cliff at 1, past which the loss is NaN: the divergence a learning rate
that is too high causes, in a form whose step is known in advance.
"""

from __future__ import annotations

import dataclasses

import grain
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.nn.layers import MLP

__all__ = ["ClimbTask", "ToyTask"]


class _Regressor(nnx.Module):
    def __init__(self, dim: int, hidden: int, *, rngs: nnx.Rngs):
        self.mlp = MLP(dim, hidden, out_std=0.1, rngs=rngs)

    def __call__(self, x):
        return self.mlp(x).sum(-1)


def _rows(n: int):
    return grain.MapDataset.source(np.arange(n)).repeat(None)


@dataclasses.dataclass
class ToyTask:
    """Regression of ``sin(x @ w)`` by an MLP; ``nan_at_row``, ``nan_grad_at_row`` poison a row."""

    dim: int = 8
    hidden: int = 16
    rows: int = 256
    nan_at_row: int | None = None
    nan_grad_at_row: int | None = None

    def __post_init__(self) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(self.rows + 64, self.dim)).astype(np.float32)
        self.y = np.sin(self.x @ rng.normal(size=self.dim)).astype(np.float32)
        self.poison = np.zeros(len(self.x), np.float32)
        if self.nan_at_row is not None:
            self.x[self.nan_at_row] = np.nan
        if self.nan_grad_at_row is not None:
            self.poison[self.nan_grad_at_row] = 1.0

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        return _Regressor(self.dim, self.hidden, rngs=rngs)

    def loss(self, model, batch, key=None):
        del key
        pred = model(batch["x"])
        loss = jnp.mean((pred - batch["y"]) ** 2)
        objective = loss
        if self.nan_grad_at_row is not None:
            # Adds exactly 0 to the objective; its gradient is 0 except on the poisoned row, where
            # sqrt(0)' = inf times the zero coefficient is NaN.
            objective += 0.0 * jnp.sum(jnp.sqrt(jnp.abs(pred) * (1.0 - batch["poison"])))
        return objective, {"loss": loss}

    def train_iterator(self, batch_size: int, seed: int):
        ds = _rows(self.rows).map(
            lambda i: {"x": self.x[i], "y": self.y[i], "poison": self.poison[i]}
        )
        del seed  # Unshuffled, so a planted row arrives at a known step.
        return iter(ds.batch(batch_size, drop_remainder=True).to_iter_dataset())

    def eval_batches(self, batch_size: int, num_batches: int):
        x, y = self.x[self.rows :], self.y[self.rows :]
        return [
            {
                "x": x[i * batch_size : (i + 1) * batch_size],
                "y": y[i * batch_size : (i + 1) * batch_size],
                "poison": np.zeros(batch_size, np.float32),
            }
            for i in range(min(num_batches, len(x) // batch_size))
        ]

    def units_per_example(self) -> tuple[int, str]:
        return 1, "examples"


class _Climber(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.zeros(()))


@dataclasses.dataclass
class ClimbTask:
    """``loss = -w`` while ``w < 1`` and NaN past it; Adam moves ``w`` up by the learning rate.

    With a constant learning rate ``lr`` the loss of step ``s`` is ``-(s - 1) * lr`` until
    ``(s - 1) * lr`` passes 1, where it turns NaN.
    """

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        del rngs
        return _Climber()

    def loss(self, model, batch, key=None):
        del key
        w = model.w[...] + 0.0 * jnp.sum(batch["x"])
        # log(1 - w) is NaN past the cliff; times 0 it leaves the value and gradient of -w alone.
        loss = -w + 0.0 * jnp.log(1.0 - w)
        return loss, {"loss": loss, "w": w}

    def train_iterator(self, batch_size: int, seed: int):
        del seed
        ds = _rows(64).map(lambda i: {"x": np.float32(0.0) * i})
        return iter(ds.batch(batch_size, drop_remainder=True).to_iter_dataset())

    def eval_batches(self, batch_size: int, num_batches: int):
        return [{"x": np.zeros(batch_size, np.float32)}]

    def units_per_example(self) -> tuple[int, str]:
        return 1, "examples"
