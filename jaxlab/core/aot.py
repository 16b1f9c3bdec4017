"""Ahead-of-time compilation of a train step for a target mesh, with its memory figures.

MaxText's trick for catching out-of-memory and under-sharding early: lower and compile the exact
train step the loop runs (:func:`jaxlab.core.loop.make_train_step`) on abstract inputs carrying
their shardings — nothing is allocated or executed — then read XLA's ``memory_analysis()``. On a
CPU host, ``--xla_force_host_platform_device_count`` simulates the devices of a pod slice.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping
from typing import Any

import jax
import optax
from flax import nnx

from jaxlab.core.loop import Task, create_state, make_train_step
from jaxlab.core.mesh import AxisRules, batch_sharding, state_shardings

__all__ = ["compile_train_step"]


def _bytes(leaves, per_device: bool) -> int:
    total = 0
    for x in leaves:
        shape = x.sharding.shard_shape(x.shape) if per_device else x.shape
        total += math.prod(shape) * x.dtype.itemsize
    return total


def compile_train_step(
    task: Task,
    tx: optax.GradientTransformation,
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
    batch_shapes: Mapping[str, tuple[tuple[int, ...], Any]],
) -> dict[str, float]:
    """Compiles ``task``'s train step for ``mesh`` without running it; returns size figures.

    Returns:
      ``state_bytes`` (parameters + optimizer state, all devices), ``state_bytes_per_device``
      (the largest shard each device holds, from the shardings), their ratio ``sharded_fraction``
      (1/num_devices when fully sharded), XLA's per-device ``argument``/``output``/``temp`` bytes,
      and the lowering and compile seconds.
    """
    key = jax.random.key(0)
    graphdef, abstract_state = jax.eval_shape(functools.partial(create_state, task, tx), key)
    shardings = state_shardings(abstract_state, mesh, rules)
    state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_state, shardings
    )
    batch = {
        name: jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh, rules, len(shape)))
        for name, (shape, dtype) in batch_shapes.items()
    }
    step = jax.jit(
        make_train_step(task, graphdef),
        in_shardings=(shardings, None, None),
        out_shardings=(shardings, None),
        donate_argnums=0,
    )
    start = time.perf_counter()
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):  # as in the loop
        lowered = step.lower(state, batch, jax.eval_shape(lambda: key))
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    memory = compiled.memory_analysis()
    leaves = jax.tree.leaves(state)
    total, per_device = _bytes(leaves, False), _bytes(leaves, True)
    return {
        "num_devices": mesh.size,
        "state_bytes": total,
        "state_bytes_per_device": per_device,
        "sharded_fraction": per_device / total,
        "argument_bytes_per_device": memory.argument_size_in_bytes,
        "output_bytes_per_device": memory.output_size_in_bytes,
        "temp_bytes_per_device": memory.temp_size_in_bytes,
        "lower_seconds": lowered_at - start,
        "compile_seconds": done - lowered_at,
    }
