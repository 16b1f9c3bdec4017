"""run_with_devices: a function runs where JAX has the asked number of simulated CPU devices, and
its result or its error comes back. compile_train_step compiles a program's own step: the loop and
the step timer, handed that program, run it without compiling a train step again."""

import dataclasses
import functools

import jax
import pytest
from flax import nnx

from jaxlab.core.aot import compile_train_step, run_with_devices
from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import AxisRules, make_mesh
from jaxlab.core.step import build_train_program
from jaxlab.core.timing import step_seconds
from jaxlab.testing.compiles import backend_compiles
from jaxlab.testing.toy import ToyTask


def device_count_or_fail(fail: bool) -> int:
    """Module-level, so that it pickles into the child process."""
    if fail:
        raise ConfigError("bad option in the child")
    return jax.device_count()


def test_runs_in_this_process_when_it_has_the_devices():
    calls = []
    assert run_with_devices(lambda: calls.append(1) or "here", jax.device_count()) == "here"
    assert calls == [1]  # a lambda does not pickle: it ran here


def test_runs_in_a_child_process_with_simulated_devices():
    assert run_with_devices(functools.partial(device_count_or_fail, False), 3) == 3


def test_an_error_in_the_child_is_raised_here():
    with pytest.raises(ConfigError, match="bad option in the child"):
        run_with_devices(functools.partial(device_count_or_fail, True), 3)


def _train_step_compiles(fn) -> int:
    """How many times ``fn()`` has XLA compile (or read from the disk cache) a train step."""
    with backend_compiles() as names:
        fn()
    return names.count("jit(train_step)")


def test_the_loop_and_the_timer_run_the_step_compiled_ahead_of_time(tmp_path):
    task = ToyTask()
    cfg = TrainConfig(
        steps=2,
        batch_size=8,
        warmup_steps=0,
        checkpoint_every=2,
        eval_every=2,
        eval_batches=1,
        log_every=1,
        tensorboard=False,
    )
    mesh, rules = make_mesh(), AxisRules()
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):
        program = build_train_program(task, cfg, mesh, rules, init_key=jax.random.key(0))
    batch = next(task.train_iterator(cfg.batch_size, cfg.seed))
    shapes = {name: (x.shape, x.dtype) for name, x in batch.items()}
    figures = compile_train_step(program, mesh, rules, shapes)
    assert figures["flops_per_device"] > 0 and figures["num_devices"] == mesh.size

    def train_and_time():
        # Another seed than the program was built with: the program serves every seed.
        run_training(
            task, dataclasses.replace(cfg, seed=1), tmp_path, program=program, verbose=False
        )
        step_seconds({"toy": task}, batch, cfg, programs={"toy": program}, repeats=1, calls=1)

    assert _train_step_compiles(train_and_time) == 0
    # Without the program, the timer builds and compiles its own (the listener does hear it).
    assert _train_step_compiles(lambda: step_seconds({"toy": task}, batch, cfg, repeats=1)) == 1
