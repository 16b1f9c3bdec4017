"""Turning the linear maps of any jaxlab model into spectral (or LoRA) layers, and back.

:func:`to_spectral` replaces every :class:`~jaxlab.nn.linear_map.LinearMap` of a model (the
Transformer's Q, K, V, output and MLP maps, the RMT's MLP maps, ...) by the
:class:`~jaxlab.nn.spectral.Spectral` layer of its matrix (SST paper, Sec. 4.3: SVD
initialisation, so the converted model computes the same function), except the maps named in
``exclude`` (by default the unembedding: the paper trains embeddings and the output head at full
rank). :func:`merge_dense` turns spectral and LoRA layers back into dense ones with the same
matrix. :func:`to_lora` wraps each map's matrix as a frozen LoRA base. The models are edited in
place (NNX modules are mutable) and returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
from flax import nnx

from jaxlab.methods.sst.lora import LoRA
from jaxlab.methods.sst.sampling import active_permutation, sample_active
from jaxlab.nn.linear import Dense
from jaxlab.nn.linear_map import LinearMap
from jaxlab.nn.spectral import Spectral

__all__ = ["DEFAULT_EXCLUDE", "linear_layers", "merge_dense", "to_lora", "to_spectral"]

Path = tuple
DEFAULT_EXCLUDE = ("unembed",)


def linear_layers(
    model: nnx.Module, kind: type = LinearMap, exclude: Sequence[str] = ()
) -> list[tuple[Path, LinearMap]]:
    """``(path, layer)`` of every ``kind`` instance in ``model`` whose path names none of
    ``exclude``, in graph order (nested maps inside a matched one are not listed)."""
    found = [
        (tuple(path), node)
        for path, node in nnx.iter_graph(model)
        if isinstance(node, kind) and not any(str(p) in exclude for p in path)
    ]
    paths = {path for path, _ in found}
    return [
        (path, node)
        for path, node in found
        if not any(path[:i] in paths for i in range(len(path)))  # inside a listed map
    ]


def _replace(model: nnx.Module, path: Path, new: nnx.Module) -> None:
    parent = model
    for key in path[:-1]:
        parent = parent[key] if isinstance(key, int) else getattr(parent, key)
    if isinstance(path[-1], int):
        parent[path[-1]] = new
    else:
        setattr(parent, path[-1], new)


def _axes(layer: LinearMap):
    for name in ("kernel", "base", "u", "first"):
        var = getattr(layer, name, None)
        if isinstance(var, nnx.Variable) and getattr(var, "out_sharding", None):
            sharding = tuple(var.out_sharding)
            return (sharding[0], getattr(layer, "vt", var).out_sharding[-1])
    return getattr(layer, "axes", (None, None))


def _convert(model, exclude, make: Callable[[int, Path, LinearMap], nnx.Module]):
    for i, (path, layer) in enumerate(linear_layers(model, LinearMap, exclude)):
        _replace(model, path, make(i, path, layer))
    return model


def to_spectral(
    model: nnx.Module,
    rank: int,
    *,
    key: jax.Array | None = None,
    sampling: str = "s",
    exclude: Sequence[str] = DEFAULT_EXCLUDE,
) -> nnx.Module:
    """Every linear map of ``model`` (except ``exclude``) as its spectral layer with ``rank``
    active pairs: drawn from :func:`~jaxlab.methods.sst.sampling.sample_active` with ``key``
    (one ``fold_in`` per layer), or the ``rank`` largest without a key."""

    def make(i, path, layer):
        new = Spectral.from_matrix(
            layer.dense_matrix(), rank, axes=_axes(layer),
            dtype=str(layer.dtype), param_dtype=str(_param_dtype(layer)),
        )  # fmt: skip
        if key is not None:
            mask = sample_active(jax.random.fold_in(key, i), new.s[...], new.rank, sampling)
            new.permute(active_permutation(mask))
        return new

    return _convert(model, exclude, make)


def _param_dtype(layer: LinearMap):
    return jax.tree.leaves(nnx.state(layer))[0].dtype


def to_lora(
    model: nnx.Module,
    rank: int,
    *,
    alpha: float,
    key: jax.Array,
    exclude: Sequence[str] = DEFAULT_EXCLUDE,
) -> nnx.Module:
    """Every linear map of ``model`` (except ``exclude``) as a LoRA layer over its matrix."""

    def make(i, path, layer):
        return LoRA(
            layer.dense_matrix(), rank=min(rank, layer.d_in, layer.d_out), alpha=alpha,
            axes=_axes(layer), dtype=str(layer.dtype), param_dtype=str(_param_dtype(layer)),
            rngs=nnx.Rngs(params=jax.random.fold_in(key, i)),
        )  # fmt: skip

    return _convert(model, exclude, make)


def merge_dense(model: nnx.Module) -> nnx.Module:
    """Every spectral and LoRA layer of ``model`` as a :class:`~jaxlab.nn.linear.Dense` map with
    the same matrix (XLA product)."""
    for path, layer in linear_layers(model, (Spectral, LoRA)):
        dense = Dense(
            layer.d_in, layer.d_out, std=0.0, axes=_axes(layer), dtype=str(layer.dtype),
            param_dtype=str(_param_dtype(layer)), matmul_impl="xla", rngs=nnx.Rngs(0),
        )  # fmt: skip
        dense.kernel[...] = layer.dense_matrix().astype(dense.kernel.dtype)
        _replace(model, path, dense)
    return model
