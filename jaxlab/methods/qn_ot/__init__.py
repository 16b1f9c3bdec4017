"""Quasi-Newton entropic optimal transport: SPLR (Wang & Qiu, ICML 2025) and its baselines.

``solve(a, b, cost, epsilon=η, method="splr")`` is the entry point; ``method`` also takes
``"sinkhorn"``, ``"lbfgs"``, ``"newton"``, ``"sparse_newton"`` and ``"ssns"`` (:class:`Method`).
The paper's contribution lives here: SPLR (:mod:`.splr`), the sparsified Hessian in two storages
(:mod:`.sparse_hessian`, :mod:`.gathered_hessian`), the search direction with its rank-2
correction (:mod:`.direction`), SSNS (:mod:`.ssns`) and the benchmark against the authors' C++
code (:mod:`.benchmark`). The shared parts (dual, Sinkhorn, L-BFGS, line search, linear solves,
output type, differentiation) come from :mod:`jaxlab.ot`. See ``README.md`` for measured results.
``solve`` computes in the inputs' dtype, accepts ott-jax's ``Geometry`` / ``LinearProblem``, and its
plan and potentials are differentiable (implicit differentiation, :mod:`jaxlab.ot.implicit`).
"""

from jaxlab.methods.qn_ot.api import Method, OTOutput, options_of, solve
from jaxlab.methods.qn_ot.differentiation import entropic_ot_value
from jaxlab.ot.output import NotConvergedError, NotConvergedWarning

__all__ = [
    "Method",
    "NotConvergedError",
    "NotConvergedWarning",
    "OTOutput",
    "entropic_ot_value",
    "options_of",
    "solve",
]
