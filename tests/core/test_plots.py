"""Tests that the plot helpers write real, readable, non-blank PNG files."""

import matplotlib.image
import numpy as np

from jaxlab.core.plots import (
    pairs_figure,
    plot_bars,
    plot_curves,
    plot_matrix,
    plot_pairs,
    plot_panels,
    plot_scaling,
    plot_traces,
)
from jaxlab.core.scaling import fit_power_law


def _check_png(path):
    assert path.is_file() and path.stat().st_size > 5_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
    assert pixels[..., :3].std() > 0.01  # something was drawn


def test_plot_curves(tmp_path):
    steps = np.arange(1, 101)
    out = plot_curves(
        {"train": (steps, 3.0 / np.sqrt(steps)), "eval": (steps[::10], 3.2 / np.sqrt(steps[::10]))},
        tmp_path / "sub" / "loss.png",
        xlabel="step",
        ylabel="loss",
        title="loss",
        logy=True,
    )
    assert out == tmp_path / "sub" / "loss.png"
    _check_png(out)


def test_plot_scaling(tmp_path):
    x = np.logspace(15, 19, 6)
    points = {"ours": (x, 40 * x**-0.1 + 1.5), "baseline": (x, 50 * x**-0.1 + 1.6)}
    fits = {"ours": fit_power_law(*points["ours"])}
    _check_png(plot_scaling(points, fits, tmp_path / "scaling.png", xlabel="C", ylabel="L"))
    _check_png(plot_scaling(points, None, str(tmp_path / "nofit.png"), xlabel="C", ylabel="L"))


def test_plot_pairs_colour_per_group_style_per_variant(tmp_path):
    x = np.logspace(12, 14, 5)
    curves = {
        ("D=64", "transformer"): (x, 3 - 0.1 * np.log10(x), np.full(5, 0.02)),
        ("D=64", "rmt"): (x, 2.9 - 0.1 * np.log10(x)),
        ("D=128", "transformer"): (x, 2.8 - 0.1 * np.log10(x)),
        ("D=128", "rmt"): (x, 2.7 - 0.1 * np.log10(x), np.full(5, 0.03)),
    }
    out = plot_pairs(curves, tmp_path / "pairs.png", xlabel="FLOPs", ylabel="loss", logx=True)
    _check_png(out)
    lines = {
        line.get_label(): line for line in pairs_figure(curves, xlabel="", ylabel="").axes[0].lines
    }
    assert lines["rmt D=64"].get_color() == lines["transformer D=64"].get_color()
    assert lines["rmt D=64"].get_color() != lines["rmt D=128"].get_color()
    assert lines["rmt D=64"].get_linestyle() == lines["rmt D=128"].get_linestyle()
    assert lines["rmt D=64"].get_linestyle() != lines["transformer D=64"].get_linestyle()


def test_plot_panels_matrix_and_bars(tmp_path):
    ds = [200, 500, 1000]
    panels = {
        "seconds": {"a": (ds, [0.1, 0.5, 2.0]), "b": (ds, [0.01, 0.02, 0.03])},
        "TPR": {"a": (ds, [1.0, 1.0, 0.9]), "b": ([200], [1.0])},
    }
    _check_png(plot_panels(panels, tmp_path / "panels.png", xlabel="d", logx=True, title="t"))
    pcor = np.array([[1.0, -0.4, 0.0], [-0.4, 1.0, 0.3], [0.0, 0.3, 1.0]])
    _check_png(plot_matrix(pcor, tmp_path / "m.png", labels=("x", "y", "z"), vmin=-1, vmax=1))
    _check_png(plot_bars({"set 1": {"a": 0.7, "b": 0.9}, "set 2": {"a": 1.2}}, tmp_path / "b.png"))


def test_plot_traces(tmp_path):
    k = np.arange(301)
    fast = np.full(301, np.nan)
    fast[:41] = 10.0 ** (-k[:41] / 4)  # NaN past its last iteration, as solvers record
    slow = 0.99**k
    traces = {"fast": (fast, k * 1e-3), "slow": (slow, k * 1e-4)}
    out = plot_traces(
        traces, tmp_path / "t.png", ylabel="||g||", threshold=1e-8, highlight=("fast",)
    )
    _check_png(out)
