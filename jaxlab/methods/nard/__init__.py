"""Network ARD (Zhang et al., ICML 2025): sparse multi-output regression with a learned network.

``Y = W X + E`` with a matrix-normal ARD prior on W (one precision α_i per input feature, shared by
all m outputs) and a sparse output precision Ω (graphical lasso). :func:`fit` runs one of four
algorithms — ``nard`` (block coordinate ascent), ``sequential`` (Tipping–Faul add / re-estimate /
delete),
``surrogate`` (Lipschitz lower bound with a diagonal intermediate matrix) and
``sequential_surrogate`` — all pure JAX with ``lax.while_loop`` inside. :func:`graphical_lasso` is
the JAX graphical lasso they share; :func:`log_marginal_likelihood` evaluates the model's evidence.
Every algorithm and every baseline returns a :class:`NARDResult`; :func:`partial_correlations`
turns its output network Ω into partial correlations.
See ``README.md`` in this folder for the derivations and measured results.
"""

from jaxlab.methods.nard.api import METHODS, Method, fit
from jaxlab.methods.nard.cv import select_lam
from jaxlab.methods.nard.glasso import GlassoResult, graphical_lasso
from jaxlab.methods.nard.model import log_marginal_likelihood
from jaxlab.methods.nard.output import NARDResult, partial_correlations

__all__ = [
    "METHODS",
    "Method",
    "GlassoResult",
    "NARDResult",
    "fit",
    "graphical_lasso",
    "log_marginal_likelihood",
    "partial_correlations",
    "select_lam",
]
