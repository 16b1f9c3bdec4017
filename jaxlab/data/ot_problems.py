"""Seeded entropic-OT test problems: Synthetic I, Synthetic II and MNIST image pairs.

The benchmark problems of Wang & Qiu (ICML 2025, Section 5), at CPU size:

* **Synthetic I** — a dense uniform random cost ``M_ij ~ U(0, 1)`` and uniform marginals, the
  setting where every entry of the plan matters and Sinkhorn is slow for small ``η`` (random
  marginals, ``uniform_marginals=False``, make it markedly easier for Sinkhorn);
* **Synthetic II** — a 1-D transport between two Gaussian mixtures discretised on a grid of
  ``[0, 1]``, squared-distance cost normalised by its maximum (a smooth, nearly sparse plan);
* **MNIST pairs** — two digits of the shipped MNIST subset as histograms on the 28 × 28 grid,
  smoothed by adding ``smoothing`` to every pixel (intensities scaled to [0, 1]) and normalised,
  with the ℓ1 grid distance ``|i - i'| + |j - j'|`` normalised by its maximum as cost.

Every generator is a pure function of its seed and returns float64 numpy arrays in an
:class:`OTProblem`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from jaxtyping import Float

from jaxlab.core.errors import ConfigError

__all__ = [
    "OTProblem",
    "image_cost",
    "make_problem",
    "mnist_pair",
    "parse_problem_spec",
    "synthetic_1",
    "synthetic_2",
]


class OTProblem(NamedTuple):
    """Cost ``M`` (n × m), marginals ``a`` (n) and ``b`` (m), and a short name for tables."""

    cost: Float[np.ndarray, "n m"]
    a: Float[np.ndarray, " n"]
    b: Float[np.ndarray, " m"]
    name: str


def synthetic_1(
    n: int, m: int | None = None, *, seed: int = 0, uniform_marginals: bool = True
) -> OTProblem:
    """Synthetic I: ``M_ij ~ U(0, 1)``; uniform marginals, or ``U(0, 1) + 0.1`` normalised."""
    m = n if m is None else m
    rng = np.random.default_rng(seed)
    cost = rng.random((n, m))
    a, b = rng.random(n) + 0.1, rng.random(m) + 0.1
    if uniform_marginals:
        a, b = np.ones(n), np.ones(m)
    return OTProblem(cost, a / a.sum(), b / b.sum(), f"synthetic1_n{n}")


def _mixture(x, means, sds, weights):
    dens = sum(
        w * np.exp(-0.5 * ((x - mu) / sd) ** 2) / sd
        for mu, sd, w in zip(means, sds, weights, strict=True)
    )
    return dens + 1e-8  # keep every grid point strictly positive


def synthetic_2(n: int, m: int | None = None, *, seed: int = 0) -> OTProblem:
    """Synthetic II: two 1-D Gaussian mixtures on grids of ``[0, 1]``; cost ``(x - y)²`` / max."""
    m = n if m is None else m
    rng = np.random.default_rng(seed)
    x, y = np.linspace(0.0, 1.0, n), np.linspace(0.0, 1.0, m)
    a = _mixture(x, rng.uniform(0.1, 0.9, 3), rng.uniform(0.03, 0.15, 3), rng.uniform(0.2, 1, 3))
    b = _mixture(y, rng.uniform(0.1, 0.9, 2), rng.uniform(0.03, 0.15, 2), rng.uniform(0.2, 1, 2))
    cost = (x[:, None] - y[None, :]) ** 2
    return OTProblem(cost / cost.max(), a / a.sum(), b / b.sum(), f"synthetic2_n{n}")


def image_cost(side: int) -> Float[np.ndarray, "n m"]:
    """ℓ1 distance between the pixels of a ``side × side`` grid, normalised by its maximum."""
    ii, jj = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    pts = np.stack([ii.ravel(), jj.ravel()], axis=1).astype(np.float64)
    cost = np.abs(pts[:, None, :] - pts[None, :, :]).sum(-1)
    return cost / cost.max()


def mnist_pair(
    index_a: int = 0,
    index_b: int = 1,
    *,
    smoothing: float = 1e-3,
    images: np.ndarray | None = None,
) -> OTProblem:
    """Two MNIST digits as histograms on the 28 × 28 grid with the ℓ1 grid cost.

    Args:
      index_a, index_b: indices into the shipped training subset (or into ``images``).
      smoothing: added to every pixel (intensity in [0, 1]) before normalising, so no bin is empty.
      images: ``(N, H, W)`` images to use instead of the shipped MNIST subset (tests, user data).
    """
    if images is None:
        from jaxlab.data.images import load_mnist

        images, _ = load_mnist("train")
    if not (0 <= index_a < len(images) and 0 <= index_b < len(images)):
        raise ConfigError(f"image indices must lie in [0, {len(images)}), got {index_a}, {index_b}")
    if smoothing <= 0:
        raise ConfigError(
            f"smoothing must be positive so no histogram bin is empty, got {smoothing}"
        )
    side = images.shape[1]

    def hist(img):
        h = np.asarray(img, np.float64).ravel() / max(float(np.max(img)), 1.0) + smoothing
        return h / h.sum()

    name = f"mnist_{index_a}_{index_b}"
    return OTProblem(image_cost(side), hist(images[index_a]), hist(images[index_b]), name)


def parse_problem_spec(spec: str) -> tuple[str, int]:
    """``"synthetic1:200"`` -> ``("synthetic1", 200)``, the experiments' way of naming a problem;
    anything else is a one-line ConfigError."""
    kind, _, n = spec.partition(":")
    if kind not in ("synthetic1", "synthetic2", "mnist") or not n.isdigit() or int(n) < 2:
        raise ConfigError(f"problems entries look like synthetic1:200 or mnist:784, got {spec!r}")
    return kind, int(n)


def make_problem(kind: str, n: int, seed: int = 0) -> OTProblem:
    """``kind`` in ``{"synthetic1", "synthetic2", "mnist"}``; ``n`` is ignored for MNIST (784)."""
    if kind == "synthetic1":
        return synthetic_1(n, seed=seed)
    if kind == "synthetic2":
        return synthetic_2(n, seed=seed)
    if kind == "mnist":
        return mnist_pair(2 * seed, 2 * seed + 1)
    raise ConfigError(f"unknown OT problem {kind!r}; choose synthetic1, synthetic2 or mnist")
