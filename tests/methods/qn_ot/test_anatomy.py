"""The anatomy's reading of regot's own phase times (printed by its C++ code with verbose=2)."""

import numpy as np

from jaxlab.data.ot_problems import make_problem
from jaxlab.methods.qn_ot.anatomy import regot_phases


def test_regot_phases_are_read_from_its_standard_output(capfd):
    phases = regot_phases(make_problem("synthetic1", 30), 1e-2, tol=1e-8, max_iter=100)
    assert set(phases) == {"lin_solve", "line_search", "grad", "hess"}
    assert all(np.isfinite(v) and v >= 0 for v in phases.values()), phases
    assert "lin_solve" not in capfd.readouterr().out  # the printout went to the parser only
