"""Seeded sparse multi-output regression problems with a chain-structured output network (NARD).

The generator of the Network ARD experiments (Zhang et al., ICML 2025, Sec. 6.1, whose own generator
is not public): inputs ``X ~ N(0, 1)`` (d×N), ``p`` active features whose coefficients are
``±U(0.5, 1.5)`` with random signs (m×p, the other d − p columns of W are 0), an output precision
``Ω`` that is a chain (tridiagonal: ``Ω_ii = 1``, ``Ω_{i,i±1} = coupling``, positive definite for
``|coupling| < 0.5``), and noise columns ``E ~ N(0, Ω⁻¹)``; ``Y = W X + E``. Deterministic in
``seed`` (numpy's PCG64), returned as float64 numpy arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from jaxtyping import Bool, Float

__all__ = ["NardProblem", "chain_precision", "make_problem"]


class NardProblem(NamedTuple):
    """A generated problem with its ground truth.

    Attributes:
      X: inputs (d×N).
      Y: outputs (m×N).
      coef: true W (m×d).
      precision: true Ω (m×m).
      support: boolean mask of the p active features (d,).
    """

    X: Float[np.ndarray, "d N"]
    Y: Float[np.ndarray, "m N"]
    coef: Float[np.ndarray, "m d"]
    precision: Float[np.ndarray, "m m"]
    support: Bool[np.ndarray, " d"]


def chain_precision(m: int, coupling: float = 0.4) -> Float[np.ndarray, "m m"]:
    """Tridiagonal precision with unit diagonal and ``coupling`` on the first off-diagonals."""
    if not abs(coupling) < 0.5:
        raise ValueError(f"|coupling| must be < 0.5 for a positive definite chain, got {coupling}")
    prec = np.eye(m)
    idx = np.arange(m - 1)
    prec[idx, idx + 1] = prec[idx + 1, idx] = coupling
    return prec


def make_problem(
    d: int,
    m: int = 20,
    n: int = 200,
    p: int = 10,
    *,
    seed: int = 0,
    coupling: float = 0.4,
    low: float = 0.5,
    high: float = 1.5,
) -> NardProblem:
    """Draws one problem.

    Args:
      d: number of input features.
      m: number of outputs.
      n: number of samples N.
      p: number of active features (``p ≤ d``), chosen uniformly at random.
      seed: random seed.
      coupling: off-diagonal value of the chain precision.
      low, high: coefficient magnitudes are ``U(low, high)`` with random signs.

    Returns:
      A :class:`NardProblem`.
    """
    if not 0 < p <= d:
        raise ValueError(f"need 0 < p <= d, got p={p}, d={d}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((d, n))
    support = np.zeros(d, bool)
    support[rng.choice(d, size=p, replace=False)] = True
    coef = np.zeros((m, d))
    coef[:, support] = rng.uniform(low, high, (m, p)) * rng.choice([-1.0, 1.0], (m, p))
    prec = chain_precision(m, coupling)
    noise = np.linalg.cholesky(np.linalg.inv(prec)) @ rng.standard_normal((m, n))
    return NardProblem(X, coef @ X + noise, coef, prec, support)
