"""Tests that the plot helpers write real, readable, non-blank PNG files."""

import matplotlib.image
import numpy as np

from jaxlab.core.plots import plot_curves, plot_scaling, plot_traces
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
