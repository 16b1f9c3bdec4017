"""The one iteration driver of jaxlab's iterative solvers (OT, NARD, and every other solver).

Every solver in the project is a ``lax.while_loop`` that runs a step, records one number per
iteration (a gradient norm, a marginal error, an objective) and stops when a convergence test
passes, when the budget ``max_iter`` runs out, or when the recorded number stops being finite.
:func:`iterate` is that loop, written once: the solver supplies only ``step`` and a stopping rule.
It returns an :class:`Iteration` with the conventions the whole project shares:

* ``trace`` — the recorded value after 0, 1, ..., ``n_iter`` iterations, NaN afterwards, so its
  length ``max_iter + 1`` is static and the array is ``jit``-able;
* ``n_iter`` — iterations run;
* ``converged`` — the stopping rule passed on a *finite* value. A non-finite value stops the loop
  and is never counted as convergence, whatever the rule says (NaN compares false, but ``inf <
  tol`` is false only by luck of the sign: the driver checks finiteness explicitly).

Two rules cover the solvers here: :func:`below` (``value < tol``: residual norms, checked on the
starting point too, so an already-solved problem takes zero iterations) and
:func:`relative_change` (``|v_k - v_{k-1}| <= tol |v_{k-1}|``: objectives of ascent methods).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float, Int

__all__ = ["Iteration", "StopRule", "below", "iterate", "relative_change"]

S = TypeVar("S")
# stop(previous, current) -> converged. ``previous`` is NaN when testing the starting point.
StopRule = Callable[[Array, Array], Array]


class Iteration(NamedTuple):
    """What :func:`iterate` returns.

    Attributes:
      state: the solver's state after the last iteration.
      trace: values after 0..``n_iter`` iterations, NaN after ``n_iter`` (``max_iter + 1``).
      n_iter: iterations run.
      converged: the stopping rule passed on a finite value.
    """

    state: Any
    trace: Float[Array, " iters"]
    n_iter: Int[Array, ""]
    converged: Bool[Array, ""]

    @property
    def last(self) -> Float[Array, ""]:
        """The last recorded value, ``trace[n_iter]``."""
        return self.trace[self.n_iter]

    @property
    def hit_max_iter(self) -> Bool[Array, ""]:
        """Stopped by the budget (neither converged nor stopped by a non-finite value)."""
        return ~self.converged & (self.n_iter >= self.trace.shape[0] - 1) & jnp.isfinite(self.last)


def below(tol: float) -> StopRule:
    """Converged when the recorded value is below ``tol`` (residual and gradient norms)."""
    return lambda previous, current: current < tol


def relative_change(tol: float) -> StopRule:
    """Converged when ``|current - previous| <= tol * |previous|`` (objective values)."""
    return lambda previous, current: jnp.abs(current - previous) <= tol * jnp.abs(previous)


class _Loop(NamedTuple):
    state: Any
    trace: Array
    k: Array
    converged: Array


def iterate(
    step: Callable[[Int[Array, ""], S], tuple[S, Float[Array, ""]]],
    state: S,
    first: Float[Array, ""],
    *,
    max_iter: int,
    stop: StopRule,
) -> Iteration:
    """Runs ``state, value = step(k, state)`` for k = 0, 1, ... until ``stop`` or ``max_iter``.

    Args:
      step: one iteration; ``k`` is the index of the iteration being run (0-based). Returns the new
        state and the value to record (and test).
      state: the starting state.
      first: the value recorded for the starting state (``trace[0]``); ``stop(nan, first)`` is
        tested on it, so a rule like :func:`below` can finish in zero iterations.
      max_iter: iteration budget (static: it sizes the trace).
      stop: the convergence rule ``stop(previous, current) -> bool``.

    Returns:
      An :class:`Iteration`. The loop also stops, without converging, on a non-finite value.
    """
    if int(max_iter) < 0:
        raise ValueError(f"max_iter must be >= 0, got {max_iter}")
    first = jnp.asarray(first)
    dtype = first.dtype if jnp.issubdtype(first.dtype, jnp.floating) else jnp.float32
    first = first.astype(dtype)
    trace = jnp.full((int(max_iter) + 1,), jnp.nan, dtype).at[0].set(first)
    converged0 = jnp.isfinite(first) & stop(jnp.asarray(jnp.nan, dtype), first)

    def cond(loop: _Loop) -> Array:
        return (loop.k < max_iter) & ~loop.converged & jnp.isfinite(loop.trace[loop.k])

    def body(loop: _Loop) -> _Loop:
        state, value = step(loop.k, loop.state)
        value = jnp.asarray(value).astype(dtype)
        converged = jnp.isfinite(value) & stop(loop.trace[loop.k], value)
        return _Loop(state, loop.trace.at[loop.k + 1].set(value), loop.k + 1, converged)

    init = _Loop(state, trace, jnp.zeros((), jnp.int32), jnp.asarray(converged0))
    out = lax.while_loop(cond, body, init)
    return Iteration(out.state, out.trace, out.k, out.converged)
