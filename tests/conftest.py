"""Test setup: 8 simulated CPU devices before JAX is imported, and shared fixtures.

The device count must be fixed before JAX initialises its backends, so it is set here, at import
time of the conftest, through ``XLA_FLAGS``; the persistent compilation cache of ``run.py`` is
turned off so that no test writes into the user's cache directory. ``x64`` runs a test with 64-bit
floats enabled (solvers compare against float64 references); everything else runs in the default
32-bit mode.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("WANDB_SILENT", "true")
# run.py turns JAX's persistent compilation cache on in the user's cache directory; tests (and the
# experiments/run.py processes they start) must not write there.
os.environ["JAXLAB_COMPILATION_CACHE"] = "off"

import pathlib

import jax
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def x64():
    """Enables 64-bit floats for the duration of one test."""
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.device_count()} x {jax.devices()[0].platform}"
