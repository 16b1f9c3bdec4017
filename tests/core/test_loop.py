"""The training loop on a toy task: determinism, resume, non-finite guards, damaged checkpoints,
the schedule of an extended run."""

import collections
import dataclasses
import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError, RunError
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import AxisRules, make_mesh
from jaxlab.core.metrics import read_metrics
from jaxlab.core.optim import make_schedule
from jaxlab.core.step import build_train_program, run_keys
from jaxlab.testing.compiles import backend_compiles
from jaxlab.testing.toy import ToyTask

CFG = TrainConfig(
    steps=8,
    batch_size=8,
    warmup_steps=2,
    checkpoint_every=4,
    eval_every=4,
    log_every=2,
    eval_batches=2,
    tensorboard=False,
)
LOSS_KEYS = ("loss", "grad_norm", "eval_loss", "learning_rate")


def _losses(workdir):
    return [{k: r[k] for k in ("step", *LOSS_KEYS) if k in r} for r in read_metrics(workdir)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("reference")
    summary = run_training(ToyTask(), CFG, workdir, verbose=False)
    return workdir, summary


def test_reference_run_writes_metrics_and_checkpoints(reference):
    workdir, summary = reference
    rows = read_metrics(workdir)
    assert [r["step"] for r in rows] == [2, 4, 6, 8]
    assert "eval_loss" in rows[1] and "examples_per_second" in rows[0]
    assert rows[-1]["examples_seen"] == 64 and summary["examples_seen"] == 64
    assert summary["final_step"] == 8 and summary["resumed_from"] == 0
    assert sorted(int(p.name) for p in (workdir / "checkpoints").iterdir()) == [4, 8]
    assert rows[-1]["loss"] < rows[0]["loss"]


def test_same_seed_same_metrics(reference, tmp_path):
    run_training(ToyTask(), CFG, tmp_path, verbose=False)
    assert _losses(tmp_path) == _losses(reference[0])


class _KeyEcho(ToyTask):
    """Reports a uniform draw from the key its loss is given (evaluation passes none)."""

    def loss(self, model, batch, key=None):
        objective, metrics = super().loss(model, batch, key)
        return objective, {**metrics, "draw": 0.0 if key is None else jax.random.uniform(key)}


def test_step_n_trains_with_fold_in_of_the_seeds_second_key(tmp_path):
    # The documented keys: split(key(seed)) gives the init key and the step key; step n (counted
    # from 0) gets fold_in(step key, n). Steps 4-6 are trained after a resume from step 4.
    cfg = dataclasses.replace(CFG, steps=6, log_every=1, seed=3)
    run_training(_KeyEcho(), dataclasses.replace(cfg, steps=4), tmp_path, verbose=False)
    run_training(_KeyEcho(), cfg, tmp_path, verbose=False)
    step_key = jax.random.split(jax.random.key(3))[1]
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    for row in rows:
        want = float(jax.random.uniform(jax.random.fold_in(step_key, row["step"] - 1)))
        assert row["draw"] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 3, -1, 2**31 - 1, 2**31 + 5, 2**40])
def test_run_keys_are_the_eager_split_of_the_seeds_key(seed):
    # One small program where eagerly there are two; seeds past int32 keep JAX's eager rule.
    keys = run_keys(seed)
    want = jax.random.split(jax.random.key(seed))
    assert len(keys) == 2
    for got, ref in zip(keys, want, strict=True):
        assert np.array_equal(jax.random.key_data(got), jax.random.key_data(ref))


def _program(task, cfg):
    """``task``'s program for ``cfg`` on the loop's default mesh, built as a caller builds it."""
    mesh, rules = make_mesh(), AxisRules()
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):
        return build_train_program(task, cfg, mesh, rules, init_key=jax.random.key(cfg.seed))


def test_a_handed_program_trains_every_seed_as_the_loops_own_build(reference, tmp_path):
    task = ToyTask()
    program = _program(task, CFG)  # built once, for seed 0
    run_training(task, CFG, tmp_path / "seed0", program=program, verbose=False)
    assert _losses(tmp_path / "seed0") == _losses(reference[0])
    seed1 = dataclasses.replace(CFG, seed=1)
    run_training(task, seed1, tmp_path / "seed1", program=program, verbose=False)
    run_training(ToyTask(), seed1, tmp_path / "own", verbose=False)
    assert _losses(tmp_path / "seed1") == _losses(tmp_path / "own")
    assert _losses(tmp_path / "seed1") != _losses(reference[0])


def test_each_program_of_a_run_compiles_once(reference, tmp_path):
    """The init, train and eval programs compile in background threads while the run traces the
    next; the steps then call those very programs (none compiles twice), fresh and resumed (with
    its own program: the schedule keeps the first run's length)."""
    with backend_compiles() as fresh:
        run_training(ToyTask(), dataclasses.replace(CFG, steps=4), tmp_path, verbose=False)
    with backend_compiles() as resumed:
        run_training(ToyTask(), CFG, tmp_path, verbose=False)
    fresh, resumed = collections.Counter(fresh), collections.Counter(resumed)
    assert fresh["jit(init_state)"] == fresh["jit(train_step)"] == fresh["jit(eval_step)"] == 1
    assert resumed["jit(init_state)"] == 0
    assert resumed["jit(train_step)"] == resumed["jit(eval_step)"] == 1


