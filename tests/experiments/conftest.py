"""Fixtures shared by the experiment tests."""

import sys

import pytest


@pytest.fixture(scope="module")
def run_main(repo_root):
    """``experiments/run.py``'s ``main`` (the runner as the command line calls it)."""
    sys.path.insert(0, str(repo_root / "experiments"))
    import run  # experiments/run.py

    return run.main
