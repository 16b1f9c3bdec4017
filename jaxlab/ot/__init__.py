"""Optimal transport as a library: the problem, the dual, Sinkhorn, and the parts solvers share.

What every OT method in jaxlab builds on (SPLR in :mod:`jaxlab.methods.qn_ot`, WARMPOT in
:mod:`jaxlab.methods.warmpot`):

* :mod:`.problem` — the problem as arrays ``(cost, a, b, ε)`` read from a matrix or ott-jax's
  ``Geometry`` / ``PointCloud`` / ``LinearProblem`` (jaxlab defines no problem class of its own),
  the compute dtype (the inputs', at least float32), the tolerance per dtype, the input checks;
* :mod:`.dual` — the entropic-OT dual, its gradient and Hessian, the plan, the gauge ``β_m = 0``
  and the common start point (Wang & Qiu, ICML 2025, Eqs. 3–4);
* :mod:`.sinkhorn` — log-domain Sinkhorn that accepts initial potentials (warm start);
  :mod:`.lbfgs` — L-BFGS on the dual;
* :mod:`.line_search` — Moré–Thuente strong-Wolfe search; :mod:`.linsolve` — Cholesky and
  Schur-complement PCG for shifted arrow-structured Hessians;
* :mod:`.output` — :class:`OTOutput` (``matrix``, ``potentials``, ``errors``, ``n_iter``,
  ``converged``, ``seconds``, ...), the output every OT solver returns, and the warning
  (:class:`NotConvergedWarning`) or error of a solve that stopped short of its tolerance;
* :mod:`.implicit` — implicit differentiation of any dual solver's solution (plan, potentials);
* :mod:`.differentiation` — the OT value from optimal potentials with envelope-theorem gradients,
  in the paper's convention or ott-jax's two.

Every iterative solver here runs on :func:`jaxlab.core.iterate.iterate` (one convergence test, one
error trace; a non-finite value is never counted as converged). :mod:`.partial` is partial
transport (entropic by Dykstra, exact by the dummy-point LP) with a hard total mass (WARMPOT).
This package imports :mod:`jaxlab.core` and ott-jax, never :mod:`jaxlab.methods`.
"""

from jaxlab.ot.differentiation import value_from_potentials
from jaxlab.ot.implicit import implicit_solution
from jaxlab.ot.lbfgs import lbfgs
from jaxlab.ot.linsolve import LinearSolver
from jaxlab.ot.output import (
    NotConvergedError,
    NotConvergedWarning,
    OTOutput,
    RawSolution,
    to_output,
)
from jaxlab.ot.partial import PartialOTOutput, partial_ot
from jaxlab.ot.sinkhorn import sinkhorn

__all__ = [
    "LinearSolver",
    "NotConvergedError",
    "NotConvergedWarning",
    "OTOutput",
    "PartialOTOutput",
    "RawSolution",
    "implicit_solution",
    "lbfgs",
    "partial_ot",
    "sinkhorn",
    "to_output",
    "value_from_potentials",
]
