"""The interface every linear map implements: :class:`LinearMap`.

A linear map computes ``x @ M`` for a ``(d_in, d_out)`` matrix ``M`` held in some factored form,
applies an optional activation and returns ``M`` itself with :meth:`LinearMap.dense_matrix`. The
kinds jaxlab's configs build (dense, low-rank, BTT, MLR) and the one constructor that picks among
them live in :mod:`jaxlab.nn.linear`; the spectral map of Sparse Spectral Training lives in
:mod:`jaxlab.nn.spectral`, and ``jaxlab.methods.sst`` adds LoRA. This module holds only the
interface, so that every one of them subclasses it without importing the others (``linear``
registers ``spectral`` in its table of kinds, which an import of ``linear`` from ``spectral`` would
make a circle).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from jaxlab.core.errors import ConfigError
from pallas_kernels import ACTIVATIONS

__all__ = ["Axes", "LinearMap"]

# Logical axis names of a map's (input, output) dimensions, e.g. ("embed", "mlp").
Axes = tuple[str | None, str | None]


def _activate(y: Array, activation: str | None) -> Array:
    if activation is None:
        return y
    if activation not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {activation!r}; choose one of {list(ACTIVATIONS)}")
    return ACTIVATIONS[activation](y)


class LinearMap(nnx.Module):
    """The interface of every kind: ``layer(x, activation=None) = act(x @ layer.dense_matrix())``.

    A kind is added by one :class:`~jaxlab.nn.linear.LinearKind` member, one subclass and one
    :data:`~jaxlab.nn.linear.LINEAR_KINDS` entry (plus :class:`~jaxlab.nn.linear.LinearSpec` /
    :class:`~jaxlab.lm.config.LMConfig` fields for new options). A subclass takes
    ``(d_in, d_out, *, std, axes, dtype, param_dtype, rngs, **options)``, sets ``d_in``,
    ``d_out`` and ``dtype`` (the compute dtype) and implements :meth:`options`, :meth:`validate`,
    :meth:`product` and :meth:`dense_matrix`; the dense kind overrides ``__call__`` to fuse the
    activation into the Pallas matmul.
    """

    d_in: int
    d_out: int
    dtype: jnp.dtype

    @staticmethod
    def options(spec) -> dict:
        """The constructor's keyword options, read from a :class:`~jaxlab.nn.linear.LinearSpec`
        (e.g. ``{"rank": spec.rank}``)."""
        raise NotImplementedError

    @staticmethod
    def validate(d_in: int, d_out: int, **options) -> None:
        """Raises a one-line :class:`ConfigError` unless ``options`` fit a ``d_in -> d_out`` map;
        structured kinds start the message with the offending option (``"rank=0 must ..."``)."""
        raise NotImplementedError

    def product(self, x: Float[Array, "... d_in"]) -> Float[Array, "... d_out"]:
        raise NotImplementedError

    def dense_matrix(self) -> Float[Array, "d_in d_out"]:
        """The implied ``(d_in, d_out)`` matrix ``M`` (forward: ``x @ M``), in float32."""
        raise NotImplementedError

    def __call__(
        self, x: Float[Array, "... d_in"], activation: str | None = None
    ) -> Float[Array, "... d_out"]:
        return _activate(self.product(x.astype(self.dtype)), activation)