def test_resume_from_middle_checkpoint_matches(reference, tmp_path):
    shutil.copytree(reference[0], tmp_path, dirs_exist_ok=True)
    shutil.rmtree(tmp_path / "checkpoints" / "8")  # as if killed between steps 4 and 8
    summary = run_training(ToyTask(), CFG, tmp_path, verbose=False)
    assert summary["resumed_from"] == 4
    assert _losses(tmp_path) == _losses(reference[0])


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    # Row 45 is in batch 5 (rows 40-47), i.e. step 6, after the step-4 checkpoint.
    with pytest.raises(RunError, match=r"non-finite loss \(nan\) at step 6.*step 4\) is kept"):
        run_training(ToyTask(nan_at_row=45), CFG, tmp_path, verbose=False)
    assert [int(p.name) for p in (tmp_path / "checkpoints").iterdir()] == [4]
    assert all(r["step"] <= 4 for r in read_metrics(tmp_path))


def test_damaged_checkpoint_falls_back_and_says_so(reference, tmp_path, capfd):
    shutil.copytree(reference[0], tmp_path, dirs_exist_ok=True)
    state_dir = tmp_path / "checkpoints" / "8" / "state"
    for path in state_dir.rglob("*"):
        if path.is_file():
            path.write_bytes(b"garbage")
    summary = run_training(ToyTask(), CFG, tmp_path, verbose=False)
    err = capfd.readouterr().err
    assert "checkpoint step 8" in err and "damaged" in err and "step 4" in err
    assert summary["resumed_from"] == 4
    assert _losses(tmp_path) == _losses(reference[0])


def test_all_checkpoints_damaged_is_an_error_not_a_restart(reference, tmp_path):
    shutil.copytree(reference[0], tmp_path, dirs_exist_ok=True)
    for step in ("4", "8"):
        shutil.rmtree(tmp_path / "checkpoints" / step / "state")
    with pytest.raises(RunError, match="no checkpoint .* can be read"):
        run_training(ToyTask(), CFG, tmp_path, verbose=False)


def test_foreign_files_in_checkpoint_dir_are_not_overwritten(tmp_path):
    (tmp_path / "checkpoints" / "notes").mkdir(parents=True)
    with pytest.raises(RunError, match="no readable checkpoint"):
        run_training(ToyTask(), CFG, tmp_path, verbose=False)


def test_checkpoint_meta_holds_config_and_rng_seed(reference):
    meta_dir = reference[0] / "checkpoints" / "8" / "meta"
    meta = json.loads(next(p for p in meta_dir.rglob("*") if p.is_file()).read_text())
    assert meta["step"] == 8 and meta["seed"] == CFG.seed and meta["train"]["steps"] == 8
    assert meta["schedule_steps"] == 8


# ----------------------------------------------------------------------------- never save broken


def test_finite_loss_with_nan_gradient_stops_before_the_checkpoint(reference, tmp_path):
    # Row 60 is in batch 7 (rows 56-63): step 8, the last step, which also checkpoints. Its loss
    # is finite but its gradient is NaN (0 * sqrt'(0)); the step-8 checkpoint must not be written.
    task = ToyTask(nan_grad_at_row=60)
    with pytest.raises(
        RunError,
        match=r"non-finite gradient norm \(nan\) with a finite loss at step 8; the last good "
        r"checkpoint \(step 4\) is kept.*learning_rate=0.0003.*it resumes from step 4",
    ):
        run_training(task, CFG, tmp_path, verbose=False)
    assert [int(p.name) for p in (tmp_path / "checkpoints").iterdir()] == [4]
    # The kept checkpoint resumes: with clean data the run ends as the reference did.
    summary = run_training(ToyTask(), CFG, tmp_path, verbose=False)
    assert summary["resumed_from"] == 4
    assert _losses(tmp_path) == _losses(reference[0])


def test_nan_gradient_task_has_a_finite_loss_and_nan_gradient():
    """The poisoned task itself: what the test above relies on, checked directly."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    task = ToyTask(nan_grad_at_row=3)
    model = task.build_model(nnx.Rngs(params=jax.random.key(0)))
    batch = {k: jnp.asarray(v) for k, v in next(task.train_iterator(8, 0)).items()}
    loss = nnx.value_and_grad(lambda m: task.loss(m, batch), has_aux=True)
    (value, _), grads = nnx.jit(loss)(model)
    assert jnp.isfinite(value)
    assert not all(jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads))


# ----------------------------------------------------------------------------- schedule on resume


class _EightStepSchedule(ToyTask):
    """A task-supplied optimizer: the loop's AdamW, but on a schedule of 8 steps whatever steps."""

    def optimizer(self, cfg, schedule):
        from jaxlab.core.optim import make_optimizer, make_schedule

        del schedule
        return make_optimizer(cfg, schedule=make_schedule(cfg, 8))


