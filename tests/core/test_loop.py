"""The training loop on a toy task: determinism, resume, non-finite guard, damaged checkpoints."""

import json
import shutil

import pytest

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import RunError
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import read_metrics
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
    assert "eval_loss" in rows[1] and "tokens_per_second" in rows[0]
    assert summary["final_step"] == 8 and summary["resumed_from"] == 0
    assert sorted(int(p.name) for p in (workdir / "checkpoints").iterdir()) == [4, 8]
    assert rows[-1]["loss"] < rows[0]["loss"]


def test_same_seed_same_metrics(reference, tmp_path):
    run_training(ToyTask(), CFG, tmp_path, verbose=False)
    assert _losses(tmp_path) == _losses(reference[0])


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
