"""The checks every public function shares at its boundary: traced or concrete, positive numbers,
the compute dtype, reachable tolerances and integer ids in range.

jaxlab's public functions follow one convention (DESIGN.md, The library face): bad input is a
one-line :class:`~jaxlab.core.errors.ConfigError` when its value is concrete; under a JAX
transformation (``jit``, ``vmap``, ``grad``) values are unknown, so only shapes and dtypes are
checked, and where a silent wrong answer would follow (an id outside its table: JAX's gather never
raises) a traceable flag (:func:`ids_in_range`) and a
:func:`jax.experimental.checkify.debug_check` stand in, the way the training loop checks its
state for non-finite values (:func:`jaxlab.core.step.all_finite`). Results come in the inputs'
dtype, at least float32 (:func:`compute_dtype`), and an iterative solver refuses a tolerance that
dtype cannot resolve (:func:`check_tol`). An output that cannot be differentiated says so in one
line when a derivative is asked (:func:`not_differentiable`), instead of JAX's error from deep
inside a loop.
"""

from __future__ import annotations

import functools
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jaxtyping import Array, Bool, Int

from jaxlab.core.errors import ConfigError

__all__ = [
    "X64_HINT",
    "check_ids",
    "check_positive",
    "check_tol",
    "compute_dtype",
    "ids_in_range",
    "is_traced",
    "not_differentiable",
]

# How to get float64, from a command line and from a user's script.
X64_HINT = (
    "pass float64 inputs with x64 on (JAX_ENABLE_X64=1, or "
    "jax.config.update('jax_enable_x64', True) before any JAX operation)"
)


def is_traced(*xs: Any) -> bool:
    """True when any leaf of ``xs`` is a JAX tracer (``jit``, ``vmap``, ``grad``... is tracing)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(xs))


def check_positive(name: str, value: Any) -> None:
    """A one-line ConfigError unless ``value`` is a finite real number > 0 (not a str or bool).

    A traced value is checked for being a scalar only.
    """
    if is_traced(value):
        if jnp.ndim(value) != 0:
            raise ConfigError(f"{name} must be a scalar, got shape {jnp.shape(value)}")
        return
    arr = None if isinstance(value, str | bytes | bool) else np.asarray(value)
    if arr is None or arr.shape != () or arr.dtype.kind not in "fiu":
        raise ConfigError(
            f"{name} must be a positive number, got {value!r} ({type(value).__name__})"
        )
    if not (np.isfinite(arr) and arr > 0):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


def compute_dtype(*arrays: Any) -> np.dtype:
    """The dtype a computation on ``arrays`` runs in: JAX's promotion of theirs, at least float32.

    As in any JAX function, float64 needs x64 on (otherwise JAX computes in float32), and integer,
    boolean or half-precision inputs are promoted to float32.
    """
    # Canonicalised first (float64 is float32 with x64 off, silently, as jnp.asarray does):
    # jnp.result_type would take a float64 dtype as an explicit request and warn.
    dtypes = [x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype for x in arrays]
    canonical = (jax.dtypes.canonicalize_dtype(np.dtype(d)) for d in dtypes)
    return np.dtype(functools.reduce(jnp.promote_types, canonical, jnp.float32))


def check_tol(tol: Any, dtype: Any, floor: float, *, what: str = "tol") -> float:
    """``tol`` as a float, or a one-line ConfigError when it is not a positive number or lies
    below ``floor``, the smallest tolerance a computation in ``dtype`` can resolve (each solver
    says why its floor is what it is). A traced ``tol`` is passed through."""
    if is_traced(tol):
        return tol
    check_positive(what, tol)
    if float(tol) < floor:
        name = np.dtype(dtype).name
        fix = f"pass a larger {what} (>= {floor:.1e})"
        if name != "float64":
            fix = f"{X64_HINT}, or {fix}"
        raise ConfigError(
            f"{what}={float(tol):g} is below what {name} resolves ({floor:.1e}); {fix}"
        )
    return float(tol)


def ids_in_range(ids: Int[Array, "..."], n: int) -> Bool[Array, ""]:
    """Whether every id lies in ``[0, n)``: one reduction, usable under ``jax.jit`` (return it
    from a jitted step and check it on the host, or pass it to ``checkify.check``)."""
    ids = jnp.asarray(ids)
    return jnp.all((ids >= 0) & (ids < n))


def check_ids(ids: Int[Array, "..."], n: int, *, name: str, table: str) -> None:
    """A one-line ConfigError unless ``ids`` are integers in ``[0, n)``, the rows of ``table``.

    Concrete ids are checked at once, naming the first bad one and its index. Traced ids (under
    ``jit``, ``vmap``, ``grad``) get a :func:`jax.experimental.checkify.debug_check`: it raises
    only when the caller wraps the function in :func:`jax.experimental.checkify.checkify` and
    costs nothing otherwise (module docstring).

    Args:
      ids: integer array of any shape.
      n: the number of rows of the table the ids index.
      name: the subject of the message (``"generate: token ids"``, ``"y_s"``).
      table: what they index (``"the vocabulary"``, ``"the classes of the logits"``).
    """
    dtype = jnp.result_type(ids)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise ConfigError(f"{name} must hold integer ids, got dtype {dtype}")
    if is_traced(ids):
        message = f"{name} must lie in [0, {n}) ({table}); got min {{lo}}, max {{hi}}"
        checkify.debug_check(ids_in_range(ids, n), message, lo=jnp.min(ids), hi=jnp.max(ids))
        return
    arr = np.asarray(ids)
    bad = np.argwhere((arr < 0) | (arr >= n))
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        where = ", ".join(map(str, index))
        raise ConfigError(
            f"{name} must lie in [0, {n}) ({table}); got {arr[index]} at [{where}] "
            f"({len(bad)} outside the range)"
        )


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _refuse_derivative(message: str, x: Any) -> Any:
    return x


@_refuse_derivative.defjvp
def _refuse_derivative_jvp(message, primals, tangents):
    raise ConfigError(message)


def not_differentiable(x: Any, message: str) -> Any:
    """``x`` unchanged, except that a derivative through it is a one-line ConfigError.

    For inputs of a computation JAX cannot differentiate (a ``while_loop`` in reverse mode, a
    choice made in Python): ``jax.grad``, ``jax.jvp`` or ``jax.jacrev`` with respect to ``x``
    raise ``message`` (say which argument, and what to differentiate instead) while tracing.
    ``jit`` and ``vmap`` see the identity, and a derivative with respect to other arguments is
    unaffected (JAX does not call the rule for a zero tangent). Non-float leaves pass through.
    """
    if x is None or not jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return x
    return _refuse_derivative(message, x)
