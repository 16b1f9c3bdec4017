"""The spectral linear map ``M = U diag(s) Vᵀ`` with a static active/frozen split of its columns.

Sparse Spectral Training (Zhao, Zhang, Li, Liu & Cannistraci, ICML 2025, Sec. 4.1) keeps every
weight ``M`` (``d_in x d_out``, ``k = min(d_in, d_out)``) as its thin SVD: ``U`` ``(d_in, k)`` and
``V`` ``(d_out, k)`` with unit columns and the singular values ``s`` ``(k,)``, so the layer computes
``x @ M = ((x @ U) * s) @ Vᵀ``. Only ``r`` singular-vector pairs are trained at a time. To keep jit
shapes fixed and the optimizer state at ``r (d_in + d_out) + k`` numbers, the columns are stored in
two parts of static size: the first ``r`` (``u_active``, ``v_active``, :class:`nnx.Param`, trained)
and the other ``k - r`` (``u_frozen``, ``v_frozen``, :class:`Frozen`, carried and checkpointed with
the model but never differentiated nor given optimizer state); ``s`` is one ``(k,)`` parameter
whose first ``r`` entries belong to the active columns. Changing which columns are active is a
permutation of the columns (:meth:`Spectral.permute`); the method that samples them lives in
:mod:`jaxlab.methods.sst`.

Built through :class:`~jaxlab.nn.linear.LinearSpec` (``kind="spectral"``, ``rank=r``), the layer
draws the same N(0, std²) kernel as :class:`~jaxlab.nn.linear.Dense` from the same key and stores
its SVD (the paper's SVD initialisation, Sec. 4.3: zero distortion at step 0), with the ``r``
largest singular values active; :meth:`Spectral.from_matrix` converts any matrix. Sharding: ``u_*``
carry the layer's input axis, ``v_*`` its output axis, as the dense kernel would.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.errors import ConfigError
from jaxlab.nn.linear_map import LinearMap

__all__ = ["Frozen", "Spectral", "thin_svd"]


class Frozen(nnx.Variable):
    """A model array that is not trained: no gradient, no optimizer state, but checkpointed."""


def thin_svd(
    m: Float[Array, "d_in d_out"],
) -> tuple[Float[Array, "d_in k"], Float[Array, " k"], Float[Array, "d_out k"]]:
    """``(U, s, V)`` with ``m = U diag(s) Vᵀ``, ``s`` descending, computed in float32."""
    u, s, vt = jnp.linalg.svd(m.astype(jnp.float32), full_matrices=False)
    return u, s, vt.T


def _variable(cls, value, axes, param_dtype):
    # Logical axis names as metadata (eager sharding off), as jaxlab.nn.linear.param_init does.
    return cls(value.astype(param_dtype), out_sharding=tuple(axes), eager_sharding=False)


class Spectral(LinearMap):
    """``x @ (U diag(s) Vᵀ)`` with ``rank`` active singular-vector pairs (module docstring).

    Without ``matrix``, ``std`` and ``rngs`` are required: the layer stores the SVD of an
    N(0, std²) draw, as :class:`~jaxlab.nn.linear.Dense` draws its kernel (its ``std`` is required
    too). SST's SVD initialisation decomposes the model's own dense init (Zhao et al., Sec. 4.3), so
    the scale is the dense map's and no default fits every model. An explicit ``std=0`` (a
    zero-initialised map, as the xLSTM's output gate under ``init="authors"``) stores ``s = 0``
    with the SVD's arbitrary orthonormal vectors.
    ``matrix`` given: its SVD instead of a random draw (``std`` and ``rngs`` unused). Registered in
    :data:`jaxlab.nn.linear.LINEAR_KINDS` (``kind="spectral"``).

    Raises:
      ConfigError: a rank outside ``[1, min(d_in, d_out) - 1]``, or no ``matrix`` and a missing or
        negative ``std`` or missing ``rngs``.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        *,
        rank: int,
        std: float | None = None,
        axes=(None, None),
        dtype: str = "float32",
        param_dtype: str = "float32",
        rngs: nnx.Rngs | None = None,
        matrix: Array | None = None,
    ):
        self.validate(d_in, d_out, rank=rank)
        if matrix is None and (std is None or not std >= 0 or rngs is None):
            raise ConfigError(
                f"Spectral({d_in}, {d_out}): give std >= 0 and rngs (the N(0, std²) init whose SVD "
                f"is stored, as Dense's; e.g. std={d_in**-0.5:.3g} = 1/sqrt(d_in)), or matrix=; "
                f"got std={std}, rngs={'given' if rngs is not None else None}"
            )
        if matrix is None:
            # The dense kind's draw (one key, N(0, std²)), so the model equals its dense twin.
            matrix = nnx.initializers.normal(std)(rngs.params(), (d_in, d_out), jnp.float32)
        self._set(*thin_svd(matrix), rank, axes, dtype, param_dtype)

    @classmethod
    def from_matrix(
        cls,
        m: Float[Array, "d_in d_out"],
        rank: int,
        *,
        axes=(None, None),
        dtype: str = "float32",
        param_dtype: str = "float32",
    ) -> Spectral:
        """The spectral layer of ``m`` (its thin SVD), with the ``rank`` largest pairs active."""
        return cls(*m.shape, rank=rank, axes=axes, dtype=dtype, param_dtype=param_dtype, matrix=m)

    def _set(self, u, s, v, rank, axes, dtype, param_dtype):
        pd = jnp.dtype(param_dtype)
        self.d_in, self.d_out, self.dtype = u.shape[0], v.shape[0], jnp.dtype(dtype)
        self.rank, self.axes = rank, tuple(axes)
        self.s = _variable(nnx.Param, s, (None,), pd)
        self.u_active = _variable(nnx.Param, u[:, :rank], (axes[0], None), pd)
        self.v_active = _variable(nnx.Param, v[:, :rank], (axes[1], None), pd)
        self.u_frozen = _variable(Frozen, u[:, rank:], (axes[0], None), pd)
        self.v_frozen = _variable(Frozen, v[:, rank:], (axes[1], None), pd)

    @staticmethod
    def options(spec) -> dict:
        return {"rank": spec.rank}

    @staticmethod
    def validate(d_in: int, d_out: int, *, rank: int) -> None:
        k = min(d_in, d_out)
        if not 1 <= rank < k:
            # rank = k would train every pair (full-rank training) and leave no frozen column.
            raise ConfigError(
                f"rank={rank} must lie in [1, min(d_in, d_out) - 1 = {k - 1}] for a "
                f"{d_in} -> {d_out} spectral map (rank {k} is full-rank training)"
            )

    @property
    def k(self) -> int:
        return min(self.d_in, self.d_out)

    def factors(self) -> tuple[Array, Array, Array]:
        """``(U, s, V)`` in the stored column order (active first), float32."""
        f32 = jnp.float32
        u = jnp.concatenate([self.u_active[...], self.u_frozen[...]], axis=1).astype(f32)
        v = jnp.concatenate([self.v_active[...], self.v_frozen[...]], axis=1).astype(f32)
        return u, self.s[...].astype(f32), v

    def set_factors(self, u: Array, s: Array, v: Array) -> None:
        """Stores ``(U, s, V)`` (same shapes as :meth:`factors`); the first ``rank`` are active."""
        r = self.rank
        self.s[...] = s.astype(self.s.dtype)
        self.u_active[...] = u[:, :r].astype(self.u_active.dtype)
        self.v_active[...] = v[:, :r].astype(self.v_active.dtype)
        self.u_frozen[...] = u[:, r:].astype(self.u_frozen.dtype)
        self.v_frozen[...] = v[:, r:].astype(self.v_frozen.dtype)

    def permute(self, perm: Int[Array, " k"]) -> None:
        """Reorders the columns: new column ``j`` is old column ``perm[j]`` (``M`` is unchanged);
        the columns ``perm[:rank]`` become the active ones."""
        u, s, v = self.factors()
        self.set_factors(u[:, perm], s[perm], v[:, perm])

    def product(self, x: Float[Array, "... d_in"]) -> Float[Array, "... d_out"]:
        u, s, v = (a.astype(self.dtype) for a in self.factors())
        h = (x @ u) * s  # the k spectral coordinates of x
        return h @ v.T

    def dense_matrix(self) -> Float[Array, "d_in d_out"]:
        u, s, v = self.factors()
        return (u * s) @ v.T
