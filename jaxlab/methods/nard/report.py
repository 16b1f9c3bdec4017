"""Aggregation and figures for the NARD experiments (numbers per method and size, log-log timing).

``aggregate`` averages the per-(size, seed, method) rows of a run over seeds; ``timing_slopes`` fits
``log(seconds per iteration) = slope · log d + c`` per method with
:func:`jaxlab.core.scaling.fit_loglog_slope`; ``timing_figure`` and ``rates_figure`` draw them on
``matplotlib.figure.Figure`` objects (no pyplot state).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from matplotlib.figure import Figure

from jaxlab.core.scaling import fit_loglog_slope

__all__ = ["aggregate", "rates_figure", "timing_figure", "timing_slopes"]


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


def timing_slopes(table: dict, largest: int | None = None) -> dict[str, float]:
    """Log-log slope of seconds per iteration against d, per method (NaN with < 2 sizes).

    ``largest=k`` fits only the k largest sizes: with ``k = 2`` the local exponent at the top of
    the grid, closer to the asymptotic one than the fit over all sizes when fixed costs (the m x m
    graphical lasso, dispatch) dominate the small sizes.
    """
    out = {}
    for method, by_d in table.items():
        pairs = sorted(by_d.items())[-largest:] if largest else sorted(by_d.items())
        ds = np.array([d for d, _ in pairs])
        t = np.array([v["seconds_per_iter"] for _, v in pairs])
        out[method] = fit_loglog_slope(ds, t)[0] if len(ds) >= 2 else float("nan")
    return out


def timing_figure(
    table: dict, slopes: dict[str, float], title: str, top_slopes: dict[str, float] | None = None
) -> Figure:
    """Seconds per iteration against d on log-log axes, slopes (and top-of-grid ones) in the
    legend."""
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    for method, by_d in table.items():
        ds = list(by_d)
        ax.loglog(
            ds,
            [v["seconds_per_iter"] for v in by_d.values()],
            "o-",
            label=f"{method} (slope {slopes[method]:.2f}"
            + (f"; {top_slopes[method]:.2f} over the 2 largest d)" if top_slopes else ")"),
        )
    ax.set_xlabel("number of features d")
    ax.set_ylabel("seconds per iteration")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def rates_figure(table: dict, title: str) -> Figure:
    """TPR and FPR of the selected support against d, one line per method."""
    fig = Figure(figsize=(9, 3.6))
    for k, key in enumerate(("tpr", "fpr")):
        ax = fig.add_subplot(1, 2, k + 1)
        for method, by_d in table.items():
            ax.semilogx(list(by_d), [v[key] for v in by_d.values()], "o-", label=method)
        ax.set_xlabel("number of features d")
        ax.set_ylabel(key.upper())
        ax.grid(True, alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
