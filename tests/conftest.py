"""Test setup: 8 simulated CPU devices before JAX is imported, and shared fixtures.

The device count must be fixed before JAX initialises its backends, so it is set here, at import
time of the conftest, through ``XLA_FLAGS``; the persistent compilation cache points at a directory
of this test run's own (below), never the user's cache directory. ``x64`` runs a test with 64-bit
floats enabled (solvers compare against float64 references); everything else runs in the default
32-bit mode.
"""

import os
import shutil
import subprocess
import sys

from jaxlab.core.startup import raise_gc_threshold

# The workers trace and compile as a run's start does (jaxlab.core.startup.GC_THRESHOLD).
raise_gc_threshold()

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    _flags += " --xla_force_host_platform_device_count=8"
# Compilation dominates the suite's tiny programs. Most of it is code generation: LLVM's
# optimisation of the generated CPU code, and XLA CPU's MLIR fusion emitters, which build each
# fusion through a pipeline of MLIR passes where the older loop emitters write LLVM IR directly.
# Level 0 and the loop emitters compile faster and the programs compute the same values up to
# rounding (the tests' tolerances are for reference-vs-fast-path differences, not for code
# generation). XLA also splits each program's LLVM module into parts compiled in parallel; on the
# suite's two workers of two cores there is no core to spare for that, and one part compiles the
# same kernels with less overhead.
# JAXLAB_TEST_XLA_OPTIMIZE=on keeps XLA's defaults for all three. Newer XLAs drop options (JAX
# 0.11's has no fusion-emitter switch) and abort the process on an unknown one in XLA_FLAGS, so each
# is set only where this XLA knows it: asked once per run in a child process (the flags must be set
# before this process starts JAX's backend), and the answer handed to the xdist workers and the
# run.py processes the tests start through _CHECKED.
_CHECKED = "JAXLAB_TEST_XLA_FLAGS_CHECKED"
_FAST_COMPILE = {
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
    "xla_cpu_parallel_codegen_split_count": 1,
}


def _xla_knows(options: dict) -> set[str]:
    """Those of ``options`` (name: value) this jaxlib's XLA accepts as compile options (which fail
    with an error where XLA_FLAGS would abort), all asked in one child process."""
    code = (
        "import jax\n"
        f"for name, value in {options!r}.items():\n"
        "    try:\n"
        "        jax.jit(lambda x: x).lower(1.0).compile({name: value})\n"
        "        print(name)\n"
        "    except jax.errors.JaxRuntimeError:\n"
        "        pass\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return set(child.stdout.split()) if child.returncode == 0 else set()


if os.environ.get("JAXLAB_TEST_XLA_OPTIMIZE", "").lower() != "on" and not os.environ.get(_CHECKED):
    _wanted = {k: v for k, v in _FAST_COMPILE.items() if k not in _flags}
    _known = _xla_knows(_wanted)
    _flags += "".join(f" --{k}={str(v).lower()}" for k, v in _wanted.items() if k in _known)
    os.environ[_CHECKED] = "1"
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ.setdefault("MPLBACKEND", "Agg")
# The runner's figure helper (jaxlab.core.figure_helper) trades a core's time for the run's wall
# time; the suite's workers already fill both cores and start the runner many times, so it is off
# here, and on where it is tested: tests/core/test_figure_helper.py and one runner test.
os.environ.setdefault("JAXLAB_FIGURE_HELPER", "off")
os.environ.setdefault("WANDB_SILENT", "true")
# run.py turns JAX's persistent compilation cache on in the user's cache directory; tests (and the
# experiments/run.py processes they start) must not write there. They share one cache of their own
# instead, made for this test run and removed at its end: the xdist workers and every run.py they
# start then compile a step of given shapes once (the next seed of a sweep, a resumed or killed
# and restarted run, a notebook repeating an experiment) rather than each time.
# JAXLAB_TEST_COMPILATION_CACHE=off turns it off.
import pathlib
import tempfile

_RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
TEST_CACHE = pathlib.Path(tempfile.gettempdir()) / f"jaxlab-test-jit-cache-{_RUN_ID}"
_use_cache = os.environ.get("JAXLAB_TEST_COMPILATION_CACHE", "").lower() != "off"
os.environ["JAXLAB_COMPILATION_CACHE"] = str(TEST_CACHE) if _use_cache else "off"

import jax
import pytest

from jaxlab.core.compile_cache import enable_compilation_cache

if _use_cache:
    enable_compilation_cache()
    # Only compilations worth a disk round trip: most test compilations take milliseconds.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.3)

REPO = pathlib.Path(__file__).resolve().parents[1]


def pytest_sessionfinish(session, exitstatus):
    """The run's cache goes when the run ends (in the controller, after every worker)."""
    if not hasattr(session.config, "workerinput"):
        shutil.rmtree(TEST_CACHE, ignore_errors=True)


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
