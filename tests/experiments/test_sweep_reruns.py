"""Re-running an experiment on its workdir reuses a finished run only for the same config (issue
31: ``warmpot_digits`` returned the old numbers after ``--set train.learning_rate=...``)."""

from jaxlab.core import experiment
from tests.conftest import REPO

EXP_DIR = REPO / "experiments"
# One method, one seed, no grid, a few steps: the smallest warmpot_digits run.
TINY = {
    "methods": "source_only",
    "grid_seeds": "",
    "recipes": "",
    "train.steps": "6",
    "train.eval_every": "3",
    "train.ramp_steps": "3",
}


def _results(overrides, workdir):
    summary = experiment.launch(
        EXP_DIR, "warmpot_digits", smoke=True, overrides=overrides, workdir=workdir
    )
    return summary["results"]


def test_warmpot_rerun_with_another_learning_rate_trains_again(tmp_path):
    first = _results(TINY, tmp_path / "run")
    assert _results(TINY, tmp_path / "run") == first  # reused
    faster = {**TINY, "train.learning_rate": "0.05"}
    changed = _results(faster, tmp_path / "run")
    assert changed != first
    assert changed == _results(faster, tmp_path / "fresh")
