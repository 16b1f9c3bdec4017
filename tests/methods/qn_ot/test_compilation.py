"""What the first solve of a process pays: no ott-jax import for a matrix, the persistent cache."""

import os
import re
import subprocess
import sys

import jax

from jaxlab.methods.qn_ot import api
from tests.conftest import REPO


def test_a_matrix_solve_compiles_one_program_imports_no_ott_and_uses_the_cache(tmp_path):
    """Importing ott-jax costs seconds; a cost matrix needs none of it. Every compilation costs
    time on the first call, so the input conversion, the solve and its plan and potentials are one
    program. The solve turns the persistent compilation cache on in the directory
    ``JAXLAB_COMPILATION_CACHE`` names."""
    code = (
        "import sys, numpy as np, jax\n"
        "jax.config.update('jax_log_compiles', True)\n"
        "from jaxlab.methods.qn_ot import solve\n"
        "out = solve(np.ones(3) / 3, np.ones(3) / 3, np.eye(3), epsilon=1.0)\n"
        "assert bool(out.converged) and out.matrix.shape == (3, 3)\n"
        "print('ott' in sys.modules, jax.config.jax_compilation_cache_dir)\n"
    )
    env = {**os.environ, "JAXLAB_COMPILATION_CACHE": str(tmp_path / "cache")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", str(tmp_path / "cache")]
    compiled = re.findall(r"Finished XLA compilation of (\S+)", done.stderr)
    assert compiled == ["jit(run)"], compiled
    assert any((tmp_path / "cache").iterdir())  # the SPLR program was written


def test_a_cache_configured_in_jax_is_left_alone(tmp_path, monkeypatch):
    mine = str(tmp_path / "mine")
    previous = jax.config.jax_compilation_cache_dir
    monkeypatch.setenv("JAXLAB_COMPILATION_CACHE", str(tmp_path / "jaxlab"))
    try:
        jax.config.update("jax_compilation_cache_dir", mine)
        api._use_persistent_cache()
        assert jax.config.jax_compilation_cache_dir == mine
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)
