"""Real multi-output regression sets that ship offline (scikit-learn's bundled data) for NARD.

The data of the ``nard_real`` experiment (beside :mod:`~jaxlab.data.nard_synthetic`):

* ``linnerud``: 20 men; inputs the 3 exercises (chins, situps, jumps), outputs the 3 physiological
  measurements (weight, waist, pulse). Tiny and noisy: a check that the method behaves, not a test.
* ``diabetes``: 442 patients of scikit-learn's diabetes data (unscaled). Outputs: the six blood
  serum measurements s1–s6 (tc, ldl, hdl, tch, ltg, glu), whose network is strong (tc ≈ ldl + hdl
  + ...). Inputs: age, sex, bmi, bp and the disease-progression score, their squares and pairwise
  products (14: sex² equals sex up to a shift and is left out), and ``n_noise`` pure-noise
  distractor columns (seeded), so that feature selection has known-irrelevant candidates. The
  paper's own real datasets are not available offline.

Both return X (d×N) and Y (m×N) as float64 numpy arrays with names; standardisation is left to the
caller (it must use training-fold statistics only).
"""

from __future__ import annotations

from itertools import combinations_with_replacement
from typing import NamedTuple

import numpy as np
from sklearn.datasets import load_diabetes, load_linnerud

from jaxlab.core.errors import ConfigError

__all__ = ["DATASETS", "RealProblem", "load"]

DATASETS = ("linnerud", "diabetes")


class RealProblem(NamedTuple):
    """X (d×N), Y (m×N), feature and output names, and a mask of the known-noise features."""

    X: np.ndarray
    Y: np.ndarray
    features: tuple[str, ...]
    outputs: tuple[str, ...]
    noise: np.ndarray


def _diabetes(n_noise: int, seed: int) -> RealProblem:
    data = load_diabetes(scaled=False)
    names = list(data.feature_names)
    serum = [names.index(f"s{k}") for k in range(1, 7)]
    base_idx = [names.index(k) for k in ("age", "sex", "bmi", "bp")]
    base = np.column_stack([data.data[:, base_idx], data.target])
    base_names = ["age", "sex", "bmi", "bp", "progression"]
    z = (base - base.mean(0)) / base.std(0)
    cols, feats = [z[:, i] for i in range(5)], list(base_names)
    for i, j in combinations_with_replacement(range(5), 2):
        if base_names[i] == "sex" and i == j:
            continue  # sex² is a constant shift of sex: collinear
        cols.append(z[:, i] * z[:, j])
        feats.append(f"{base_names[i]}*{base_names[j]}")
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((len(z), n_noise))
    X = np.column_stack(cols + [noise]).T
    feats += [f"noise{k}" for k in range(n_noise)]
    mask = np.r_[np.zeros(len(cols), bool), np.ones(n_noise, bool)]
    return RealProblem(
        X, data.data[:, serum].T, tuple(feats), ("tc", "ldl", "hdl", "tch", "ltg", "glu"), mask
    )


def load(name: str, *, n_noise: int = 20, seed: int = 0) -> RealProblem:
    """Loads dataset ``name`` (one of :data:`DATASETS`); ``n_noise`` and ``seed`` shape the
    distractor columns of ``diabetes``.

    Raises:
      ConfigError: an unknown name or a negative ``n_noise``.
    """
    if not isinstance(n_noise, int) or n_noise < 0:
        raise ConfigError(f"n_noise must be an integer >= 0, got {n_noise!r}")
    if name == "linnerud":
        data = load_linnerud()
        return RealProblem(
            data.data.T.astype(np.float64),
            data.target.T.astype(np.float64),
            tuple(data.feature_names),
            tuple(data.target_names),
            np.zeros(3, bool),
        )
    if name == "diabetes":
        return _diabetes(n_noise, seed)
    raise ConfigError(f"unknown dataset {name!r}; use one of {', '.join(DATASETS)}")
