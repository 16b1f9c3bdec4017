"""The runner's figure helper: the helper process draws the same PNG, and whatever goes wrong there
(a dead helper, arguments that do not pickle, an error while drawing, a file that cannot be written)
ends as it would without a helper."""

import pickle

import matplotlib.image
import numpy as np
import pytest

from jaxlab.core import figure_helper
from jaxlab.core.errors import RunError
from jaxlab.core.plots import PendingFigure, curves_figure, save_figure, traces_figure

STEPS = np.arange(1, 41)
SERIES = {"train": (STEPS, 3.0 / np.sqrt(STEPS)), "eval": (STEPS[::5], 3.2 / np.sqrt(STEPS[::5]))}
KW = {"xlabel": "step", "ylabel": "loss", "title": "loss", "logy": True, "hlines": {"floor": 0.4}}


@pytest.fixture(autouse=True)
def helper_on(monkeypatch):
    monkeypatch.setenv("JAXLAB_FIGURE_HELPER", "on")  # the suite turns it off (tests/conftest.py)


class _NoPickle(float):
    def __reduce__(self):
        raise TypeError("not picklable")


def test_the_helper_draws_the_same_png_as_this_process(tmp_path):
    here = save_figure(curves_figure(SERIES, **KW), tmp_path / "here.png")
    traces = {"a": (np.geomspace(1.0, 1e-6, 30), np.linspace(0.0, 1.0, 30))}
    here_traces = save_figure(traces_figure(traces, ylabel="err"), tmp_path / "here_traces.png")
    with figure_helper.drawing() as helper:
        fig = curves_figure(SERIES, **KW)
        assert isinstance(fig, PendingFigure)
        there = save_figure(fig, tmp_path / "sub" / "there.png")
        there_traces = save_figure(traces_figure(traces, ylabel="err"), tmp_path / "t.png")
        assert helper.drawn == 2
        proc = helper._proc
    assert there == tmp_path / "sub" / "there.png"
    for a, b in ((here, there), (here_traces, there_traces)):
        pixels = matplotlib.image.imread(b)
        assert pixels[..., :3].std() > 0.01
        np.testing.assert_array_equal(pixels, matplotlib.image.imread(a))
    # The block's end stops the helper (reaped: nothing is left running).
    assert proc.poll() is not None and figure_helper.active() is None
    assert not isinstance(curves_figure(SERIES, **KW), PendingFigure)


def test_off_starts_no_helper_and_figures_are_drawn_here(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXLAB_FIGURE_HELPER", "off")
    with figure_helper.drawing() as helper:
        assert helper is None and figure_helper.active() is None
        fig = curves_figure(SERIES, **KW)
        assert not isinstance(fig, PendingFigure)
        save_figure(fig, tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 5_000


def test_a_block_that_draws_nothing_stops_its_helper():
    with figure_helper.drawing() as helper:
        proc = helper._proc
        assert proc.poll() is None  # starting: importing matplotlib
    assert proc.poll() is not None and not helper.alive


def test_a_dead_helper_leaves_the_figures_to_this_process(tmp_path):
    with figure_helper.drawing() as helper:
        fig = curves_figure(SERIES, **KW)
        helper._proc.kill()
        helper._proc.wait()
        save_figure(fig, tmp_path / "a.png")
        assert helper.drawn == 0 and not helper.alive
        assert not isinstance(curves_figure(SERIES, **KW), PendingFigure)
    np.testing.assert_array_equal(
        matplotlib.image.imread(tmp_path / "a.png"),
        matplotlib.image.imread(save_figure(curves_figure(SERIES, **KW), tmp_path / "b.png")),
    )


def test_arguments_that_do_not_pickle_are_drawn_in_this_process(tmp_path):
    kw = {**KW, "hlines": {"floor": _NoPickle(0.4)}}
    with pytest.raises(TypeError):
        pickle.dumps(kw)
    with figure_helper.drawing() as helper:
        save_figure(curves_figure(SERIES, **kw), tmp_path / "a.png")
        assert helper.drawn == 0 and helper.alive
        save_figure(curves_figure(SERIES, **KW), tmp_path / "b.png")
        assert helper.drawn == 1
    np.testing.assert_array_equal(
        matplotlib.image.imread(tmp_path / "a.png"), matplotlib.image.imread(tmp_path / "b.png")
    )


def test_an_error_while_drawing_is_raised_in_this_process_and_the_helper_goes_on(tmp_path):
    bad = {"train": ([0, 1, 2], [0.0, 1.0])}  # x and y of different lengths
    with pytest.raises(ValueError) as outside:
        curves_figure(bad, **KW)
    with figure_helper.drawing() as helper:
        with pytest.raises(ValueError) as inside:
            save_figure(curves_figure(bad, **KW), tmp_path / "bad.png")
        assert str(inside.value) == str(outside.value)
        assert not (tmp_path / "bad.png").exists()
        save_figure(curves_figure(SERIES, **KW), tmp_path / "good.png")
        assert helper.drawn == 1


def test_a_file_that_cannot_be_written_is_the_same_one_line_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    target = tmp_path / "file" / "loss.png"
    with pytest.raises(RunError) as outside:
        save_figure(curves_figure(SERIES, **KW), target)
    with figure_helper.drawing() as helper:
        with pytest.raises(RunError) as inside:
            save_figure(curves_figure(SERIES, **KW), target)
        assert helper.alive and helper.drawn == 0
    assert str(inside.value) == str(outside.value) and "\n" not in str(inside.value)


def test_a_pending_figure_used_as_a_figure_is_drawn_in_this_process(tmp_path):
    with figure_helper.drawing() as helper:
        fig = curves_figure(SERIES, **KW)
        assert [line.get_label() for line in fig.axes[0].lines] == ["train", "eval", "floor"]
        save_figure(fig, tmp_path / "a.png")
        assert helper.drawn == 0  # already drawn here: saved here
    assert (tmp_path / "a.png").stat().st_size > 5_000
