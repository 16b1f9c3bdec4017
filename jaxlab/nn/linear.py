"""One constructor for linear maps: dense, low-rank, BTT and MLR behind one interface.

Every model builds its linear maps through a *linear factory*, a callable
``factory(d_in, d_out, *, std, axes, rngs) -> LinearMap``; :class:`LinearSpec` is the one jaxlab's
configs make (``kind`` picks the structure, the other fields are its options, the dtypes and the
dense matmul backend). A :class:`LinearMap` computes ``x @ M`` for a ``(d_in, d_out)`` matrix ``M``
held in some factored form, applies an optional activation (``layer(x, activation="gelu")``), and
returns ``M`` itself with :meth:`LinearMap.dense_matrix` (tests, merging, spectral conversion).
The interface lives in :mod:`jaxlab.nn.linear_map`, so kinds defined elsewhere (the spectral map,
SST's LoRA) subclass it without importing this module.

Kinds (:class:`LinearKind`; adding one is one enum member, one class, one :data:`LINEAR_KINDS`
entry):

* ``dense`` — one ``(d_in, d_out)`` kernel; its product runs through XLA or the Pallas matmul
  (:func:`pallas_kernels.matmul`, the activation fused into the epilogue), chosen by
  ``matmul_impl`` (:class:`MatmulImpl`, resolved by :func:`default_matmul_impl`).
* ``low_rank`` — ``M = U Vᵀ`` with rank ``r`` (``u``: ``(d_in, r)``, ``vt``: ``(r, d_out)``).
* ``spectral`` — ``M = U diag(s) Vᵀ``, the thin SVD of the dense init, ``rank`` singular-vector
  pairs trained at a time (Sparse Spectral Training, Zhao et al., ICML 2025):
  :class:`jaxlab.nn.spectral.Spectral`.
* ``btt`` — Block Tensor-Train with two cores and TT rank ``s`` (Qiu, Potapczynski, Finzi,
  Goldblum & Wilson, "Compute Better Spent: Replacing Dense Layers with Structured Matrices", ICML
  2024): the input splits into ``n1`` blocks of ``n2``, the output into ``m2`` blocks of ``m1``;
  a block-diagonal first stage maps each input block to ``m2 * s`` numbers, the axes are regrouped
  by output block, and a block-diagonal second stage maps each output block's ``n1 * s`` numbers
  to its ``m1`` outputs: ``M[(j1, j2), (k, i1)] = sum_a R[j1, j2, k, a] L[j1, a, k, i1]`` (the
  authors' two-core ``FasterBTT``; ``s = 1`` is a Monarch matrix). The blocks follow Kuang et
  al.'s ``factorize`` (:func:`btt_blocks`): ``n2`` and ``m2`` are the smallest divisors of ``d_in``
  and ``d_out`` strictly above their square roots, so ``n1 * m2 * s >= d`` for a square map and
  the implied matrix is full rank for random factors. Output order: the linear layer puts the
  output block ``k`` major (column ``k m1 + i1``, ``output_order="group_major"``); Kuang et al.'s
  ``BilinearBTTAttention`` puts it minor (column ``i1 m2 + k``, their ``(a b)``,
  ``"group_minor"``), the order in which identity cores give ``M = I`` (see :class:`BTT`).
* ``mlr`` — multi-level low-rank (Kuang, Amsel, Lotfi, Qiu, Potapczynski & Wilson, "Customizing the
  Inductive Biases of Softmax Attention using Structured Matrices", ICML 2025): level ``l`` splits
  the input and output features into ``2^l`` contiguous blocks with a rank-``r_l`` map on each,
  ``M = sum_l blockdiag_k(R_{l,k} L_{l,k}ᵀ)``, of rank ``min(d_in, d_out, sum_l r_l 2^l)``.

Initialisation. Every kind is initialised so that the implied matrix has the entry variance
``std²`` of the dense N(0, std²) init it replaces (for MLR, on average over the entries): a model's
recipe (N(0, 0.02), output projections scaled by 1/sqrt(2L)) then carries over unchanged. The
first factor preserves the input's variance (N(0, 1/fan-in of its block)); the second carries the
scale. Qiu et al. instead scale each core by µP rules (their Sec. on structure-aware
initialisation); we match the dense init so that a structured model differs from its dense twin in
the structure only.

Sharding. Factors are stored as 2-D arrays whose full-size dimension (``d_in`` of the first
factor, ``d_out`` of the second) carries the layer's logical axis, so they shard wherever the
dense kernel would.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import jax
import jax.numpy as jnp
from flax import nnx

import pallas_kernels
from jaxlab.core.errors import ConfigError
from jaxlab.nn.linear_map import Axes, LinearMap
from jaxlab.nn.pallas_switch import pallas_ready
from jaxlab.nn.spectral import Spectral

__all__ = [
    "BTT",
    "BTT_OUTPUT_ORDERS",
    "LINEAR_KINDS",
    "MLR",
    "Dense",
    "LinearFactory",
    "LinearKind",
    "LinearName",
    "LinearSpec",
    "LowRank",
    "MatmulImpl",
    "MatmulImplName",
    "default_matmul_impl",
    "btt_blocks",
    "param_init",
    "rms_capped",
]


class LinearKind(enum.StrEnum):
    """The structures a linear map can have (see the module docstring)."""

    DENSE = "dense"
    LOW_RANK = "low_rank"
    BTT = "btt"
    MLR = "mlr"
    SPECTRAL = "spectral"


class MatmulImpl(enum.StrEnum):
    """Backends of the dense product: ``auto`` resolves through :func:`default_matmul_impl`."""

    AUTO = "auto"
    XLA = "xla"
    PALLAS = "pallas"


# The config types of the two choices, derived from the enums so that a new member is one line.
LinearName = Literal[tuple(k.value for k in LinearKind)]  # type: ignore[valid-type]
MatmulImplName = Literal[tuple(m.value for m in MatmulImpl)]  # type: ignore[valid-type]


def param_init(init: Callable, axes: Sequence[str | None]) -> Callable:
    """An initializer annotated with logical axis names, one per parameter dimension.

    Eager sharding is off for these variables: the names are metadata, so a model builds on one
    device with no mesh, and :func:`jaxlab.core.mesh.state_shardings` turns them into shardings.
    """
    return nnx.with_partitioning(init, tuple(axes), eager_sharding=False)


def default_matmul_impl(platform: str | None = None) -> MatmulImpl:
    """What ``matmul_impl="auto"`` picks: the Pallas matmul on GPU/TPU once its native lowering has
    passed there (:func:`jaxlab.nn.pallas_switch.pallas_ready`, the same switch as the attention
    kernels), XLA otherwise (on CPU Pallas only interprets)."""
    return MatmulImpl.PALLAS if pallas_ready(platform, "matmul") else MatmulImpl.XLA


def _normal(rngs: nnx.Rngs, shape, std: float, axes, param_dtype) -> nnx.Param:
    init = param_init(nnx.initializers.normal(std), axes)
    return nnx.Param(init(rngs.params(), shape, jnp.dtype(param_dtype)))


class Dense(LinearMap):
    """A full ``(d_in, d_out)`` kernel, N(0, std²), without bias.

    The same parameter (``kernel``), random draw and XLA product as ``nnx.Linear(use_bias=False)``,
    so models that used it keep their parameters and outputs bit for bit. ``matmul_impl="pallas"``
    runs the product, and the activation as its epilogue, through :func:`pallas_kernels.matmul`
    (float32 accumulation; interpreted on CPU, so slow there).
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        *,
        std: float,
        axes: Axes = (None, None),
        dtype: str = "float32",
        param_dtype: str = "float32",
        matmul_impl: str = "auto",
        rngs: nnx.Rngs,
    ):
        self.validate(d_in, d_out, matmul_impl=matmul_impl)
        self.kernel = _normal(rngs, (d_in, d_out), std, axes, param_dtype)
        self.d_in, self.d_out, self.dtype = d_in, d_out, jnp.dtype(dtype)
        impl = MatmulImpl(matmul_impl)
        self.matmul_impl = default_matmul_impl() if impl is MatmulImpl.AUTO else impl

    @staticmethod
    def options(spec: LinearSpec) -> dict:
        return {"matmul_impl": spec.matmul_impl}

    @staticmethod
    def validate(d_in: int, d_out: int, *, matmul_impl: str) -> None:
        if matmul_impl not in tuple(MatmulImpl):
            raise ConfigError(
                f"unknown matmul_impl {matmul_impl!r}; choose 'auto', 'xla' or 'pallas'"
            )

    def product(self, x):
        kernel = self.kernel[...].astype(self.dtype)
        return jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))

    def dense_matrix(self):
        return self.kernel[...].astype(jnp.float32)

    def __call__(self, x, activation=None):
        if self.matmul_impl == MatmulImpl.PALLAS:
            kernel = self.kernel[...].astype(self.dtype)
            return pallas_kernels.matmul(x.astype(self.dtype), kernel, activation=activation)
        return super().__call__(x, activation)


