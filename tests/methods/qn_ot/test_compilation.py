"""What the first solve of a process pays: no ott-jax import for a matrix, the persistent cache."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import compile_options
from jaxlab.data.ot_problems import synthetic_1
from jaxlab.methods.qn_ot import api
from jaxlab.methods.qn_ot.splr import splr
from tests.conftest import REPO


@pytest.mark.parametrize("x64, dtype", [(True, "float64"), (False, "float32")])
def test_a_matrix_solve_compiles_one_program_imports_no_ott_and_uses_the_cache(
    tmp_path, x64, dtype
):
    """Importing ott-jax costs seconds; a cost matrix needs none of it. Every compilation costs
    time on the first call, so the input conversion, the solve and its plan and potentials are one
    program, in float64 (the paper's, x64 on) as in float32. The solve turns the persistent
    compilation cache on in the directory ``JAXLAB_COMPILATION_CACHE`` names."""
    code = (
        "import sys, numpy as np, jax\n"
        f"jax.config.update('jax_enable_x64', {x64})\n"
        "jax.config.update('jax_log_compiles', True)\n"
        "from jaxlab.methods.qn_ot import api, solve\n"
        "out = solve(np.ones(3) / 3, np.ones(3) / 3, np.eye(3), epsilon=1.0)\n"
        "assert bool(out.converged) and out.matrix.shape == (3, 3)\n"
        f"assert out.matrix.dtype == np.{dtype}\n"
        "print('ott' in sys.modules, jax.config.jax_compilation_cache_dir)\n"
        "from jaxlab.core import compile_options\n"
        "print(sum(not known for known in compile_options._KNOWN.values()))\n"
    )
    env = {**os.environ, "JAXLAB_COMPILATION_CACHE": str(tmp_path / "cache")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    ott_imported, cache, refused = done.stdout.split()
    assert [ott_imported, cache] == ["False", str(tmp_path / "cache")]
    compiled = re.findall(r"Finished XLA compilation of (\S+)", done.stderr)
    # An option the running XLA refuses (JAX 0.11: the fusion-emitter one) costs one failed
    # attempt of the same program, logged too, before the one compilation.
    assert compiled == ["jit(run)"] * (1 + int(refused)), compiled
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


@pytest.mark.parametrize(
    "shape, platform, fast",
    [
        ((100, 100), "cpu", True),  # 10,000 entries: the largest plan compiled for speed
        ((2, 3), "cpu", True),
        ((100, 101), "cpu", False),
        ((200, 200), "cpu", False),  # Synthetic I at the paper's n runs faster with the defaults
        ((784, 784), "cpu", False),  # CG-heavy MNIST pairs keep XLA's faster scatter
        ((200, 200), "gpu", False),
        ((200, 200), "tpu", False),
    ],
)
def test_small_cpu_plans_compile_with_the_loop_emitters(shape, platform, fast, monkeypatch):
    monkeypatch.setattr(compile_options, "_KNOWN", {})  # as in a process XLA refused nothing in
    options = api.compiler_options(shape, platform)
    assert options == ({"xla_cpu_use_fusion_emitters": False} if fast else None)


def _xla_knows(option: str, value) -> bool:
    """Asks this process's XLA directly, on a one-op program."""
    lowered = jax.jit(lambda x: x + 1).lower(np.float32(1))
    try:
        lowered.compile(compiler_options={option: value})
    except jax.errors.JaxRuntimeError as err:
        assert "No such compile option" in str(err)
        return False
    return True


def test_the_fast_compile_option_is_asked_for_exactly_where_xla_knows_it():
    """JAX 0.11's XLA has no ``xla_cpu_use_fusion_emitters`` ("INVALID_ARGUMENT: No such compile
    option"); 0.10's has. A solve of a small plan compiles on either, and keeps the option exactly
    when XLA knows it."""
    known = _xla_knows("xla_cpu_use_fusion_emitters", False)
    out = api.solve(np.ones(4) / 4, np.ones(4) / 4, np.eye(4), epsilon=0.5, tol=2.34e-5)
    assert bool(out.converged)
    options = api.compiler_options((4, 4), "cpu")
    assert options == ({"xla_cpu_use_fusion_emitters": False} if known else None)


def test_an_option_xla_refuses_is_dropped_once_and_the_solve_compiles(monkeypatch):
    """The options reach XLA (it refuses an unknown one by name), and a refused option costs one
    failed compile per process: it is remembered and never asked for again."""
    known: dict[str, bool] = {}
    monkeypatch.setattr(compile_options, "_KNOWN", known)
    bogus = {"xla_no_such_option": True, **api.FAST_COMPILE_OPTIONS}
    monkeypatch.setattr(api, "FAST_COMPILE_OPTIONS", bogus)
    attempts = []
    compile_ = jax.stages.Lowered.compile

    def counting(self, compiler_options=None):
        attempts.append(dict(compiler_options or {}))
        return compile_(self, compiler_options=compiler_options)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting)
    out = api.solve(np.ones(4) / 4, np.ones(4) / 4, np.eye(4), epsilon=0.5, tol=3.21e-5)
    assert bool(out.converged)
    assert "xla_no_such_option" in attempts[0] and "xla_no_such_option" not in attempts[-1]
    assert known == {"xla_no_such_option": False}
    assert "xla_no_such_option" not in (api.compiler_options((4, 4), "cpu") or {})
    attempts.clear()
    api.solve(np.ones(5) / 5, np.ones(5) / 5, np.eye(5), epsilon=0.5, tol=3.21e-5)
    assert len(attempts) == 1  # a new shape: one compile, without the refused option


def test_the_fast_compile_options_give_the_same_iterates(x64):
    """The options change code generation only: SPLR takes the same iterations and evaluations to
    the same solution (up to rounding: the emitters may order a reduction differently), on the
    CG path with the gathered Hessian, whose scatter the two emitters generate differently."""
    p = synthetic_1(30)
    args = tuple(jnp.asarray(v, jnp.float64) for v in (p.cost, p.a, p.b, 1e-2))

    def run(cost, a, b, epsilon):
        return splr(cost, a, b, epsilon, linear_solver="sparse_cg", max_iter=200)

    fast = jax.jit(run).lower(*args).compile(api.compiler_options(p.cost.shape, "cpu"))
    default = jax.jit(run).lower(*args).compile()
    out_fast, out_default = fast(*args), default(*args)
    assert bool(out_default.converged) and int(out_default.n_iter) > 3
    assert int(out_fast.n_iter) == int(out_default.n_iter)
    assert int(out_fast.n_evals) == int(out_default.n_evals)
    np.testing.assert_allclose(np.asarray(out_fast.x), np.asarray(out_default.x), rtol=1e-9)
