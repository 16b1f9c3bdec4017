"""Device meshes, logical-axis sharding rules, global batches and multi-process start-up.

jaxlab shards declaratively: parameters carry logical axis names (``"embed"``, ``"mlp"``,
``"heads"``, ``"vocab"``...) through ``nnx.with_partitioning``, one :class:`AxisRules` object maps
them onto the mesh axes ``data``, ``fsdp`` and ``tensor``, and train steps are ``jax.jit`` with
explicit in/out shardings. Meshes are built with ``AxisType.Auto`` on purpose: jax 0.10's
``jax.make_mesh`` defaults to ``Explicit`` axes, under which a matmul contracting over an
fsdp-sharded dimension raises ``ShardingTypeError``; logical rules want GSPMD's propagation.
Models are built with flax's eager sharding off and placed by ``jax.jit(init, out_shardings=...)``,
so the same model code runs on one device without any mesh.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from flax.core import spmd as flax_spmd
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxlab.core.config import check
from jaxlab.core.environment import distributed_settings
from jaxlab.core.errors import ConfigError

__all__ = [
    "AxisRules",
    "LocalBatch",
    "MeshConfig",
    "batch_shards",
    "batch_sharding",
    "constrain",
    "global_batch",
    "global_batch_shapes",
    "make_mesh",
    "maybe_initialize_distributed",
    "process_slice",
    "state_shardings",
]

MESH_AXES = ("data", "fsdp", "tensor")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Mesh shape: sizes of the ``data``, ``fsdp`` and ``tensor`` axes; -1 takes what is left.

    With no -1 and a product smaller than the device count, the mesh uses the first devices only
    (e.g. ``data=1`` for a single-device reference run).
    """

    data: int = -1
    fsdp: int = 1
    tensor: int = 1

    def __post_init__(self) -> None:
        sizes = (self.data, self.fsdp, self.tensor)
        check(sum(s == -1 for s in sizes) <= 1, "mesh: at most one of data/fsdp/tensor may be -1")
        check(all(s == -1 or s > 0 for s in sizes), "mesh: axis sizes must be positive or -1")

    def shape(self, num_devices: int) -> tuple[int, int, int]:
        sizes = [self.data, self.fsdp, self.tensor]
        known = math.prod(s for s in sizes if s != -1)
        if -1 in sizes:
            if num_devices % known:
                raise ConfigError(
                    f"mesh: {num_devices} devices do not divide by fsdp*tensor={known}; "
                    "change mesh.fsdp or mesh.tensor"
                )
            sizes[sizes.index(-1)] = num_devices // known
        if -1 not in (self.data, self.fsdp, self.tensor) and math.prod(sizes) < num_devices:
            return tuple(sizes)  # An explicit smaller mesh uses the first devices only.
        if math.prod(sizes) != num_devices:
            raise ConfigError(
                f"mesh: data*fsdp*tensor={math.prod(sizes)} but there are {num_devices} devices; "
                "set one axis to -1 or make the product match"
            )
        return tuple(sizes)


@dataclasses.dataclass(frozen=True)
class AxisRules:
    """Maps logical parameter/activation axis names to mesh axes (``None`` = replicated).

    The defaults give data parallelism over ``data`` and ``fsdp`` for the batch, ZeRO-3 style
    parameter sharding of the model dimension over ``fsdp``, and Megatron-style tensor parallelism
    of heads, MLP hidden units and the vocabulary over ``tensor``; the ``layers`` axis of
    parameters stacked for a scan over blocks is replicated.
    """

    rules: tuple[tuple[str, Any], ...] = (
        ("batch", ("data", "fsdp")),
        ("embed", "fsdp"),
        ("mlp", "tensor"),
        ("heads", "tensor"),
        ("kv", None),
        ("vocab", "tensor"),
        ("seq", None),
        ("layers", None),  # the stacked axis of scanned blocks
    )

    def as_tuple(self) -> tuple[tuple[str, Any], ...]:
        return self.rules

    def spec(self, *logical: str | None) -> PartitionSpec:
        table = dict(self.rules)
        return PartitionSpec(*(table.get(name) if name else None for name in logical))


def constrain(x: jax.Array, *logical: str | None) -> jax.Array:
    """Pins an activation's sharding by logical axis names, e.g. ``constrain(x, "batch", None)``.

    Without it GSPMD may replicate activations across the fsdp axis (the compiled temporaries of a
    64-device step then scale with the global batch). Active only while a mesh is set with
    ``jax.set_mesh`` and rules with ``nnx.logical_axis_rules`` (the loop does both); elsewhere a
    no-op, so models run unchanged on one device.
    """
    mesh = jax.sharding.get_abstract_mesh()
    table = dict(flax_spmd.get_logical_axis_rules())
    if mesh.empty or not table:
        return x
    return jax.lax.with_sharding_constraint(x, PartitionSpec(*(table.get(a) for a in logical)))


def make_mesh(cfg: MeshConfig | None = None, devices: list | None = None) -> Mesh:
    """A ``(data, fsdp, tensor)`` mesh with Auto axis types over ``devices`` (default: all)."""
    cfg = cfg or MeshConfig()
    devices = devices if devices is not None else jax.devices()
    shape = cfg.shape(len(devices))
    devices = devices[: math.prod(shape)]
    return jax.make_mesh(
        shape,
        MESH_AXES,
        axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES),
        devices=devices,
    )


