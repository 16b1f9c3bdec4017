"""Aggregating the NARD experiments' rows: means over seeds, timing slopes, plot panels, headline.

``aggregate`` averages the per-(size, seed, method) rows of a run over seeds (``converged`` becomes
the fraction of seeds that converged); ``timing_slopes`` fits ``log(time) = slope · log d + c`` per
method with :func:`jaxlab.core.scaling.fit_loglog_slope`; ``timing_panels`` and ``rates_panels``
arrange the table for :func:`jaxlab.core.plots.panels_figure`; ``headline`` picks the numbers that
answer the ``nard_synthetic`` claim at the largest d.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from jaxlab.core.scaling import fit_loglog_slope

__all__ = ["aggregate", "headline", "rates_panels", "timing_panels", "timing_slopes"]


def aggregate(rows: list[dict], keys: tuple[str, ...]) -> dict[str, dict[int, dict[str, float]]]:
    """``{method: {d: {key: mean over seeds}}}`` (NaN-aware)."""
    groups: dict = defaultdict(lambda: defaultdict(list))
    for row in rows:
        groups[row["method"]][row["d"]].append(row)
    return {
        method: {
            d: {
                k: float(np.nanmean([r[k] for r in rs]))
                if not all(np.isnan(r[k]) for r in rs)
                else float("nan")
                for k in keys
            }
            for d, rs in sorted(by_d.items())
        }
        for method, by_d in groups.items()
    }


def timing_slopes(
    table: dict, largest: int | None = None, key: str = "seconds_per_iter"
) -> dict[str, float]:
    """Log-log slope of ``key`` (a time) against d, per method (NaN with < 2 sizes).

    ``largest=k`` fits only the k largest sizes: with ``k = 2`` the local exponent at the top of
    the grid, closer to the asymptotic one than the fit over all sizes when fixed costs (the m x m
    graphical lasso, dispatch) dominate the small sizes.
    """
    out = {}
    for method, by_d in table.items():
        pairs = sorted(by_d.items())[-largest:] if largest else sorted(by_d.items())
        ds = np.array([d for d, _ in pairs])
        t = np.array([v[key] for _, v in pairs])
        out[method] = fit_loglog_slope(ds, t)[0] if len(ds) >= 2 else float("nan")
    return out


def _curve(by_d: dict, key: str) -> tuple[list[int], list[float]]:
    return list(by_d), [v[key] for v in by_d.values()]


def timing_panels(table: dict, slopes: dict[str, dict[str, float]]) -> dict:
    """Panels of seconds per iteration and seconds to convergence against d (for ``panels_figure``).

    ``slopes[key][method]`` (for ``key`` in ``seconds_per_iter``, ``seconds``) goes into the
    curve's name when it is finite.
    """

    def name(method, key):
        s = slopes.get(key, {}).get(method, float("nan"))
        return f"{method} (slope {s:.2f})" if np.isfinite(s) else method

    return {
        label: {name(m, key): _curve(by_d, key) for m, by_d in table.items()}
        for key, label in (
            ("seconds_per_iter", "seconds per iteration (statistics included)"),
            ("seconds", "seconds to convergence (statistics included)"),
        )
    }


def rates_panels(table: dict) -> dict:
    """Panels of TPR, FPR and the fraction of seeds converged against d (for ``panels_figure``)."""
    return {
        label: {m: _curve(by_d, key) for m, by_d in table.items()}
        for key, label in (("tpr", "TPR"), ("fpr", "FPR"), ("converged", "fraction converged"))
    }


def headline(table: dict, reference: str = "nard") -> dict:
    """The numbers that answer ``nard_synthetic``'s claim, per method at the largest d.

    Support recovery (TPR, FPR), the fraction of seeds converged, iterations, seconds to
    convergence and per iteration, and both times relative to ``reference`` (NaN without it).
    """
    d = max(d for by_d in table.values() for d in by_d)
    at = {m: by_d[d] for m, by_d in table.items() if d in by_d}
    ref = at.get(reference, {})
    out: dict = {"d": d}
    for key in ("tpr", "fpr", "converged", "n_iter", "seconds", "seconds_per_iter"):
        out[key] = {m: v[key] for m, v in at.items()}
    for key, name in (("seconds", "seconds_vs_"), ("seconds_per_iter", "per_iter_vs_")):
        base = ref.get(key, float("nan"))
        out[name + reference] = {m: v[key] / base for m, v in at.items()}
    return out