class LowRank(LinearMap):
    """``M = U Vᵀ`` of rank ``r``: ``u`` is ``(d_in, r)`` ~ N(0, 1/d_in), ``vt`` is ``(r, d_out)``
    ~ N(0, std² d_in / r), so each entry of ``M`` has variance ``std²``."""

    def __init__(
        self,
        d_in: int,
        d_out: int,
        *,
        rank: int,
        std: float,
        axes: Axes = (None, None),
        dtype: str = "float32",
        param_dtype: str = "float32",
        rngs: nnx.Rngs,
    ):
        self.validate(d_in, d_out, rank=rank)
        self.u = _normal(rngs, (d_in, rank), d_in**-0.5, (axes[0], None), param_dtype)
        vt_std = std * (d_in / rank) ** 0.5
        self.vt = _normal(rngs, (rank, d_out), vt_std, (None, axes[1]), param_dtype)
        self.d_in, self.d_out, self.dtype = d_in, d_out, jnp.dtype(dtype)

    @staticmethod
    def options(spec: LinearSpec) -> dict:
        return {"rank": spec.rank}

    @staticmethod
    def validate(d_in: int, d_out: int, *, rank: int) -> None:
        if not 1 <= rank <= min(d_in, d_out):
            raise ConfigError(
                f"rank={rank} must lie in [1, min(d_in, d_out)={min(d_in, d_out)}] for a "
                f"{d_in} -> {d_out} low_rank map"
            )

    def product(self, x):
        h = x @ self.u[...].astype(self.dtype)
        return h @ self.vt[...].astype(self.dtype)

    def dense_matrix(self):
        return self.u[...].astype(jnp.float32) @ self.vt[...].astype(jnp.float32)


