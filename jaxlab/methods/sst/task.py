"""Any jaxlab task trained with SST or one of its baselines, through the shared loop.

:class:`LowRankTask` wraps a task (the language-modelling :class:`~jaxlab.lm.task.LMTask`,
a regression task, ...) and changes only how its linear maps are trained, by
:class:`~jaxlab.methods.sst.config.SSTConfig`: ``build_model`` converts the inner model's maps
(spectral layers for ``sst``, LoRA layers for ``lora``/``relora``; ``full`` and ``galore`` keep
them dense), ``optimizer`` is the method's (:mod:`jaxlab.methods.sst.optim`) on the loop's
schedule times the restarts of the learning rate (SST's per-iteration warm-up, ReLoRA*'s after each
merge: :func:`~jaxlab.methods.sst.hooks.jagged_schedule`), ``state_hooks`` are
SST's redraws or ReLoRA*'s merges (:mod:`jaxlab.methods.sst.hooks`). Loss, data and units are the
inner task's, so every method sees the same recipe. :meth:`LowRankTask.memory` counts the trainable
parameters and the optimizer-state bytes from shapes alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.optim import make_schedule
from jaxlab.methods.sst.config import SSTConfig
from jaxlab.methods.sst.convert import to_lora, to_spectral
from jaxlab.methods.sst.hooks import jagged_schedule, relora_hook, sst_hook
from jaxlab.methods.sst.optim import make_method_optimizer, optimizer_state_bytes

__all__ = ["LowRankTask"]


@dataclasses.dataclass
class LowRankTask:
    """``inner`` with its linear maps trained by ``sst.method`` (module docstring)."""

    inner: Any
    sst: SSTConfig

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        model = self.inner.build_model(rngs)
        c = self.sst
        if c.method == "sst":
            return to_spectral(
                model, c.rank, key=rngs.params(), sampling=c.sampling, exclude=c.exclude
            )
        if c.method in ("lora", "relora"):
            return to_lora(model, c.rank, alpha=c.alpha, key=rngs.params(), exclude=c.exclude)
        return model

    def optimizer(self, cfg: TrainConfig, schedule: optax.Schedule):
        c = self.sst
        if c.method == "relora":
            schedule = jagged_schedule(schedule, c.relora_every, c.relora_warmup)
        if c.method == "sst" and c.iteration_warmup:  # App. F: each iteration re-warms
            schedule = jagged_schedule(schedule, c.resample_every, c.iteration_warmup)
        return make_method_optimizer(cfg, schedule, self.sst)

    def state_hooks(self):
        if self.sst.method == "sst":
            return (sst_hook(self.sst),)
        if self.sst.method == "relora":
            return (relora_hook(self.sst),)
        return ()

    def loss(self, model, batch, key=None):
        return self.inner.loss(model, batch, key)

    def train_iterator(self, batch_size: int, seed: int):
        return self.inner.train_iterator(batch_size, seed)

    def eval_batches(self, batch_size: int, num_batches: int):
        return self.inner.eval_batches(batch_size, num_batches)

    def units_per_example(self) -> tuple[int, str]:
        return self.inner.units_per_example()

    def memory(self, cfg: TrainConfig) -> dict[str, int]:
        """Trainable parameters, all parameters and optimizer-state bytes (shapes only)."""
        model = nnx.eval_shape(lambda: self.build_model(nnx.Rngs(params=jax.random.key(0))))
        params = nnx.as_pure(nnx.state(model, nnx.Param))
        everything = nnx.state(model)
        tx = self.optimizer(cfg, make_schedule(cfg))
        return {
            "trainable_params": int(sum(x.size for x in jax.tree.leaves(params))),
            "model_numbers": int(sum(x.size for x in jax.tree.leaves(everything))),
            "optimizer_state_bytes": optimizer_state_bytes(tx, params),
        }
