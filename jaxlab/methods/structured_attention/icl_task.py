"""In-context linear regression as a :class:`jaxlab.core.task.Task` for the shared loop.

Training follows Garg et al. 2022 (Sec. 3) as Kuang et al. 2025 use it (Sec. 5.1): every batch
draws fresh prompts (:func:`jaxlab.data.icl_regression.regression_batch`); a curriculum starts
with few active dimensions and few points and raises both in equal stages until the full ``d``
and ``N`` are reached at ``curriculum_steps`` (Garg et al.: 5 -> 20 dimensions and 11 -> 41 points
in stages of 2,000 steps over 500k steps). Shapes stay fixed: a prompt is always ``N`` points
long and the loss averages the squared error over the first ``n_active`` points only, which under
causal attention is the loss of the truncated prompt. Evaluation uses every dimension and point;
``last_error`` is the squared error at the last query (the paper's metric).
"""

from __future__ import annotations

import dataclasses

import grain
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.optim import LrGroups, make_optimizer
from jaxlab.data.icl_regression import regression_batch
from jaxlab.methods.structured_attention.icl_model import ICLConfig, ICLTransformer
from jaxlab.methods.structured_attention.mup import mup_lr_groups

__all__ = ["ICLRegressionTask", "curriculum", "icl_lr_groups"]

EVAL_SEED = 1_000_003  # the evaluation stream, apart from every training seed


def curriculum(step: int, cfg: ICLConfig, curriculum_steps: int, stages: int = 4):
    """``(active_dims, n_active)`` at ``step``: from ``d/4`` dims and ``N/4`` points (at least 1)
    up to ``(d, N)`` in ``stages`` equal steps, reached at ``curriculum_steps``."""
    if curriculum_steps <= 0:
        return cfg.dim, cfg.n_points
    stage = min(stages, stages * step // curriculum_steps)
    frac = (1 + 3 * stage / stages) / 4  # 1/4 .. 1
    return max(1, round(cfg.dim * frac)), max(1, round(cfg.n_points * frac))


@dataclasses.dataclass
class ICLRegressionTask:
    """Fresh regression prompts per step, with a curriculum (see the module docstring)."""

    model: ICLConfig
    curriculum_steps: int = 0
    max_steps: int = 1_000_000  # length of the index stream the training pipeline maps over

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        return ICLTransformer(self.model, rngs=rngs)

    def _batch(self, seed: int, index: int, batch_size: int, full: bool) -> dict:
        cfg = self.model
        dims, points = (
            (cfg.dim, cfg.n_points) if full else curriculum(index, cfg, self.curriculum_steps)
        )
        batch = regression_batch(seed, index, batch_size, cfg.dim, cfg.n_points, dims)
        batch["mask"] = (
            (np.arange(cfg.n_points) < points).astype(np.float32)[None].repeat(batch_size, 0)
        )
        return batch

    def loss(self, model, batch, key=None):
        del key
        pred_BN = model(batch["xs"], batch["ys"])
        err_BN = (pred_BN - batch["ys"]) ** 2
        loss = jnp.sum(err_BN * batch["mask"]) / jnp.sum(batch["mask"])
        return loss, {"loss": loss, "last_error": jnp.mean(err_BN[:, -1])}

    def train_iterator(self, batch_size: int, seed: int):
        ds = grain.MapDataset.range(self.max_steps).map(
            lambda i: self._batch(seed, int(i), batch_size, full=False)
        )
        return iter(ds.to_iter_dataset())

    def eval_batches(self, batch_size: int, num_batches: int):
        return [self._batch(EVAL_SEED, i, batch_size, full=True) for i in range(num_batches)]

    def units_per_example(self) -> tuple[int, str]:
        return 1, "prompts"

    def optimizer(self, cfg: TrainConfig, schedule: optax.Schedule):
        """The loop's AdamW, with the authors' per-layer µP rates under ``parametrization="mup"``
        (:func:`~jaxlab.methods.structured_attention.mup.mup_lr_groups`)."""
        return make_optimizer(cfg, lr_groups=icl_lr_groups(self), schedule=schedule)


def icl_lr_groups(task) -> LrGroups | None:
    """A task's µP learning-rate groups (``None``: one rate) from the shapes of its model."""
    if not task.model.mup:
        return None
    return mup_lr_groups(nnx.eval_shape(lambda: task.build_model(nnx.Rngs(0))))
