"""The checks of what NARD's public functions are given: one-line errors, and what jit allows.

:func:`validate` checks (X, Y) and returns them as JAX arrays of the compute dtype: the inputs'
dtype promoted to at least float32, as JAX computes (float64 only with x64 enabled, float64 numpy
arrays otherwise becoming float32). Shapes are checked always; values (NaN, constant outputs) only
when they are concrete: under ``jax.jit`` or ``jax.vmap`` they are unknown, and a bad value shows
up as a non-finite objective, which the solvers report as ``converged=False`` (never as success).
:func:`check_options` checks the options, which select compiled programs and must therefore be
Python values (static under ``jit``), and refuses a tolerance the compute dtype cannot resolve.
"""

from __future__ import annotations

import difflib
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from jaxlab.core.checks import check_tol, compute_dtype, is_traced
from jaxlab.core.errors import ConfigError
from jaxlab.methods.nard.solve import METHODS

__all__ = ["check_lam", "check_nard_tol", "check_options", "validate"]


def _as_array(a: ArrayLike):
    return a if isinstance(a, jax.Array | np.ndarray) else np.asarray(a)


def _rows(idx: np.ndarray) -> str:
    return ", ".join(map(str, idx[:10])) + (", ..." if idx.size > 10 else "")


def validate(X: ArrayLike, Y: ArrayLike, *, fit_intercept: bool = True) -> tuple[Array, Array]:
    """Checks (X, Y) and returns them as JAX arrays of the compute dtype (module docstring).

    Raises:
      ConfigError: non-2-D or non-real input, zero features/outputs, fewer than 2 samples,
        mismatched sample counts; when the values are concrete, NaN or inf, or an output row
        that is constant (``fit_intercept=True``: zero variance once centred) or identically zero
        (``fit_intercept=False``): Ω would be infinite.
    """
    X, Y = _as_array(X), _as_array(Y)
    if X.ndim != 2 or Y.ndim != 2:
        raise ConfigError(
            f"X and Y must be 2-D (features × samples, outputs × samples); got "
            f"X.ndim={X.ndim}, Y.ndim={Y.ndim}"
        )
    (d, n), (m, n_y) = X.shape, Y.shape
    if n != n_y:
        raise ConfigError(
            f"X has N={n} samples (columns) but Y has N={n_y}; pass X as d×N and Y "
            "as m×N with the same samples"
        )
    if d == 0 or m == 0:
        raise ConfigError(f"need at least one feature and one output, got d={d}, m={m}")
    if n < 2:
        raise ConfigError(f"need at least 2 samples, got N={n}")
    for name, a in (("X", X), ("Y", Y)):
        real = (jnp.floating, jnp.integer, jnp.bool_)
        if not any(jnp.issubdtype(a.dtype, kind) for kind in real):
            raise ConfigError(f"{name} must hold real numbers, got dtype {a.dtype}")
    dtype = compute_dtype(X, Y)  # float64 only with x64 enabled
    if not is_traced(X):
        _check_values("X", np.asarray(X))
    if not is_traced(Y):
        y = np.asarray(Y)
        _check_values("Y", y)
        bad = np.flatnonzero(np.ptp(y, axis=1) == 0 if fit_intercept else ~y.any(axis=1))
        if bad.size:
            what = "constant (zero variance once centred)" if fit_intercept else "identically 0"
            raise ConfigError(
                f"output rows {_rows(bad)} of Y are {what} ({bad.size} of {m}); remove them"
            )
    return jnp.asarray(X, dtype), jnp.asarray(Y, dtype)


def _check_values(name: str, a: np.ndarray) -> None:
    if not np.all(np.isfinite(a)):
        raise ConfigError(f"{name} contains NaN or inf; drop or impute those samples first")


def _static_int(name: str, value: object) -> None:
    if is_traced(value):
        raise ConfigError(
            f"{name} sets array shapes and must be a Python int, not a traced value: mark it "
            f"static (jax.jit(fit, static_argnames=({name!r},))) or bind it with functools.partial"
        )
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")


def _positive(value: object) -> bool:
    """A finite real number > 0 (not a bool or a string)."""
    if isinstance(value, str | bool):
        return False
    try:
        value = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and value > 0


def check_lam(lam: object, name: str = "lam") -> float | Array:
    """``lam`` as a float (a traced scalar is passed through), or a one-line
    :class:`ConfigError` unless it is a finite number >= 0."""
    if is_traced(lam):
        if jnp.ndim(lam) != 0:
            raise ConfigError(f"{name} must be a scalar, got shape {jnp.shape(lam)}")
        return lam
    bad = ConfigError(f"{name} must be a finite number >= 0, got {lam!r}")
    if isinstance(lam, str | bool):
        raise bad
    try:
        value = float(lam)
    except (TypeError, ValueError):
        raise bad from None
    if not (math.isfinite(value) and value >= 0):
        raise bad
    return value


def check_nard_tol(tol: object, dtype) -> None:
    """Refuses a ``tol`` that is not a finite number > 0, or one below the compute dtype's
    resolution: a relative change smaller than ``eps`` is less than one unit in the last place of
    the objective, so such a tolerance could only be met by the iteration stalling exactly."""
    check_tol(tol, dtype, float(jnp.finfo(dtype).eps))


def check_options(
    method: object,
    dtype,
    *,
    fit_intercept: object = True,
    max_iter: object = None,
    tol: object = None,
    alpha_update: object = "mackay",
    max_active: object = None,
    threshold: object = 10.0,
) -> None:
    """One-line :class:`ConfigError` for a bad option (``None`` means the default)."""
    if not isinstance(method, str) or method not in METHODS:
        close = difflib.get_close_matches(str(method), METHODS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown method {method!r}: use one of {', '.join(METHODS)}{hint}")
    if alpha_update not in ("mackay", "em"):
        raise ConfigError(f"alpha_update must be 'mackay' or 'em', got {alpha_update!r}")
    if not isinstance(fit_intercept, bool):
        raise ConfigError(f"fit_intercept must be True or False, got {fit_intercept!r}")
    for name, value in (("max_iter", max_iter), ("max_active", max_active)):
        if value is not None:
            _static_int(name, value)
    if tol is not None:
        check_nard_tol(tol, dtype)
    if not is_traced(threshold) and not _positive(threshold):
        raise ConfigError(f"threshold must be a finite number > 0, got {threshold!r}")
