"""Seconds per training step of several LMs, measured side by side in one process.

Used by ``rmt_scaling`` to report the RMT/Transformer step-time ratio (the paper's Table 4 reports
the RMT 1.77x slower per step). Each model gets the same optimizer, loss and batch; the steps are
compiled and warmed up, then timed with jaxlab's one protocol (:func:`jaxlab.core.timing.
time_interleaved`: interleaved rounds so that drift in machine load hits every model alike,
medians reported).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.core.timing import time_interleaved
from jaxlab.nn.lm_task import cross_entropy

__all__ = ["step_seconds"]


def _step_runner(build: Callable[[nnx.Rngs], nnx.Module], batch, lr: float, z_loss: float):
    """A zero-argument callable running one donated train step (the state lives in a closure)."""
    model = build(nnx.Rngs(0))
    graphdef, state = nnx.split((model, nnx.Optimizer(model, optax.adamw(lr), wrt=nnx.Param)))

    def step(state):
        model, opt = nnx.merge(graphdef, state)

        def loss_fn(m):
            logits = m(batch["inputs"], segment_ids=batch["segment_ids"])
            ce, z = cross_entropy(logits, batch["targets"], z_loss)
            return ce + z

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return nnx.split((model, opt))[1], loss

    step = jax.jit(step, donate_argnums=0)
    holder = [state]

    def run():
        holder[0], loss = step(holder[0])
        return loss

    return run


def step_seconds(
    builders: Mapping[str, Callable[[nnx.Rngs], nnx.Module]],
    batch: Mapping[str, jax.Array],
    *,
    rounds: int = 5,
    steps_per_round: int = 4,
    lr: float = 1e-3,
    z_loss: float = 0.0,
) -> dict[str, float]:
    """Median seconds per train step (fwd + bwd + AdamW) of each model on the same batch."""
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    runners = {name: _step_runner(build, batch, lr, z_loss) for name, build in builders.items()}
    timings = time_interleaved(runners, repeats=rounds, calls=steps_per_round, warmup=1)
    return {name: t.median for name, t in timings.items()}