def rms_capped(w: jax.Array, cap: float) -> jax.Array:
    """``w / max(1, RMS(w) / cap)``: the factor weights of Kuang et al.'s bilinear BTT and MLR
    (``src/model.py``, ``BilinearBTT_W_K_Projection`` and ``BilinearMLRProjection``), whose RMS
    is held at most at ``cap = sqrt(min(d_in, d_out)) / d_in`` on every forward pass (a µP-style
    reparametrisation of a block ``d_in -> d_out``); ``1e-8`` inside the root as theirs."""
    wide = w.astype(jnp.promote_types(w.dtype, jnp.float32))  # float64 stays float64 (x64)
    rms = jnp.sqrt(jnp.mean(jnp.square(wide)) + 1e-8)
    return w / jnp.maximum(1.0, rms / cap).astype(w.dtype)


# BTT's output orders (see BTT): the linear layer's block-major one, and the authors' bilinear
# score's block-minor (a b) one.
BTT_OUTPUT_ORDERS = ("group_major", "group_minor")


def btt_blocks(d: int) -> tuple[int, int]:
    """``(d // b, b)`` for ``b`` the smallest divisor of ``d`` strictly greater than ``sqrt(d)``
    (``(1, 1)`` for ``d = 1``): the ``factorize(d, 2)`` of Kuang et al.'s ``BilinearBTTAttention``.

    The BTT input splits into ``n1, n2 = btt_blocks(d_in)`` (``n1 = d_in // b`` blocks of ``b``,
    the authors' ``c`` blocks of ``d``), the output into ``m1, m2 = btt_blocks(d_out)`` (``m2 = b``
    blocks of ``m1``, their ``b`` groups of ``a``). Then ``n1 * m2 = d`` for a square map, so TT
    rank 1 is full rank; for a perfect square ``d = b^2`` the blocks are ``(b/p, b p)`` for the
    smallest prime ``p`` of ``b``, not ``(b, b)``: what the authors build, at ``p`` times the
    parameters of the square split in the first stage.
    """
    b = math.isqrt(d) + 1  # the smallest integer strictly above sqrt(d)
    while d % b and b < d:
        b += 1
    b = min(b, d)
    return d // b, b


