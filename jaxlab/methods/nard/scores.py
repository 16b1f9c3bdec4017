"""Scores of an estimate against the synthetic ground truth: support rates and output-network error.

``support_rates`` gives the true- and false-positive rates of the selected features.
``network_errors`` compares an estimated precision Ω̂ with the true Ω: the relative Frobenius error
``‖Ω̂ − Ω‖_F / ‖Ω‖_F`` and the edge error, the fraction of the m(m−1)/2 off-diagonal pairs whose
presence (``|Ω̂_ij| > tol · max_i Ω̂_ii``) disagrees with the true graph.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import ArrayLike

__all__ = ["network_errors", "support_rates"]


def support_rates(selected: ArrayLike, support: ArrayLike) -> tuple[float, float]:
    """(TPR, FPR) of a boolean selection against the true support."""
    sel, sup = np.asarray(selected, bool), np.asarray(support, bool)
    tpr = (sel & sup).sum() / max(sup.sum(), 1)
    fpr = (sel & ~sup).sum() / max((~sup).sum(), 1)
    return float(tpr), float(fpr)


def network_errors(est: ArrayLike, true: ArrayLike, tol: float = 1e-6) -> tuple[float, float]:
    """(relative Frobenius error, edge error) of an estimated precision (see module docstring)."""
    est, true = np.asarray(est, np.float64), np.asarray(true, np.float64)
    frob = np.linalg.norm(est - true) / np.linalg.norm(true)
    iu = np.triu_indices(true.shape[0], 1)
    est_edges = np.abs(est[iu]) > tol * np.abs(np.diag(est)).max()
    return float(frob), float(np.mean(est_edges != (true[iu] != 0)))