def state_shardings(abstract_state: Any, mesh: Mesh, rules: AxisRules) -> Any:
    """NamedShardings for an ``nnx.State`` from its variables' logical-axis annotations."""
    with nnx.logical_axis_rules(rules.as_tuple()):
        specs = nnx.get_partition_spec(abstract_state)
    shardings = jax.tree.map(
        lambda spec: NamedSharding(mesh, spec),
        specs,
        is_leaf=lambda x: isinstance(x, PartitionSpec),
    )
    # optax.multi_transform leaves empty MaskedNodes in each group's state for the parameters of
    # other groups; keep them empty here too so the two trees have the same structure.
    masked = lambda x: isinstance(x, optax.MaskedNode)  # noqa: E731
    return jax.tree.map(
        lambda a, s: a if masked(a) else s, abstract_state, shardings, is_leaf=masked
    )


def batch_sharding(mesh: Mesh, rules: AxisRules, ndim: int = 2) -> NamedSharding:
    """Sharding of a batch array: leading axis over the batch mesh axes, the rest replicated."""
    return NamedSharding(mesh, rules.spec("batch", *([None] * (ndim - 1))))


def batch_shards(mesh: Mesh, rules: AxisRules) -> int:
    """Into how many parts the batch axis is split: the sizes of the mesh axes ``batch`` maps to."""
    axes = batch_sharding(mesh, rules).spec[0] or ()
    axes = (axes,) if isinstance(axes, str) else axes
    return math.prod(mesh.shape[a] for a in axes if a in mesh.shape)


def process_slice(global_batch_size: int) -> slice:
    """The rows of a global batch that this process feeds (contiguous, in process order)."""
    n = jax.process_count()
    if global_batch_size % n:
        raise ConfigError(
            f"train.batch_size={global_batch_size} does not divide over {n} processes"
        )
    per = global_batch_size // n
    return slice(jax.process_index() * per, (jax.process_index() + 1) * per)


class LocalBatch(dict):
    """A host batch that holds only this process's rows of the global batch.

    The rows are those :func:`process_slice` names, in order; :func:`global_batch` assembles such a
    batch as it is (the global batch has ``process_count`` times its rows) instead of slicing it.
    Pipelines that read from disk (:mod:`jaxlab.data.shards`) yield it so that each host reads only
    its part.
    """


def global_batch(
    batch: Mapping[str, np.ndarray], mesh: Mesh, rules: AxisRules
) -> dict[str, jax.Array]:
    """Builds global arrays from a host's full global batch by taking this process's rows.

    Every process runs the same deterministic pipeline and keeps only its slice, so a multi-process
    run sees exactly the batches of a single-process run with the same seed. A
    :class:`LocalBatch` already is this process's slice and is used as it is.
    """
    return {
        key: jax.make_array_from_process_local_data(sharding, local, shape)
        for key, local, shape, sharding in _global_parts(batch, mesh, rules)
    }


def global_batch_shapes(
    batch: Mapping[str, np.ndarray], mesh: Mesh, rules: AxisRules
) -> dict[str, jax.ShapeDtypeStruct]:
    """The shapes, dtypes and shardings :func:`global_batch` would give ``batch``, without copying
    it to the devices: what ``jit(...).trace`` takes to compile a step for such batches."""
    return {
        key: jax.ShapeDtypeStruct(
            shape, jax.dtypes.canonicalize_dtype(local.dtype), sharding=sharding
        )
        for key, local, shape, sharding in _global_parts(batch, mesh, rules)
    }


def _global_parts(batch: Mapping[str, np.ndarray], mesh: Mesh, rules: AxisRules):
    """``(name, this process's rows, global shape, sharding)`` for each array of ``batch``."""
    local_only = isinstance(batch, LocalBatch)
    for key, value in batch.items():
        value = np.asarray(value)
        if local_only:
            local, shape = value, (value.shape[0] * jax.process_count(), *value.shape[1:])
        else:
            local, shape = value[process_slice(value.shape[0])], value.shape
        yield key, local, shape, batch_sharding(mesh, rules, value.ndim)


def maybe_initialize_distributed() -> bool:
    """Calls ``jax.distributed.initialize`` only for multi-process runs; returns whether it did.

    A run is multi-process when ``JAXLAB_NUM_PROCESSES`` > 1 (with ``JAXLAB_COORDINATOR`` as
    ``host:port`` and ``JAXLAB_PROCESS_ID``), or when ``JAXLAB_DISTRIBUTED=auto`` asks JAX to detect
    the cluster (TPU pods, SLURM). A bare machine never calls it: there it raises.

    Raises:
      ConfigError: a ``JAXLAB_*`` variable holds a bad value, or a multi-process run lacks one
        (:func:`jaxlab.core.environment.distributed_settings`).
    """
    if jax.distributed.is_initialized():
        return True
    settings = distributed_settings()
    if settings is None:
        return False
    if settings.auto:
        jax.distributed.initialize()
    else:
        jax.distributed.initialize(
            coordinator_address=settings.coordinator,
            num_processes=settings.num_processes,
            process_id=settings.process_id,
        )
    return True
