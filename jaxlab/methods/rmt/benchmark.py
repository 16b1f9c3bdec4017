"""Seconds per training step of several LMs, measured side by side in one process.

Used by ``rmt_scaling`` to report the RMT/Transformer step-time ratio (the paper's Table 4:
7.17 s vs 4.06 s, 1.77x). Each model gets the same optimizer and batch; steps are compiled and
warmed up first, then timed in interleaved rounds (A, B, A, B, ...) so that drift in machine
load hits every model alike, and the median round is reported.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.nn.lm_task import cross_entropy

__all__ = ["step_seconds"]


def _compiled_step(build: Callable[[nnx.Rngs], nnx.Module], batch, lr: float):
    model = build(nnx.Rngs(0))
    graphdef, state = nnx.split((model, nnx.Optimizer(model, optax.adamw(lr), wrt=nnx.Param)))

    def step(state):
        model, opt = nnx.merge(graphdef, state)

        def loss_fn(m):
            logits = m(batch["inputs"], segment_ids=batch["segment_ids"])
            return cross_entropy(logits, batch["targets"])[0]

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return nnx.split((model, opt))[1], loss

    step = jax.jit(step, donate_argnums=0)
    state, loss = step(state)  # compile + one warm-up step
    loss.block_until_ready()
    return step, state


def step_seconds(
    builders: Mapping[str, Callable[[nnx.Rngs], nnx.Module]],
    batch: Mapping[str, jax.Array],
    *,
    rounds: int = 5,
    steps_per_round: int = 4,
    lr: float = 1e-3,
) -> dict[str, float]:
    """Median seconds per train step (fwd + bwd + AdamW) of each model on the same batch."""
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    compiled = {name: _compiled_step(build, batch, lr) for name, build in builders.items()}
    times: dict[str, list[float]] = {name: [] for name in builders}
    for _ in range(rounds):
        for name, (step, state) in compiled.items():
            start = time.perf_counter()
            for _ in range(steps_per_round):
                state, loss = step(state)
            loss.block_until_ready()
            times[name].append((time.perf_counter() - start) / steps_per_round)
            compiled[name] = (step, state)
    return {name: statistics.median(t) for name, t in times.items()}
