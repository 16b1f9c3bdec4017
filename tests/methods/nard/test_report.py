"""The timing-slope fits of the nard_synthetic report."""

import numpy as np
import pytest

from jaxlab.methods.nard.report import headline, timing_panels, timing_slopes


def test_slopes_recover_exponents_and_the_top_of_the_grid_is_closer_to_them():
    ds = [200, 500, 1000, 2000]
    table = {
        "cubic": {d: {"seconds_per_iter": 1e-9 * d**3} for d in ds},
        "flat": {d: {"seconds_per_iter": 0.002} for d in ds},
        "cubic_plus_fixed": {d: {"seconds_per_iter": 1e-9 * d**3 + 0.01} for d in ds},
        "one_size": {200: {"seconds_per_iter": 0.1}},
    }
    all_d, top = timing_slopes(table), timing_slopes(table, largest=2)
    assert all_d["cubic"] == pytest.approx(3) and top["cubic"] == pytest.approx(3)
    assert all_d["flat"] == pytest.approx(0, abs=1e-9)
    assert all_d["cubic_plus_fixed"] < top["cubic_plus_fixed"] < 3
    assert top["cubic_plus_fixed"] == pytest.approx(np.log(8.01 / 1.01) / np.log(2))
    assert np.isnan(all_d["one_size"])


def test_headline_takes_the_largest_d_and_ratios_to_nard():
    row = {"tpr": 1.0, "fpr": 0.0, "converged": 1.0, "n_iter": 10.0}
    table = {
        "nard": {
            200: {**row, "seconds": 1.0, "seconds_per_iter": 0.1},
            500: {**row, "seconds": 4.0, "seconds_per_iter": 0.4},
        },
        "surrogate": {
            200: {**row, "seconds": 0.5, "seconds_per_iter": 0.05},
            500: {**row, "fpr": 0.5, "seconds": 1.0, "seconds_per_iter": 0.02},
        },
    }
    head = headline(table)
    assert head["d"] == 500 and head["fpr"] == {"nard": 0.0, "surrogate": 0.5}
    assert head["seconds_vs_nard"] == {"nard": 1.0, "surrogate": 0.25}
    assert head["per_iter_vs_nard"]["surrogate"] == pytest.approx(0.05)
    panels = timing_panels(table, {"seconds": timing_slopes(table, key="seconds")})
    assert set(panels) == {
        "seconds per iteration (statistics included)",
        "seconds to convergence (statistics included)",
    }
    assert "surrogate (slope 0.76)" in panels["seconds to convergence (statistics included)"]
