"""A teacher–student regression task: a student MLP learns a random full-rank teacher MLP.

The cheapest setting in which low-rank training's limit shows: the teacher's two weight matrices
are dense Gaussian draws (full rank almost surely), so a student whose maps can only move by a
rank-``r`` update from their random init (LoRA) cannot reach it, while full-rank training can.
Inputs are N(0, I); targets are the teacher's outputs (plus optional Gaussian noise). Teacher and
student share the architecture (``d -> hidden -> d``, GELU, no biases, the fan-in init
N(0, 1/fan_in)) and differ in their draws. With ``widths`` (e.g. ``(64, 256, 256, 256, 32)``)
both are instead a deep tanh MLP (:class:`TanhMLP`), whose three hidden maps a rank-r student
must all rotate: the setting in which full-rank training has work to do in every layer. Metrics:
``loss`` (mean squared error) and ``relative_mse`` (its ratio to the targets' variance: 1 is the
constant predictor).
"""

from __future__ import annotations

import dataclasses

import grain
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.core.config import check
from jaxlab.nn.layers import MLP
from jaxlab.nn.linear import LinearSpec

__all__ = ["TanhMLP", "TeacherStudentTask"]


class TanhMLP(nnx.Module):
    """``x -> tanh(W_1 x) -> ... -> W_L h``: dense maps without biases between ``widths``, each
    drawn N(0, 1/fan_in), tanh after every map but the last."""

    def __init__(self, widths: tuple[int, ...], *, rngs: nnx.Rngs):
        spec = LinearSpec(matmul_impl="xla")
        self.maps = nnx.List(
            spec(d_in, d_out, std=d_in**-0.5, axes=("embed", "mlp"), rngs=rngs)
            for d_in, d_out in zip(widths[:-1], widths[1:], strict=True)
        )

    def __call__(self, x_BD: jax.Array) -> jax.Array:
        for layer in self.maps[:-1]:
            x_BD = jnp.tanh(layer(x_BD))
        return self.maps[-1](x_BD)


@dataclasses.dataclass
class TeacherStudentTask:
    """Regression of a random teacher MLP's outputs (module docstring).

    Args:
      d_model, hidden: widths of both MLPs (the GELU ``d -> hidden -> d`` pair).
      widths: a deep tanh teacher and student instead (:class:`TanhMLP`), input width first;
        ``()`` keeps the GELU pair.
      rows, eval_rows: training and validation examples (drawn once, seeded).
      noise: standard deviation of the label noise.
      data_seed: seed of the teacher and of the inputs.
    """

    d_model: int = 64
    hidden: int = 256
    widths: tuple[int, ...] = ()
    rows: int = 16384
    eval_rows: int = 2048
    noise: float = 0.0
    data_seed: int = 1234

    def __post_init__(self) -> None:
        check(self.d_model > 0 and self.hidden > 0, "d_model and hidden must be positive")
        check(self.rows > 0 and self.eval_rows > 0, "rows and eval_rows must be positive")
        check(
            not self.widths or (len(self.widths) >= 2 and min(self.widths) > 0),
            f"widths={self.widths} must be () or at least two positive widths",
        )
        teacher = self._mlp(nnx.Rngs(params=jax.random.key(self.data_seed)))
        rng = np.random.default_rng(self.data_seed)
        d_in = self.widths[0] if self.widths else self.d_model
        x = rng.normal(size=(self.rows + self.eval_rows, d_in)).astype(np.float32)
        y = np.asarray(jax.jit(lambda m, x: m(x))(teacher, jnp.asarray(x)))
        y = y + self.noise * rng.normal(size=y.shape).astype(np.float32)
        self.x, self.y = x, y
        self.target_var = float(np.var(y[: self.rows]))

    def _mlp(self, rngs: nnx.Rngs) -> nnx.Module:
        if self.widths:
            return TanhMLP(self.widths, rngs=rngs)
        return MLP(
            self.d_model,
            self.hidden,
            in_std=self.d_model**-0.5,
            out_std=self.hidden**-0.5,
            matmul_impl="xla",
            rngs=rngs,
        )

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        return self._mlp(rngs)

    def loss(self, model, batch, key=None):
        del key
        mse = jnp.mean((model(batch["x"]) - batch["y"]) ** 2)
        return mse, {"loss": mse, "relative_mse": mse / self.target_var}

    def train_iterator(self, batch_size: int, seed: int):
        ds = (
            grain.MapDataset.source(np.arange(self.rows))
            .shuffle(seed=seed)
            .repeat(None)
            .map(lambda i: {"x": self.x[i], "y": self.y[i]})
            .batch(batch_size, drop_remainder=True)
        )
        return iter(ds.to_iter_dataset())

    def eval_batches(self, batch_size: int, num_batches: int) -> list[dict[str, np.ndarray]]:
        n = min(num_batches, max(self.eval_rows // batch_size, 1))
        start = self.rows
        return [
            {
                "x": self.x[start + b * batch_size : start + (b + 1) * batch_size],
                "y": self.y[start + b * batch_size : start + (b + 1) * batch_size],
            }
            for b in range(n)
        ]

    def units_per_example(self) -> tuple[int, str]:
        return 1, "examples"
