"""PNG figures written next to a run's metrics: training curves and scaling-law plots.

Figures are built as ``matplotlib.figure.Figure`` objects and saved directly, never through
``pyplot``: there is no global figure state to leak between calls or threads, nothing to close, and
no GUI backend is ever selected, so the same code works headless in CI, in a notebook and on a
cluster. Each kind of figure has one ``*_figure`` function that returns it, which is how the
notebooks draw; experiments pass it to :func:`save_figure`, which writes the PNG, so experiments
and notebooks share one style.

Under ``experiments/run.py`` a helper process draws the figures
(:func:`jaxlab.core.figure_helper.drawing`): there a ``*_figure`` function returns a
:class:`PendingFigure`, which :func:`save_figure` has the helper draw and write, and which any other
use draws in process first.
"""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from jaxlab.core import figure_helper
from jaxlab.core.metrics import write_atomically
from jaxlab.core.scaling import PowerLawFit, predict

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "PendingFigure",
    "serve_figure_helper",
    "bars_figure",
    "curves_figure",
    "matrix_figure",
    "pairs_figure",
    "panels_figure",
    "save_figure",
    "scaling_figure",
    "traces_figure",
]

_FIGSIZE = (6.0, 4.0)
_DPI = 120


def _figure(**kwargs) -> Figure:
    """A new Figure; matplotlib is imported on the first figure, not with jaxlab (start-up time)."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


class PendingFigure:
    """A ``*_figure`` call recorded while a figure helper draws (:mod:`jaxlab.core.figure_helper`).

    :func:`save_figure` has the helper make the call and write the PNG; any other use (an attribute
    of the ``Figure``) makes the call here first, so the object works as the figure it stands for.
    """

    def __init__(self, fn: Callable[..., Figure], args: tuple, kwargs: dict[str, Any]):
        self.call = (fn, args, kwargs)
        self.drawn: Figure | None = None

    def figure(self) -> Figure:
        """The figure, drawn in this process (once)."""
        if self.drawn is None:
            fn, args, kwargs = self.call
            self.drawn = fn(*args, **kwargs)
        return self.drawn

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and friends probe these: not the figure's
            raise AttributeError(name)
        return getattr(self.figure(), name)


def serve_figure_helper() -> None:
    """The figure helper process's entry point (:mod:`jaxlab.core.figure_helper`): imports
    matplotlib and draws one throw-away figure (fonts, layout), then saves each requested figure
    with :func:`save_figure` until the run's process closes the helper's input."""
    import io

    _render(curves_figure({"a": ([0, 1], [0, 1])}, xlabel="x", ylabel="y", title="t"), io.BytesIO())

    def draw(name: str, args: tuple, kwargs: dict[str, Any], path: str) -> None:
        save_figure(globals()[name](*args, **kwargs), path)

    figure_helper.serve(draw)


def _drawable(fn: Callable[..., Figure]) -> Callable[..., Figure]:
    """``fn`` returning a :class:`PendingFigure` while a figure helper is active."""

    @functools.wraps(fn)
    def figure_or_pending(*args, **kwargs):
        if figure_helper.active() is None:
            return fn(*args, **kwargs)
        return PendingFigure(fn, args, kwargs)

    return figure_or_pending


def save_figure(fig: Figure | PendingFigure, path: str | os.PathLike) -> pathlib.Path:
    """Writes ``fig`` as a PNG at ``path`` (creating parent folders, atomically:
    :func:`jaxlab.core.metrics.write_atomically`) and returns the path.

    A :class:`PendingFigure` is drawn and written by the active figure helper, or here when there is
    none or it cannot take it.

    Raises:
      RunError: the file cannot be written (one line naming it).
    """
    path = pathlib.Path(path)
    if isinstance(fig, PendingFigure):
        helper = figure_helper.active()
        fn, args, kwargs = fig.call
        if fig.drawn is None and helper is not None:
            if helper.draw(fn.__name__, args, kwargs, path):
                return path
        fig = fig.figure()
    write_atomically(path, lambda tmp: _render(fig, tmp))
    return path


def _render(fig: Figure, target: Any) -> None:
    """Lays ``fig`` out and writes it as a PNG to ``target`` (a path or a binary file)."""
    fig.tight_layout()
    fig.savefig(target, format="png", dpi=_DPI)


@_drawable
def curves_figure(
    series: Mapping[str, tuple[ArrayLike, ArrayLike]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    hlines: Mapping[str, float] | None = None,
) -> Figure:
    """Named ``(x, y)`` curves on one axis.

    Args:
        series: Curve name to ``(x, y)``, e.g. ``{"train": (steps, losses)}``.
        xlabel: Label of the x axis.
        ylabel: Label of the y axis.
        title: Optional title.
        logx: Log-scale the x axis.
        logy: Log-scale the y axis.
        hlines: Named dashed horizontal references (a floor such as an entropy, a tolerance).

    Returns:
        The figure.
    """
    fig = _figure(figsize=_FIGSIZE)
    ax = fig.add_subplot()
    for name, (x, y) in series.items():
        ax.plot(np.asarray(x), np.asarray(y), marker="o", markersize=3, label=name)
    for name, value in (hlines or {}).items():
        ax.axhline(value, color="gray", linestyle="--", linewidth=1, label=name)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if series or hlines:
        ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return fig


_LINESTYLES = ("-", "--", ":", "-.")
# Characters of "small" legend text that one row holds across a _FIGSIZE axes, and each entry's
# handle and spacing in the same unit.
_LEGEND_ROW_CHARS = 72
_LEGEND_PAD_CHARS = 6


@_drawable
def pairs_figure(
    curves: Mapping[tuple[str, str], tuple[ArrayLike, ...]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
) -> Figure:
    """Curves of matched models, paired visibly: one colour per group, one line style per variant.

    Args:
        curves: ``(group, variant)`` to ``(x, y)`` or ``(x, y, spread)``; e.g. group ``"D=128"``,
            variant ``"transformer"`` / ``"rmt"``. A spread (the half-width of a band: a standard
            deviation over seeds, say) is drawn as a shaded band around ``y``.
        xlabel, ylabel, title, logx, logy: as in :func:`curves_figure`.

    Returns:
        The figure.
    """
    groups = list(dict.fromkeys(g for g, _ in curves))
    variants = list(dict.fromkeys(v for _, v in curves))
    fig = _figure(figsize=_FIGSIZE)
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
        # One group per row when a row of labels fits the axes' width; otherwise one column (a
        # legend wider than the figure leaves tight_layout no room and it gives up, with a warning).
        longest = max(len(f"{v} {g}") for g, v in curves)
        fits = len(variants) * (longest + _LEGEND_PAD_CHARS) <= _LEGEND_ROW_CHARS
        ax.legend(fontsize="small", ncols=len(variants) if fits else 1)
    ax.grid(True, which="both", alpha=0.3)
    return fig


@_drawable
def scaling_figure(
    points: Mapping[str, tuple[ArrayLike, ArrayLike]],
    fits: Mapping[str, PowerLawFit] | None,
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
) -> Figure:
    """Log-log scatter of measured points with their fitted power laws.

    Args:
        points: Series name to measured ``(x, loss)``.
        fits: Optional series name to :class:`~jaxlab.core.scaling.PowerLawFit`; each is drawn
            over its series' x range (extended by a quarter decade each side) with the exponent
            ``b ± b_err`` (and ``c`` when nonzero) in the legend.
        xlabel: Label of the x axis.
        ylabel: Label of the y axis.
        title: Optional title.

    Returns:
        The figure.
    """
    fig = _figure(figsize=_FIGSIZE)
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
    return fig


@_drawable
def panels_figure(
    panels: Mapping[str, Mapping[str, tuple[ArrayLike, ArrayLike]]],
    *,
    xlabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
) -> Figure:
    """A row of panels over one x quantity, each with named curves (points marked).

    Args:
        panels: Panel y label to its curves, each ``name -> (x, y)``; e.g.
            ``{"TPR": {"nard": (ds, tpr)}, "FPR": {"nard": (ds, fpr)}}``. A name keeps its colour
            in every panel, and single points stay visible (markers).
        xlabel: Label of every x axis.
        title: Optional title above the row.
        logx: Log-scale the x axes.
        logy: Log-scale the y axes.

    Returns:
        The figure.
    """
    names = list(dict.fromkeys(name for curves in panels.values() for name in curves))
    fig = _figure(figsize=(_FIGSIZE[0] * max(len(panels), 1) * 0.75, _FIGSIZE[1]))
    for k, (ylabel, curves) in enumerate(panels.items()):
        ax = fig.add_subplot(1, len(panels), k + 1)
        for name, (x, y) in curves.items():
            color = f"C{names.index(name) % 10}"
            ax.plot(np.asarray(x), np.asarray(y), "o-", color=color, label=name)
        ax.set(xlabel=xlabel, ylabel=ylabel)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        if curves:
            ax.legend(fontsize="x-small")
    if title:
        fig.suptitle(title, fontsize="small")
    return fig


@_drawable
def matrix_figure(
    matrix: ArrayLike,
    *,
    labels: tuple[str, ...] | None = None,
    title: str = "",
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str = "RdBu_r",
) -> Figure:
    """A matrix as a heat map with a colour bar (e.g. partial correlations).

    Args:
        matrix: The values (n×n, or any 2-D shape).
        labels: Optional names of the rows and columns (square matrices).
        title: Optional title.
        vmin: Lower end of the colour scale (default: the data's).
        vmax: Upper end of the colour scale (default: the data's).
        cmap: A matplotlib colour map (a diverging one for signed values).

    Returns:
        The figure.
    """
    fig = _figure(figsize=(_FIGSIZE[1] * 1.15, _FIGSIZE[1]))
    ax = fig.add_subplot()
    im = ax.imshow(np.asarray(matrix), cmap=cmap, vmin=vmin, vmax=vmax)
    if labels is not None:
        ax.set_xticks(range(len(labels)), labels, rotation=45, fontsize="small")
        ax.set_yticks(range(len(labels)), labels, fontsize="small")
    ax.set_title(title, fontsize="small")
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


@_drawable
def bars_figure(panels: Mapping[str, Mapping[str, float]], *, title: str = "") -> Figure:
    """Horizontal bar charts side by side, one per panel (e.g. a score per method per dataset).

    Args:
        panels: Panel title to ``name -> value``.
        title: Optional title above the panels.

    Returns:
        The figure.
    """
    fig = _figure(figsize=(_FIGSIZE[0] * max(len(panels), 1) * 0.6, _FIGSIZE[1] * 0.85))
    for k, (name, bars) in enumerate(panels.items()):
        ax = fig.add_subplot(1, len(panels), k + 1)
        ax.barh(list(bars), [float(v) for v in bars.values()])
        ax.set_title(name, fontsize="small")
        ax.tick_params(labelsize="x-small")
        ax.grid(True, axis="x", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize="small")
    return fig


@_drawable
def traces_figure(
    traces: Mapping[str, tuple[ArrayLike, ArrayLike]],
    *,
    ylabel: str,
    threshold: float | None = None,
    highlight: tuple[str, ...] = (),
    title: str = "",
) -> Figure:
    """Iterative solvers' traces against iterations and against seconds, log y axis, side by side.

    Args:
        traces: Solver name to ``(values, seconds)``: the recorded value after 0, 1, ... iterations
            (NaN entries are dropped) and the elapsed seconds at each of them.
        ylabel: Label of the y axis (e.g. an error norm).
        threshold: Draws a dotted horizontal line there (e.g. the tolerance).
        highlight: Names drawn with thicker lines (e.g. the method and its reference).
        title: Optional title.

    Returns:
        The figure.
    """
    fig = _figure(figsize=(11.0, 4.2))
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
    return fig
