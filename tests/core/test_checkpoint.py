"""Damaged checkpoints in a multi-process run: only the primary process moves them aside."""

import shutil

import pytest

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.testing.toy import ToyTask

CFG = TrainConfig(
    steps=4, batch_size=8, checkpoint_every=2, eval_every=4, log_every=2, tensorboard=False
)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A finished toy run whose newest checkpoint (step 4) is damaged."""
    workdir = tmp_path_factory.mktemp("run")
    run_training(ToyTask(), CFG, workdir, verbose=False)
    for path in (workdir / "checkpoints" / "4" / "state").rglob("*"):
        if path.is_file():
            path.write_bytes(b"garbage")
    return workdir


def _restore(workdir, **kw):
    """Restores like the loop does, with the Checkpointer options ``kw``."""
    import jax

    from jaxlab.core.loop import create_state
    from jaxlab.core.optim import make_optimizer

    task = ToyTask()
    _, abstract = jax.eval_shape(
        lambda k: create_state(task, make_optimizer(CFG), k), jax.random.key(0)
    )
    ckpt = Checkpointer(workdir / "checkpoints", **kw)
    try:
        return ckpt.restore(abstract, task.train_iterator(CFG.batch_size, 0)), ckpt.steps()
    finally:
        ckpt.close()


def test_other_processes_never_rename_and_wait_for_the_primary(damaged, tmp_path):
    shutil.copytree(damaged, tmp_path, dirs_exist_ok=True)
    calls = []
    restored, steps = _restore(tmp_path, primary=False, barrier=calls.append)
    assert restored.step == 2 and restored.fell_back_from == (4,)
    assert calls == ["jaxlab_damaged_checkpoints_moved"]
    assert (tmp_path / "checkpoints" / "4").exists()  # left for the primary process
    assert not list(tmp_path.glob("damaged-checkpoint-*"))


def test_the_listing_is_reloaded_after_the_barrier(damaged, tmp_path):
    """A non-primary process sees the primary's rename once the barrier returns."""
    shutil.copytree(damaged, tmp_path, dirs_exist_ok=True)

    def primary_renames_meanwhile(name):
        (tmp_path / "checkpoints" / "4").rename(tmp_path / "damaged-checkpoint-4")

    restored, steps = _restore(tmp_path, primary=False, barrier=primary_renames_meanwhile)
    assert restored.step == 2 and steps == [2]


def test_the_primary_process_moves_damaged_steps_aside(damaged, tmp_path):
    shutil.copytree(damaged, tmp_path, dirs_exist_ok=True)
    calls = []
    restored, steps = _restore(tmp_path, primary=True, barrier=calls.append)
    assert restored.step == 2 and steps == [2] and len(calls) == 1
    assert (tmp_path / "damaged-checkpoint-4").is_dir()
