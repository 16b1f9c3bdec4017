"""What OT solvers return: the raw dual solution, and the user-facing :class:`OTOutput`.

Every solver of the entropic-OT dual (Wang & Qiu, ICML 2025, Eq. 3) in jaxlab returns a
:class:`RawSolution` built from its :class:`~jaxlab.core.iterate.Iteration`: the final ``x = (α,
β̃)`` in the gauge ``β_m = 0``, the ``‖g‖₂`` trace and the driver's ``n_iter`` / ``converged`` /
``hit_max_iter``. :func:`to_output` adds the plan and the potentials. :class:`OTOutput` uses the
field names shared by every iterative algorithm in the project (``n_iter``, ``converged``,
``errors``, ``seconds``), after ott-jax's ``SinkhornOutput`` (``matrix``, ``potentials``).
A solve that stops short of its tolerance keeps ``converged=False`` and, when the caller can see
the flag's value (not under ``jax.jit``), says so: :func:`report_convergence` warns with a
:class:`NotConvergedWarning`, raises a :class:`NotConvergedError` or stays silent, as the solver's
``unconverged`` argument asks (users of ott-jax are expected to check ``converged``, and often do
not). Under ``jax.jit`` the flag is a tracer: ``unconverged="raise"`` then adds a
:func:`jax.experimental.checkify.check`, which raises once the jitted function is wrapped in
:func:`jax.experimental.checkify.checkify`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core.checks import is_traced
from jaxlab.core.errors import RunError
from jaxlab.core.iterate import Iteration
from jaxlab.ot.dual import plan, split
from jaxlab.ot.problem import check_choice

__all__ = [
    "UNCONVERGED",
    "NotConvergedError",
    "NotConvergedWarning",
    "OTOutput",
    "RawSolution",
    "check_unconverged",
    "raw_solution",
    "report_convergence",
    "to_output",
]

# What a solver does when it stops without converging: its ``unconverged`` argument.
UNCONVERGED = ("warn", "raise", "ignore")


class NotConvergedWarning(RuntimeWarning):
    """An OT solve stopped without reaching its tolerance (``converged`` is False)."""


class NotConvergedError(RunError):
    """An OT solve stopped without reaching its tolerance, and the caller asked to raise."""


class RawSolution(NamedTuple):
    """A solver's result before :func:`to_output` adds the plan (jit-friendly, arrays only).

    Attributes:
      x: final ``(α, β̃)`` with ``β_m = 0``.
      errors: ``‖g‖₂`` after 0, 1, ... iterations, NaN past ``n_iter``.
      densities: ``ρ`` used at each iteration (NaN where not applicable).
      n_iter: iterations run.
      converged: ``‖g‖₂ < tol`` reached on a finite value.
      hit_max_iter: stopped by the budget (neither converged nor stopped by a non-finite value).
      n_evals: objective/gradient evaluations (line-search trials included).
    """

    x: Float[Array, " k"]
    errors: Float[Array, " iters"]
    densities: Float[Array, " iters"]
    n_iter: Int[Array, ""]
    converged: Bool[Array, ""]
    hit_max_iter: Bool[Array, ""]
    n_evals: Int[Array, ""]


def raw_solution(it: Iteration, x, n_evals, densities=None) -> RawSolution:
    """Packs the driver's result; ``densities`` default to NaN (no sparsified Hessian)."""
    if densities is None:
        densities = jnp.full(it.trace.shape[0] - 1, jnp.nan, it.trace.dtype)
    return RawSolution(
        x, it.trace, densities, it.n_iter, it.converged, it.hit_max_iter, jnp.asarray(n_evals)
    )


class OTOutput(NamedTuple):
    """Result of an entropic-OT solve.

    Attributes:
      matrix: the plan ``T = exp((α ⊕ β - M)/η)`` (n × m).
      potentials: ``(α, β)`` with ``β_m = 0``.
      errors: ``‖g‖₂`` (marginal residual) after 0, 1, ... iterations; NaN past ``n_iter``.
      n_iter: iterations run.
      seconds: wall-clock seconds of the compiled solve (NaN when traced under ``jax.jit``).
      densities: ``ρ`` of the sparsified Hessian per iteration (NaN for dense / first-order).
      converged: ``‖g‖₂ < tol`` reached on a finite value (never on NaN or inf).
      hit_max_iter: stopped by the ``max_iter`` budget without converging.
      n_evals: objective/gradient evaluations, line-search trials included.
    """

    matrix: Float[Array, "n m"]
    potentials: tuple[Float[Array, " n"], Float[Array, " m"]]
    errors: Float[Array, " iters"]
    n_iter: Int[Array, ""]
    seconds: Any
    densities: Float[Array, " iters"]
    converged: Bool[Array, ""]
    hit_max_iter: Bool[Array, ""]
    n_evals: Int[Array, ""]

    @property
    def error(self) -> Float[Array, ""]:
        """Final ``‖g‖₂``, ``errors[n_iter]``."""
        return self.errors[self.n_iter]


def to_output(raw: RawSolution, cost: Float[Array, "n m"], epsilon, seconds: Any) -> OTOutput:
    """The :class:`OTOutput` of ``raw`` for the problem ``(cost, ε)``."""
    alpha, beta = split(raw.x, cost.shape[0])
    return OTOutput(
        matrix=plan(alpha, beta, cost, epsilon),
        potentials=(alpha, beta),
        errors=raw.errors,
        n_iter=raw.n_iter,
        seconds=seconds,
        densities=raw.densities,
        converged=raw.converged,
        hit_max_iter=raw.hit_max_iter,
        n_evals=raw.n_evals,
    )


def check_unconverged(unconverged: Any) -> str:
    """``unconverged`` if it is one of :data:`UNCONVERGED`, else a one-line ConfigError."""
    return check_choice("unconverged", unconverged, UNCONVERGED)


def report_convergence(
    converged: Any,
    errors: Any,
    n_iter: Any,
    unconverged: str,
    *,
    what: str,
    tol: float | None,
    fix: str,
) -> None:
    """Warns, raises or stays silent about an unconverged solve, as ``unconverged`` asks.

    Args:
      converged: the solver's flag.
      errors: its error trace (the last recorded one, ``errors[n_iter]``, is reported).
      n_iter: iterations run.
      unconverged: ``"warn"`` (:class:`NotConvergedWarning`), ``"raise"``
        (:class:`NotConvergedError`; under ``jit`` a checkify check) or ``"ignore"``.
      what: the call, e.g. ``"solve(method='splr')"``.
      tol: its tolerance (None for a solver without one).
      fix: what the caller can change.
    """
    if unconverged == "ignore":
        return
    head = f"{what} did not converge" + ("" if tol is None else f" to tol {tol:g}")
    if is_traced(converged):
        if unconverged == "raise":
            checkify.check(converged, f"{head}; {fix}")
        return
    if bool(converged):
        return
    # numpy indexing: an eager jnp index would compile a program of its own.
    error = float(np.asarray(errors)[int(n_iter)])
    at = f"error {error:.2e}" if math.isfinite(error) else f"a non-finite error ({error})"
    message = f"{head}: stopped after {int(n_iter)} iterations at {at}; {fix}"
    if unconverged == "raise":
        raise NotConvergedError(message)
    # stacklevel 3: past this function and the solver, at the caller's line.
    message += " (unconverged='ignore' silences this, 'raise' raises)"
    warnings.warn(message, NotConvergedWarning, stacklevel=3)