class BTT(LinearMap):
    """Two-core Block Tensor-Train with TT rank ``s`` (Qiu et al. 2024; see the module docstring).

    Parameters: ``first`` ``(d_in, m2 * s)`` holds the ``n1`` first-stage blocks ``(n2, m2 * s)``
    stacked along ``d_in``; ``second`` ``(n1 * s, d_out)`` holds the ``m2`` second-stage blocks
    ``(n1 * s, m1)`` side by side along ``d_out``. ``s * (m2 * d_in + n1 * d_out)`` numbers in all.
    Init: ``first`` ~ N(0, 1/n2), ``second`` ~ N(0, std² n2 / s), so every entry of ``M`` has
    variance ``std²`` and the first stage keeps the input's variance. At ``std = 1/sqrt(d_in)``
    (a variance-preserving map) both are the µP init ``N(0, 1/fan_in)`` of Kuang et al.'s
    ``muPify`` (fan-in ``n2`` of their ``W_K``, ``n1 s`` of their ``W_Q``). ``rms_cap`` does not
    change the init (the authors draw N(0, 1) and ``muPify`` re-initialises before training).

    Output order (``output_order``). ``"group_major"`` (the default) writes output block ``k``'s
    ``m1`` outputs side by side, column ``k m1 + i1``; ``"group_minor"`` interleaves the blocks,
    column ``i1 m2 + k``: the ``(a b)`` layout of Kuang et al.'s ``BilinearBTTAttention``
    (``reshape(H, b, a, B, T).permute(3, 0, 4, 2, 1)``). For a square map (``n1 = m1``,
    ``n2 = m2``) and ``s = 1`` only ``"group_minor"`` can be the identity (cores
    ``R[j, i, k] = [i = k]``, ``L[j, k, i1] = [i1 = j]``); in the major order the same cores give
    a permutation and no rank-1 core pair gives ``I``. That matters where ``x`` is compared with
    ``BTT(x)`` in the input coordinates (the bilinear score, which uses ``"group_minor"``). The
    linear layer keeps ``"group_major"``: there the next dense map (or a norm and a dense map)
    absorbs any fixed permutation of the outputs, so the order changes nothing a model can
    express, and the MLP and RMT maps keep their parameters and outputs bit for bit.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        *,
        btt_rank: int,
        std: float,
        rms_cap: bool = False,
        output_order: Literal["group_major", "group_minor"] = "group_major",
        axes: Axes = (None, None),
        dtype: str = "float32",
        param_dtype: str = "float32",
        rngs: nnx.Rngs,
    ):
        self.validate(d_in, d_out, btt_rank=btt_rank)
        if output_order not in BTT_OUTPUT_ORDERS:
            raise ConfigError(
                f"output_order={output_order!r}: choose one of {list(BTT_OUTPUT_ORDERS)}"
            )
        s = btt_rank
        (n1, n2), (m1, m2) = btt_blocks(d_in), btt_blocks(d_out)
        second_std = std * (n2 / s) ** 0.5
        self.first = _normal(rngs, (d_in, m2 * s), n2**-0.5, (axes[0], None), param_dtype)
        self.second = _normal(rngs, (n1 * s, d_out), second_std, (None, axes[1]), param_dtype)
        self.shape = (n1, n2, m2, m1, s)
        self.rms_cap, self.group_minor = rms_cap, output_order == "group_minor"
        self.d_in, self.d_out, self.dtype = d_in, d_out, jnp.dtype(dtype)

    @staticmethod
    def options(spec: LinearSpec) -> dict:
        return {"btt_rank": spec.btt_rank}

    @staticmethod
    def validate(d_in: int, d_out: int, *, btt_rank: int) -> None:
        if btt_rank < 1:
            raise ConfigError(f"btt_rank={btt_rank} must be >= 1")

    def cores(self, dtype):
        """The two cores ``(n1, n2, m2, s)`` and ``(n1, s, m2, m1)`` in ``dtype``, RMS-capped under
        ``rms_cap`` (callers that batch several maps stack these)."""
        n1, n2, m2, m1, s = self.shape
        first, second = self.first[...], self.second[...]
        if self.rms_cap:  # each stage's blocks map n2 -> m2 s and n1 s -> m1
            first = rms_capped(first, cap=min(n2, m2 * s) ** 0.5 / n2)
            second = rms_capped(second, cap=min(n1 * s, m1) ** 0.5 / (n1 * s))
        r_JIUR = first.astype(dtype).reshape(n1, n2, m2, s)
        l_JRUO = second.astype(dtype).reshape(n1, s, m2, m1)
        return r_JIUR, l_JRUO

    def product(self, x):
        n1, n2, m2, m1, s = self.shape
        r_JIUR, l_JRUO = self.cores(self.dtype)
        x_XJI = x.reshape(*x.shape[:-1], n1, n2)
        y_XJUR = jnp.einsum("...ji,jiur->...jur", x_XJI, r_JIUR)  # first stage, per input block
        z_XUO = jnp.einsum("...jur,jruo->...uo", y_XJUR, l_JRUO)  # regrouped, per output block
        if self.group_minor:  # column i1 m2 + k (the authors' (a b))
            z_XUO = jnp.swapaxes(z_XUO, -1, -2)
        return z_XUO.reshape(*x.shape[:-1], self.d_out)

    def dense_matrix(self):
        r_JIUR, l_JRUO = self.cores(jnp.float32)
        out = "jiou" if self.group_minor else "jiuo"
        return jnp.einsum(f"jiur,jruo->{out}", r_JIUR, l_JRUO).reshape(self.d_in, self.d_out)


class MLR(LinearMap):
    """Multi-level low-rank map (Kuang et al. 2025; see the module docstring).

    Level ``l`` holds ``right[l]`` ``(d_in, r_l)`` (its ``2^l`` input blocks' factors stacked along
    ``d_in``) and ``left[l]`` ``(r_l, d_out)`` (the output blocks' factors side by side), so
    ``sum_l r_l (d_in + d_out)`` numbers in all. Init: ``right[l]`` ~ N(0, 2^l / d_in) (variance
    preserving within a block), ``left[l]`` ~ N(0, std² d_in / sum_l r_l): the entries of ``M`` then
    have variance ``std²`` on average and every output has the dense layer's variance. One level is
    :class:`LowRank` with the same init.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        *,
        mlr_ranks: Sequence[int],
        std: float,
        axes: Axes = (None, None),
        dtype: str = "float32",
        param_dtype: str = "float32",
        rngs: nnx.Rngs,
    ):
        self.validate(d_in, d_out, mlr_ranks=mlr_ranks)
        left_std = std * (d_in / sum(mlr_ranks)) ** 0.5
        self.right, self.left = nnx.List(), nnx.List()
        for level, r in enumerate(mlr_ranks):
            self.right.append(
                _normal(rngs, (d_in, r), (d_in / 2**level) ** -0.5, (axes[0], None), param_dtype)
            )
            self.left.append(_normal(rngs, (r, d_out), left_std, (None, axes[1]), param_dtype))
        self.ranks = tuple(mlr_ranks)
        self.d_in, self.d_out, self.dtype = d_in, d_out, jnp.dtype(dtype)

    @staticmethod
    def options(spec: LinearSpec) -> dict:
        return {"mlr_ranks": spec.mlr_ranks}

    @staticmethod
    def validate(d_in: int, d_out: int, *, mlr_ranks: Sequence[int]) -> None:
        if not mlr_ranks:
            raise ConfigError("mlr_ranks is empty; give one rank per level (e.g. 8,4,2)")
        blocks = 2 ** (len(mlr_ranks) - 1)
        if d_in % blocks or d_out % blocks:
            raise ConfigError(
                f"mlr_ranks={tuple(mlr_ranks)} has {len(mlr_ranks)} levels, whose {blocks} blocks "
                f"must divide d_in={d_in} and d_out={d_out}; use fewer levels"
            )
        for level, r in enumerate(mlr_ranks):
            size = min(d_in, d_out) // 2**level
            if not 1 <= r <= size:
                raise ConfigError(
                    f"mlr_ranks={tuple(mlr_ranks)}: level {level}'s rank {r} must lie in "
                    f"[1, {size}] (its blocks map {d_in // 2**level} -> {d_out // 2**level})"
                )

    def _levels(self, dtype):
        for level, (right, left) in enumerate(zip(self.right, self.left, strict=True)):
            k = 2**level
            r = right.shape[-1]
            yield (
                right[...].astype(dtype).reshape(k, self.d_in // k, r),
                left[...].astype(dtype).reshape(r, k, self.d_out // k),
            )

    def product(self, x):
        levels = []
        for right_JIR, left_RJO in self._levels(self.dtype):
            k = right_JIR.shape[0]
            x_XJI = x.reshape(*x.shape[:-1], k, self.d_in // k)
            h_XJR = jnp.einsum("...ji,jir->...jr", x_XJI, right_JIR)
            y_XJO = jnp.einsum("...jr,rjo->...jo", h_XJR, left_RJO)
            levels.append(y_XJO.reshape(*x.shape[:-1], self.d_out))
        return sum(levels[1:], levels[0])

    def dense_matrix(self):
        m = jnp.zeros((self.d_in, self.d_out), jnp.float32)
        for right_JIR, left_RJO in self._levels(jnp.float32):
            blocks_JIO = jnp.einsum("jir,rjo->jio", right_JIR, left_RJO)
            m = m + jax.scipy.linalg.block_diag(*blocks_JIO)
        return m


# The one dispatch table, read by LinearSpec (the default factory) and nowhere else.
LINEAR_KINDS: dict[LinearKind, type[LinearMap]] = {
    LinearKind.DENSE: Dense,
    LinearKind.LOW_RANK: LowRank,
    LinearKind.BTT: BTT,
    LinearKind.MLR: MLR,
    LinearKind.SPECTRAL: Spectral,  # Sparse Spectral Training's layer (jaxlab.nn.spectral)
}


class LinearFactory(Protocol):
    """What models take to build their linear maps (a :class:`LinearSpec`, or any such callable)."""

    def __call__(
        self, d_in: int, d_out: int, *, std: float, axes: Axes, rngs: nnx.Rngs
    ) -> LinearMap: ...


@dataclasses.dataclass(frozen=True)
class LinearSpec:
    """A linear factory: which kind to build, its options, the dtypes and the dense backend.

    Calling it builds one layer: ``spec(d_in, d_out, std=0.02, axes=("embed", "mlp"), rngs=rngs)``.

    Attributes:
      kind: a :class:`LinearKind` value.
      rank: ``low_rank``'s rank r (and ``spectral``'s number of active pairs).
      btt_rank: ``btt``'s TT rank s.
      mlr_ranks: ``mlr``'s rank per level, level 0 (global) first.
      matmul_impl: ``dense``'s backend (:class:`MatmulImpl`); structured kinds use XLA einsums.
      dtype, param_dtype: compute and parameter dtypes.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jaxlab.nn.linear import LinearSpec
      >>> spec = LinearSpec(kind="mlr", mlr_ranks=(4, 2, 1))  # ranks of levels 0, 1, 2
      >>> layer = spec(32, 64, std=0.02, rngs=nnx.Rngs(0))
      >>> type(layer).__name__, layer(jnp.ones((2, 32))).shape, layer.dense_matrix().shape
      ('MLR', (2, 64), (32, 64))
      >>> spec.flops(32, 64), LinearSpec().flops(32, 64)  # per token, against dense
      (1344.0, 4096.0)
    """

    kind: str = "dense"
    rank: int = 0
    btt_rank: int = 1
    mlr_ranks: tuple[int, ...] = ()
    matmul_impl: str = "auto"
    dtype: str = "float32"
    param_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.kind not in tuple(LinearKind):
            raise ConfigError(
                f"unknown linear kind {self.kind!r}; choose one of {[k.value for k in LinearKind]}"
            )
        Dense.validate(1, 1, matmul_impl=self.matmul_impl)

    @property
    def layer_class(self) -> type[LinearMap]:
        return LINEAR_KINDS[LinearKind(self.kind)]

    def check(self, d_in: int, d_out: int) -> None:
        """Raises :class:`ConfigError` unless this spec can build a ``d_in -> d_out`` map."""
        cls = self.layer_class
        cls.validate(d_in, d_out, **cls.options(self))

    def flops(self, d_in: int, d_out: int) -> float:
        """Forward FLOPs per token of one ``d_in -> d_out`` map of this kind (a multiply-add is 2),
        from the shapes it builds: twice its parameters, and ``2 k (d_in + d_out)`` for
        ``spectral``, whose forward uses all ``k = min(d_in, d_out)`` pairs."""
        kind = LinearKind(self.kind)
        if kind == LinearKind.BTT:
            (n1, _), (_, m2) = btt_blocks(d_in), btt_blocks(d_out)
            return 2.0 * self.btt_rank * (m2 * d_in + n1 * d_out)
        if kind == LinearKind.LOW_RANK:
            return 2.0 * self.rank * (d_in + d_out)
        if kind == LinearKind.MLR:
            return 2.0 * sum(self.mlr_ranks) * (d_in + d_out)
        if kind == LinearKind.SPECTRAL:
            return 2.0 * min(d_in, d_out) * (d_in + d_out)
        return 2.0 * d_in * d_out

    def __call__(
        self, d_in: int, d_out: int, *, std: float, axes: Axes = (None, None), rngs: nnx.Rngs
    ) -> LinearMap:
        cls = self.layer_class
        return cls(
            d_in,
            d_out,
            std=std,
            axes=axes,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            rngs=rngs,
            **cls.options(self),
        )
