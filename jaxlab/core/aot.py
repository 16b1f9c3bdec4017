"""Ahead-of-time compilation of a train step for a target mesh, with its memory figures.

MaxText's trick for catching out-of-memory and under-sharding early: lower and compile the exact
train step the loop runs (the jitted step of a :class:`~jaxlab.core.step.TrainProgram`) on abstract
inputs carrying their shardings — nothing is allocated or executed — then read XLA's
``memory_analysis()`` and ``cost_analysis()``. The compiled executable stays in that jitted step's
cache, so a program compiled here and then handed to the loop or the step timer is not compiled
again. On a CPU host, ``--xla_force_host_platform_device_count`` simulates the devices of a pod
slice; the count is fixed when JAX starts its backend, so :func:`run_with_devices` runs a function
in a fresh process with the device count it needs (jax 0.10 has no compile-only CPU or GPU
topology to target instead: ``jax.experimental.topologies`` describes TPUs only, and needs
libtpu).
"""

from __future__ import annotations

import math
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from jaxlab.core.errors import RunError
from jaxlab.core.flops import compiled_flops
from jaxlab.core.mesh import AxisRules, batch_sharding
from jaxlab.core.step import TrainProgram, sharded_shapes

__all__ = ["compile_train_step", "run_with_devices"]

T = TypeVar("T")
_DEVICE_FLAG = "--xla_force_host_platform_device_count"


def _bytes(leaves, per_device: bool) -> int:
    total = 0
    for x in leaves:
        shape = x.sharding.shard_shape(x.shape) if per_device else x.shape
        total += math.prod(shape) * x.dtype.itemsize
    return total


def compile_train_step(
    program: TrainProgram,
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
    batch_shapes: Mapping[str, tuple[tuple[int, ...], Any]],
) -> dict[str, float]:
    """Compiles ``program``'s train step for ``mesh`` without running it; returns size figures.

    Args:
      program: the program the loop trains, built on ``mesh`` and ``rules``
        (:func:`jaxlab.core.step.build_train_program`). Its own jitted step is lowered, so a later
        call of ``program.train_step`` on arrays of these shapes and shardings (the loop's or the
        step timer's, when they are handed this program) runs the executable compiled here.
      mesh, rules: where the state and the batch live.
      batch_shapes: ``{name: (shape, dtype)}`` of one global batch.

    Returns:
      ``state_bytes`` (parameters + optimizer state, all devices), ``state_bytes_per_device``
      (the largest shard each device holds, from the shardings), their ratio ``sharded_fraction``
      (1/num_devices when fully sharded), XLA's per-device ``argument``/``output``/``temp`` bytes,
      XLA's FLOP count of one step on one device (``flops_per_device``: forward, backward and
      optimizer update; :func:`jaxlab.core.flops.compiled_flops`), and the lowering and compile
      seconds.
    """
    state = sharded_shapes(program.abstract_state, program.shardings)
    batch = {
        name: jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh, rules, len(shape)))
        for name, (shape, dtype) in batch_shapes.items()
    }
    # The loop's per-step key: made under jax.set_mesh, it is replicated over the mesh (with that
    # sharding here, the loop's first call finds the step compiled below).
    key = jax.eval_shape(lambda: jax.random.key(0))
    key = jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=NamedSharding(mesh, PartitionSpec()))
    start = time.perf_counter()
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):  # as in the loop
        lowered = program.train_step.lower(state, batch, key)
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
        "flops_per_device": compiled_flops(compiled),
        "lower_seconds": lowered_at - start,
        "compile_seconds": done - lowered_at,
    }


def run_with_devices(fn: Callable[[], T], num_devices: int) -> T:
    """Calls ``fn()`` where JAX has exactly ``num_devices`` (simulated) CPU devices.

    In this process when it already has them (e.g. the tests' 8 devices), otherwise in a fresh
    ``python -m jaxlab.core.aot`` process started with ``--xla_force_host_platform_device_count``.
    ``fn`` travels there by pickle, so it must be importable (a module-level function or a
    ``functools.partial`` of one over picklable arguments); its result and any exception it raises
    come back by pickle too (a ConfigError in the child is a ConfigError here). The child's output
    goes to this process's stdout and stderr.

    Raises:
      RunError: the child died without a result (killed, out of memory).
    """
    if jax.default_backend() == "cpu" and jax.device_count() == num_devices:
        return fn()
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_FLAG)]
    root = str(pathlib.Path(__file__).resolve().parents[2])  # the checkout holding jaxlab/
    env = {
        **os.environ,
        "XLA_FLAGS": " ".join([*flags, f"{_DEVICE_FLAG}={num_devices}"]),
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    with tempfile.TemporaryDirectory(prefix="jaxlab_aot_") as tmp:
        job, result = pathlib.Path(tmp, "job.pkl"), pathlib.Path(tmp, "result.pkl")
        job.write_bytes(pickle.dumps(fn))
        code = subprocess.run(
            [sys.executable, "-m", "jaxlab.core.aot", str(job), str(result)], env=env
        ).returncode
        if not result.exists():
            raise RunError(
                f"the {num_devices}-device compile process ended (exit status {code}) without a "
                "result; see its output above"
            )
        ok, value = pickle.loads(result.read_bytes())
    if not ok:
        raise value
    return value


def _child(job: str, result: str) -> None:
    """The child side of :func:`run_with_devices`: run the pickled job, pickle what it gave."""
    fn = pickle.loads(pathlib.Path(job).read_bytes())
    try:
        payload = (True, fn())
    except Exception as err:  # noqa: BLE001 - every failure goes back to the parent
        payload = (False, err)
    try:
        data = pickle.dumps(payload)
    except Exception:  # noqa: BLE001 - an unpicklable result or exception
        data = pickle.dumps((False, RunError(f"compile process: {payload[1]!r}")))
    pathlib.Path(result).write_bytes(data)


if __name__ == "__main__":
    _child(*sys.argv[1:3])
