"""The compile options of a short CPU run, and the check of which options XLA knows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core import compile_options
from jaxlab.core.compile_options import (
    FAST_CPU_OPTIONS,
    SHORT_RUN_MAX_FLOPS,
    SHORT_RUN_MAX_STATE,
    SHORT_RUN_MAX_STEPS,
    compile_lowered,
    known_options,
    short_run_options,
)


def _xla_knows(option, value) -> bool:
    """Asked of this process's XLA directly, on a one-op program (not through the module)."""
    try:
        jax.jit(lambda x: x + 1).lower(np.float32(1)).compile({option: value})
    except jax.errors.JaxRuntimeError as err:
        assert "No such compile option" in str(err)
        return False
    return True


def test_unknown_options_are_dropped_and_known_ones_kept(monkeypatch):
    monkeypatch.setattr(compile_options, "_KNOWN", {})
    asked = {"xla_no_such_option": True, **FAST_CPU_OPTIONS}
    expected = {k: v for k, v in FAST_CPU_OPTIONS.items() if _xla_knows(k, v)}
    assert "xla_backend_optimization_level" in expected  # known to 0.10 and 0.11 alike
    assert known_options(asked) == expected
    assert compile_options._KNOWN["xla_no_such_option"] is False
    assert known_options({"xla_no_such_option": True}) is None
    assert known_options(None) is None


def test_options_are_asked_together_in_one_compile(monkeypatch):
    """One compile for the options not asked about before, one more per refused option."""
    monkeypatch.setattr(compile_options, "_KNOWN", {})
    compiles = []
    real = jax.stages.Lowered.compile

    def counting(self, compiler_options=None):
        compiles.append(dict(compiler_options or {}))
        return real(self, compiler_options)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting)
    asked = {**FAST_CPU_OPTIONS, "xla_no_such_option": True}
    refused = 1 + sum(not _xla_knows(k, v) for k, v in FAST_CPU_OPTIONS.items())
    compiles.clear()  # _xla_knows compiled too
    known_options(asked)
    assert len(compiles) == 1 + refused
    assert compiles[0] == asked  # all at once first
    compiles.clear()
    known_options(asked)  # answered from what this process was told
    assert compiles == []


def test_short_runs_leave_ynnpack_fusions_out():
    """Where XLA fuses matrix products into YNNPACK kernels (each builds its pipeline on the
    program's first call), a short run's options leave them to Eigen."""
    fn = jax.jit(lambda w, x: jnp.tanh(x @ w).sum())
    lowered = fn.lower(np.ones((64, 64), np.float32), np.ones((32, 64), np.float32))
    if "ynn_fusion" not in lowered.compile().as_text():
        pytest.skip("this XLA fuses no matrix product into YNNPACK")
    options = short_run_options("cpu", 2, 1000, 1)
    assert "ynn_fusion" not in lowered.compile(options).as_text()


def test_compile_lowered_drops_a_refused_option_and_remembers_it(monkeypatch):
    monkeypatch.setattr(compile_options, "_KNOWN", {})
    lowered = jax.jit(lambda x: 2 * x).lower(np.float32(3))
    compiled = compile_lowered(lowered, {"xla_no_such_option": 1})
    assert float(compiled(np.float32(3))) == 6.0
    assert compile_options._KNOWN == {"xla_no_such_option": False}


@pytest.mark.parametrize(
    "platform, steps, state, units, short",
    [
        ("cpu", 2, 126_000, 512, True),  # lm_baseline --smoke --set train.steps=2
        ("cpu", SHORT_RUN_MAX_STEPS, 1000, 1, True),
        ("cpu", SHORT_RUN_MAX_STEPS + 1, 1000, 1, False),  # a run, not a smoke test
        ("cpu", 1, SHORT_RUN_MAX_STATE + 1, 1, False),  # a large state to initialise
        ("cpu", 2, 1_000_000, 8192, False),  # 3.3e10 FLOPs: real work
        ("gpu", 2, 1000, 1, False),
        ("tpu", 2, 1000, 1, False),
    ],
)
def test_only_a_short_cpu_run_compiles_fast(platform, steps, state, units, short):
    options = short_run_options(platform, steps, state, units)
    assert (options is not None) == short
    if short:
        assert options == known_options(FAST_CPU_OPTIONS)
    assert 2.0 * 1_000_000 * 8192 * 2 > SHORT_RUN_MAX_FLOPS >= 2.0 * 126_000 * 512 * 2


def test_the_loop_asks_with_its_platform_steps_state_and_units(monkeypatch, tmp_path):
    """The loop's programs take the options of its own run: a toy run of 8 steps on the CPU."""
    from jaxlab.core import loop
    from jaxlab.core.config import TrainConfig
    from jaxlab.testing.toy import ToyTask

    asked = []

    def recording(platform, steps, state_size, units_per_step):
        asked.append((platform, steps, state_size, units_per_step))
        return short_run_options(platform, steps, state_size, units_per_step)

    monkeypatch.setattr(loop, "short_run_options", recording)
    cfg = TrainConfig(steps=3, batch_size=8, checkpoint_every=3, eval_every=3, eval_batches=1,
                      log_every=3, warmup_steps=1, tensorboard=False)  # fmt: skip
    loop.run_training(ToyTask(), cfg, tmp_path, verbose=False)
    ((platform, steps, state_size, units),) = asked
    assert (platform, steps, units) == ("cpu", 3, 8)
    model = ToyTask().build_model(nnx.Rngs(0))
    params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert 3 * params <= state_size <= 3 * params + 8  # AdamW: the parameters, two moments, counts
