"""The timing-slope fits of the nard_synthetic report."""

import numpy as np
import pytest

from jaxlab.methods.nard.report import timing_slopes


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
