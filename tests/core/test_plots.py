"""Tests that each figure function draws and that ``save_figure`` writes a real, non-blank PNG."""

import warnings

import matplotlib.image
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from jaxlab.core import plots
from jaxlab.core.plots import (
    bars_figure,
    curves_figure,
    matrix_figure,
    pairs_figure,
    panels_figure,
    save_figure,
    scaling_figure,
    traces_figure,
)
from jaxlab.core.scaling import fit_power_law


def _check_png(path):
    assert path.is_file() and path.stat().st_size > 5_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
    assert pixels[..., :3].std() > 0.01  # something was drawn


def test_one_function_per_figure_kind_and_one_saver():
    kinds = ("bars", "curves", "matrix", "pairs", "panels", "scaling", "traces")
    assert sorted(plots.__all__) == sorted(
        [*(f"{k}_figure" for k in kinds), "save_figure", "PendingFigure", "serve_figure_helper"]
    )
    assert not [n for n in dir(plots) if n.startswith("plot_")]  # no writer beside each figure


def test_curves_saved_into_a_new_folder(tmp_path):
    steps = np.arange(1, 101)
    fig = curves_figure(
        {"train": (steps, 3.0 / np.sqrt(steps)), "eval": (steps[::10], 3.2 / np.sqrt(steps[::10]))},
        xlabel="step",
        ylabel="loss",
        title="loss",
        logy=True,
        hlines={"floor": 0.2},
    )
    assert isinstance(fig, Figure)
    out = save_figure(fig, tmp_path / "sub" / "loss.png")
    assert out == tmp_path / "sub" / "loss.png"
    _check_png(out)
    assert [line.get_label() for line in fig.axes[0].lines] == ["train", "eval", "floor"]


def test_scaling(tmp_path):
    x = np.logspace(15, 19, 6)
    points = {"ours": (x, 40 * x**-0.1 + 1.5), "baseline": (x, 50 * x**-0.1 + 1.6)}
    fits = {"ours": fit_power_law(*points["ours"])}
    fig = scaling_figure(points, fits, xlabel="C", ylabel="L")
    assert [line.get_label().split(":")[0] for line in fig.axes[0].lines] == ["ours fit"]
    _check_png(save_figure(fig, tmp_path / "scaling.png"))
    nofit = scaling_figure(points, None, xlabel="C", ylabel="L")
    _check_png(save_figure(nofit, str(tmp_path / "nofit.png")))


def test_pairs_colour_per_group_style_per_variant(tmp_path):
    x = np.logspace(12, 14, 5)
    curves = {
        ("D=64", "transformer"): (x, 3 - 0.1 * np.log10(x), np.full(5, 0.02)),
        ("D=64", "rmt"): (x, 2.9 - 0.1 * np.log10(x)),
        ("D=128", "transformer"): (x, 2.8 - 0.1 * np.log10(x)),
        ("D=128", "rmt"): (x, 2.7 - 0.1 * np.log10(x), np.full(5, 0.03)),
    }
    fig = pairs_figure(curves, xlabel="FLOPs", ylabel="loss", logx=True)
    _check_png(save_figure(fig, tmp_path / "pairs.png"))
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    assert lines["rmt D=64"].get_color() == lines["transformer D=64"].get_color()
    assert lines["rmt D=64"].get_color() != lines["rmt D=128"].get_color()
    assert lines["rmt D=64"].get_linestyle() == lines["rmt D=128"].get_linestyle()
    assert lines["rmt D=64"].get_linestyle() != lines["transformer D=64"].get_linestyle()


def test_pairs_with_long_labels_keep_a_legend_that_fits(tmp_path):
    # icl_regression's labels: four variants of one long group name side by side were wider than
    # the figure, and tight_layout gave up with a warning.
    x = np.logspace(6, 8, 3)
    group = "d=8, D=32 (8-head head dim 4)"
    curves = {(group, v): (x, 1 / np.log10(x)) for v in ("mha8", "mha1", "btt8", "mlr8")}
    fig = pairs_figure(curves, xlabel="FLOPs", ylabel="error", logx=True, logy=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check_png(save_figure(fig, tmp_path / "long.png"))
    legend = fig.axes[0].get_legend().get_window_extent(FigureCanvasAgg(fig).get_renderer())
    assert legend.width < fig.bbox.width


def test_panels_matrix_and_bars(tmp_path):
    ds = [200, 500, 1000]
    panels = {
        "seconds": {"a": (ds, [0.1, 0.5, 2.0]), "b": (ds, [0.01, 0.02, 0.03])},
        "TPR": {"a": (ds, [1.0, 1.0, 0.9]), "b": ([200], [1.0])},
    }
    fig = panels_figure(panels, xlabel="d", logx=True, title="t")
    assert len(fig.axes) == 2
    _check_png(save_figure(fig, tmp_path / "panels.png"))
    pcor = np.array([[1.0, -0.4, 0.0], [-0.4, 1.0, 0.3], [0.0, 0.3, 1.0]])
    fig = matrix_figure(pcor, labels=("x", "y", "z"), vmin=-1, vmax=1)
    _check_png(save_figure(fig, tmp_path / "m.png"))
    fig = bars_figure({"set 1": {"a": 0.7, "b": 0.9}, "set 2": {"a": 1.2}})
    assert len(fig.axes) == 2
    _check_png(save_figure(fig, tmp_path / "b.png"))


def test_traces(tmp_path):
    k = np.arange(301)
    fast = np.full(301, np.nan)
    fast[:41] = 10.0 ** (-k[:41] / 4)  # NaN past its last iteration, as solvers record
    slow = 0.99**k
    traces = {"fast": (fast, k * 1e-3), "slow": (slow, k * 1e-4)}
    fig = traces_figure(traces, ylabel="||g||", threshold=1e-8, highlight=("fast",))
    assert len(fig.axes[0].lines[0].get_xdata()) == 41  # the NaN tail is dropped
    _check_png(save_figure(fig, tmp_path / "t.png"))
