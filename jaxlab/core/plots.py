"""PNG figures written next to a run's metrics: training curves and scaling-law plots.

Figures are built as ``matplotlib.figure.Figure`` objects and saved directly, never through
``pyplot``: there is no global figure state to leak between calls or threads, nothing to close, and
no GUI backend is ever selected, so the same code works headless in CI, in a notebook and on a
cluster. Every function returns the path it wrote, creating parent folders as needed.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

from jaxlab.core.scaling import PowerLawFit, predict

__all__ = ["pairs_figure", "plot_curves", "plot_pairs", "plot_scaling"]

_FIGSIZE = (6.0, 4.0)
_DPI = 120


def _save(fig: Figure, path: str | os.PathLike) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=_DPI)
    return path


def plot_curves(
    series: Mapping[str, tuple[ArrayLike, ArrayLike]],
    path: str | os.PathLike,
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
) -> pathlib.Path:
    """Plots named ``(x, y)`` curves on one axis and saves a PNG.

    Args:
        series: Curve name to ``(x, y)``, e.g. ``{"train": (steps, losses)}``.
        path: Where to write the PNG.
        xlabel: Label of the x axis.
        ylabel: Label of the y axis.
        title: Optional title.
        logx: Log-scale the x axis.
        logy: Log-scale the y axis.

    Returns:
        The path written.
    """
    fig = Figure(figsize=_FIGSIZE)
    ax = fig.add_subplot()
    for name, (x, y) in series.items():
        ax.plot(np.asarray(x), np.asarray(y), label=name)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if series:
        ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


_LINESTYLES = ("-", "--", ":", "-.")


def plot_pairs(
    curves: Mapping[
        tuple[str, str], tuple[ArrayLike, ArrayLike] | tuple[ArrayLike, ArrayLike, ArrayLike]
    ],
    path: str | os.PathLike,
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
) -> pathlib.Path:
    """Curves of matched models, paired visibly: one colour per group, one line style per variant.

    Args:
        curves: ``(group, variant)`` to ``(x, y)`` or ``(x, y, spread)``; e.g. group ``"D=128"``,
            variant ``"transformer"`` / ``"rmt"``. A spread (the half-width of a band: a standard
            deviation over seeds, say) is drawn as a shaded band around ``y``.
        path: Where to write the PNG.
        xlabel, ylabel, title, logx, logy: as in :func:`plot_curves`.

    Returns:
        The path written.
    """
    return _save(
        pairs_figure(curves, xlabel=xlabel, ylabel=ylabel, title=title, logx=logx, logy=logy), path
    )


def pairs_figure(
    curves: Mapping[tuple[str, str], tuple[ArrayLike, ...]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
) -> Figure:
    """The figure :func:`plot_pairs` saves (a notebook can display it as it is)."""
    groups = list(dict.fromkeys(g for g, _ in curves))
    variants = list(dict.fromkeys(v for _, v in curves))
    fig = Figure(figsize=_FIGSIZE)
    ax = fig.add_subplot()
    for (group, variant), curve in curves.items():
        color = f"C{groups.index(group) % 10}"
        style = _LINESTYLES[variants.index(variant) % len(_LINESTYLES)]
        x, y = np.asarray(curve[0], np.float64), np.asarray(curve[1], np.float64)
        ax.plot(x, y, color=color, linestyle=style, label=f"{variant} {group}")
        if len(curve) == 3:
            spread = np.asarray(curve[2], np.float64)
            ax.fill_between(x, y - spread, y + spread, color=color, alpha=0.15, linewidth=0)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if curves:
        ax.legend(fontsize="small", ncols=max(1, len(variants)))
    ax.grid(True, which="both", alpha=0.3)
    return fig


def plot_scaling(
    points: Mapping[str, tuple[ArrayLike, ArrayLike]],
    fits: Mapping[str, PowerLawFit] | None,
    path: str | os.PathLike,
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
) -> pathlib.Path:
    """Log-log scatter of measured points with their fitted power laws.

    Args:
        points: Series name to measured ``(x, loss)``.
        fits: Optional series name to :class:`~jaxlab.core.scaling.PowerLawFit`; each is drawn
            over its series' x range (extended by a quarter decade each side) with the exponent
            ``b ± b_err`` (and ``c`` when nonzero) in the legend.
        path: Where to write the PNG.
        xlabel: Label of the x axis.
        ylabel: Label of the y axis.
        title: Optional title.

    Returns:
        The path written.
    """
    fig = Figure(figsize=_FIGSIZE)
    ax = fig.add_subplot()
    fits = fits or {}
    for i, (name, (x, y)) in enumerate(points.items()):
        color = f"C{i}"
        x = np.asarray(x, np.float64)
        ax.scatter(x, np.asarray(y), color=color, label=name, zorder=3)
        fit = fits.get(name)
        if fit is None:
            continue
        lo, hi = np.log10(x.min()) - 0.25, np.log10(x.max()) + 0.25
        grid = np.logspace(lo, hi, 200)
        label = f"{name} fit: b = {fit.b:.3g} ± {fit.b_err:.2g}"
        if fit.c > 0:
            label += f", c = {fit.c:.3g}"
        ax.plot(grid, predict(fit, grid), color=color, linestyle="--", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if points:
        ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)
