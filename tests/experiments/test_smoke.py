"""Every experiment runs at ``--smoke`` size and writes config, metrics and summary files.

Experiments are discovered the way the runner finds them, so a new experiment file is tested here
without editing this file.
"""

import json

import jax
import pytest

from jaxlab.core import experiment
from tests.conftest import REPO

EXP_DIR = REPO / "experiments"


@pytest.mark.parametrize("name", experiment.available(EXP_DIR))
def test_smoke_run_writes_its_files(name, tmp_path):
    summary = experiment.launch(EXP_DIR, name, smoke=True, workdir=tmp_path)
    assert not jax.config.jax_enable_x64, f"{name} left 64-bit mode on for the whole process"
    record = json.loads((tmp_path / "config.json").read_text())
    assert record["experiment"] == name and record["preset"] == "smoke"
    assert json.loads((tmp_path / "summary.json").read_text())["experiment"] == name
    assert (tmp_path / "metrics.jsonl").stat().st_size > 0
    assert summary["wall_seconds"] > 0


def test_lm_baseline_smoke_learns_and_resumes(tmp_path):
    first = experiment.launch(EXP_DIR, "lm_baseline", smoke=True, workdir=tmp_path)
    assert first["val_bits_per_byte"] < 8.0  # a uniform guess over 256 bytes is exactly 8 bits
    assert (tmp_path / "val_bits_per_byte.png").stat().st_size > 1000
    again = experiment.launch(EXP_DIR, "lm_baseline", smoke=True, workdir=tmp_path)
    assert again["resumed_from"] == 30 and again["val_bits_per_byte"] == first["val_bits_per_byte"]
