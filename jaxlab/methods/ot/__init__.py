"""Quasi-Newton entropic optimal transport: SPLR (Wang & Qiu, ICML 2025) and its baselines.

``solve(a, b, cost, epsilon=η, method="splr")`` is the entry point; ``method`` also takes
``"sinkhorn"``, ``"lbfgs"``, ``"newton"``, ``"sparse_newton"`` and ``"ssns"``. The dual and its
derivatives live in :mod:`.dual`, the sparsified Hessian in :mod:`.sparse_hessian`, the linear
solves in :mod:`.linsolve`, the Moré–Thuente search in :mod:`.line_search`, one solver per file, and
the benchmark of the paper's claim in :mod:`.benchmark`. See ``README.md`` for measured results.
"""

from jaxlab.methods.ot.api import Method, OTOutput, solve
from jaxlab.methods.ot.differentiation import entropic_ot_value

__all__ = ["Method", "OTOutput", "entropic_ot_value", "solve"]
