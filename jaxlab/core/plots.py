"""PNG figures written next to a run's metrics: training curves, solver traces, scaling laws.

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

__all__ = ["plot_curves", "plot_scaling", "plot_traces"]

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


def plot_traces(
    traces: Mapping[str, tuple[ArrayLike, ArrayLike]],
    path: str | os.PathLike,
    *,
    ylabel: str,
    threshold: float | None = None,
    highlight: tuple[str, ...] = (),
    title: str = "",
) -> pathlib.Path:
    """Iterative solvers' traces against iterations and against seconds, log y axis, side by side.

    Args:
        traces: Solver name to ``(values, seconds)``: the recorded value after 0, 1, ... iterations
            (NaN entries are dropped) and the elapsed seconds at each of them.
        path: Where to write the PNG.
        ylabel: Label of the y axis (e.g. an error norm).
        threshold: Draws a dotted horizontal line there (e.g. the tolerance).
        highlight: Names drawn with thicker lines (e.g. the method and its reference).
        title: Optional title.

    Returns:
        The path written.
    """
    fig = Figure(figsize=(11.0, 4.2))
    ax_it, ax_t = fig.subplots(1, 2)
    for name, (values, seconds) in traces.items():
        values = np.asarray(values, np.float64)
        keep = np.isfinite(values)
        values = np.maximum(values[keep], np.finfo(np.float64).tiny)  # log axis: no zeros
        width = 2.2 if name in highlight else 1.2
        ax_it.plot(np.flatnonzero(keep), values, label=name, lw=width)
        ax_t.plot(np.asarray(seconds, np.float64)[keep], values, label=name, lw=width)
    for ax, xlabel in ((ax_it, "iteration"), (ax_t, "seconds")):
        if threshold is not None:
            ax.axhline(threshold, color="k", ls=":", lw=0.8)
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    ax_it.set_xscale("symlog", linthresh=100)  # early iterations and long tails both visible
    ax_t.set_xscale("log")
    if traces:
        ax_t.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return _save(fig, path)