def test_extended_run_keeps_its_schedule_and_says_so(reference, tmp_path, capsys):
    shutil.copytree(reference[0], tmp_path / "extended")
    longer = dataclasses.replace(CFG, steps=12)
    summary = run_training(ToyTask(), longer, tmp_path / "extended")
    out = capsys.readouterr().out
    assert "schedule keeps its length of 8 steps; steps 9-12 run at its final learning rate" in out
    assert summary["resumed_from"] == 8 and summary["schedule_steps"] == 8
    rows = read_metrics(tmp_path / "extended")
    want = make_schedule(CFG)  # the original 8-step schedule
    for row in rows:
        assert row["learning_rate"] == pytest.approx(float(want(row["step"] - 1)), rel=1e-6)
    assert rows[-1]["learning_rate"] == pytest.approx(CFG.learning_rate * CFG.min_lr_ratio)
    # The optimizer used it too: a fresh 12-step run whose optimizer has the 8-step schedule
    # trains exactly the same steps.
    run_training(_EightStepSchedule(), longer, tmp_path / "fresh", verbose=False)
    drop_lr = lambda rs: [{k: v for k, v in r.items() if k != "learning_rate"} for r in rs]  # noqa: E731
    assert drop_lr(_losses(tmp_path / "extended")) == drop_lr(_losses(tmp_path / "fresh"))
    # A program handed over for the 12 steps is not the run's: the loop builds its own.
    shutil.copytree(reference[0], tmp_path / "handed")
    task = ToyTask()
    run_training(task, longer, tmp_path / "handed", program=_program(task, longer), verbose=False)
    assert _losses(tmp_path / "handed") == _losses(tmp_path / "extended")


def test_steps_below_the_checkpoint_are_refused(reference, tmp_path):
    shutil.copytree(reference[0], tmp_path, dirs_exist_ok=True)
    with pytest.raises(ConfigError, match=r"train.steps=6 is below step 8, which the run in"):
        run_training(ToyTask(), dataclasses.replace(CFG, steps=6), tmp_path, verbose=False)
    assert _losses(tmp_path) == _losses(reference[0])  # nothing was touched


def test_a_warmup_longer_than_the_run_is_refused_when_the_config_is_built():
    with pytest.raises(
        ConfigError,
        match=r"^train.warmup_steps=9 is above train.steps=8: the run would end before its "
        r"warmup; set train.warmup_steps <= 8$",
    ):
        dataclasses.replace(CFG, warmup_steps=9)
    # As long as the run is allowed: the rate rises over every step and peaks at the last one.
    whole = make_schedule(dataclasses.replace(CFG, warmup_steps=8))
    rates = [float(whole(step)) for step in range(8)]
    assert rates == sorted(rates) and rates[-1] == pytest.approx(CFG.learning_rate)


def test_a_warmup_beyond_the_schedule_of_a_resumed_run_is_refused(reference, tmp_path):
    # Raising train.steps on resume keeps the 8-step schedule, so a 10-step warmup that the new
    # 12 steps would allow cannot fit it.
    shutil.copytree(reference[0], tmp_path, dirs_exist_ok=True)
    longer = dataclasses.replace(CFG, steps=12, warmup_steps=10)
    with pytest.raises(ConfigError) as err:
        run_training(ToyTask(), longer, tmp_path, verbose=False)
    assert str(err.value) == (
        "train.warmup_steps=10 is above the 8 steps of this run's learning-rate schedule (a "
        "resumed run keeps the schedule length of the run that started it, whatever train.steps "
        "says); set train.warmup_steps <= 8"
    )
    assert _losses(tmp_path) == _losses(reference[0])  # nothing was touched


def test_the_eval_row_is_the_mean_of_the_tasks_loss_over_the_eval_batches(tmp_path):
    """Checked against the task's loss of the restored final model, batch by batch (three batches:
    the loop reads each result after dispatching the next one)."""
    from jaxlab.core.checkpoint import Checkpointer
    from jaxlab.core.optim import make_optimizer
    from jaxlab.core.step import create_state, merge_state

    cfg = dataclasses.replace(CFG, steps=4, eval_batches=3)
    task = ToyTask()
    run_training(task, cfg, tmp_path, verbose=False)
    graphdef, abstract = jax.eval_shape(
        lambda k: create_state(task, make_optimizer(cfg), k), jax.random.key(0)
    )
    ckpt = Checkpointer(tmp_path / "checkpoints")
    try:
        restored = ckpt.restore(abstract, task.train_iterator(cfg.batch_size, 0))
    finally:
        ckpt.close()
    model = merge_state(graphdef, restored.state).model
    batches = task.eval_batches(cfg.batch_size, cfg.eval_batches)
    assert len(batches) == 3
    want = np.mean([float(task.loss(model, b)[1]["loss"]) for b in batches])
    got = read_metrics(tmp_path)[-1]["eval_loss"]
    assert got == pytest.approx(want, rel=1e-6)
