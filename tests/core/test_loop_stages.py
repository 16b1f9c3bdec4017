"""The loop's stages alone, on host values and stand-ins: the finiteness drain and the log / eval /
checkpoint stage, without a model, a mesh or a compiled step (the whole loop: ``test_loop.py``)."""

import numpy as np
import pytest

from jaxlab.core import loop
from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import RunError
from jaxlab.core.step import STATE_FINITE, TrainProgram

CFG = TrainConfig(
    steps=11, batch_size=8, warmup_steps=2, log_every=2, eval_every=5, checkpoint_every=3
)


class FakeCheckpointer:
    """Records what the stages ask of the checkpointer; ``saved`` must stay empty on divergence."""

    def __init__(self, steps=()):
        self.on_disk, self.saved, self.waited = list(steps), [], []

    def steps(self):
        return self.on_disk

    def save(self, step, state, iterator, meta, *, wait=True):
        self.saved.append((step, meta))
        self.waited.append(wait)


def _pending(step, loss, grad_norm=1.0, finite=True, hooks=()):
    metrics = {"loss": np.float32(loss), "grad_norm": np.float32(grad_norm)}
    return (step, {**metrics, STATE_FINITE: np.bool_(finite)}, list(hooks))


def _progress(*pending):
    """Progress after the last of ``pending``, none of them read back yet."""
    window = {"sum": {}, "count": 0}
    progress = loop._Progress(None, pending[-1][0], window, last_row={}, last_eval={})
    progress.pending, progress.steps_in_window = list(pending), len(pending)
    return progress


def _run(ckpt, rows):
    """A ``_Run`` of stand-ins: no eval batches, a constant schedule; hook rows go to ``rows``."""
    setup = loop._Setup(
        build=None,
        program=None,
        init_key=None,
        step_key=None,
        num_params=0,
        unit="examples",
        units_per_step=8,
        say=lambda *a, **k: None,
    )
    program = TrainProgram(lambda step: 0.5, None, None, None, None, None, ())
    hooks = [lambda step, row: rows.append((step, dict(row)))]
    return loop._Run(CFG, None, None, setup, program, 11, None, ckpt, None, None, [], hooks, None)


def test_drain_adds_finite_steps_to_the_window_and_clears_them():
    progress = _progress(_pending(1, 2.0, 4.0), _pending(2, 1.0, 2.0))
    loop._drain(progress, FakeCheckpointer(), CFG)
    assert progress.pending == []
    assert progress.window == {"sum": {"loss": 3.0, "grad_norm": 6.0}, "count": 2}


@pytest.mark.parametrize(
    "bad, what",
    [
        (_pending(3, float("nan")), r"loss \(nan\)"),
        (_pending(3, 1.0, float("inf")), r"gradient norm \(inf\) with a finite loss"),
        (_pending(3, 1.0, finite=False), r"parameters after the update \(finite loss and"),
        (_pending(3, 1.0, hooks=[("spectral", np.bool_(False))]), "train state after spectral"),
    ],
)
def test_drain_stops_on_a_non_finite_step_naming_it_and_the_kept_checkpoint(bad, what):
    ckpt = FakeCheckpointer(steps=[2])
    with pytest.raises(RunError, match=f"non-finite {what}.* at step 3; .*\\(step 2\\) is kept"):
        loop._drain(_progress(_pending(1, 1.0), _pending(2, 1.0), bad), ckpt, CFG)
    assert ckpt.saved == []


def test_due_at_each_multiple_and_everything_at_the_last_step():
    # log every 2, eval every 5, checkpoint every 3; step 11, the last, is a multiple of none.
    due = {step: tuple(loop._due(step, CFG)) for step in range(1, 12)}
    assert due[1] == due[7] == (False, False, False)
    assert due[2] == due[4] == due[8] == (True, False, False)
    assert due[3] == due[9] == (False, False, True)
    assert due[5] == (False, True, False)
    assert due[6] == (True, False, True)
    assert due[10] == (True, True, False)
    assert due[11] == (True, True, True)


def test_nothing_due_reads_nothing_back():
    progress = _progress(_pending(7, float("nan")))  # would stop the run if it were read
    ckpt, rows = FakeCheckpointer(), []
    loop._log_eval_checkpoint(_run(ckpt, rows), progress)
    assert len(progress.pending) == 1 and rows == [] and ckpt.saved == []


def test_a_checkpoint_step_logs_the_window_then_saves_it_empty():
    progress = _progress(_pending(5, 3.0, 1.0), _pending(6, 1.0, 1.0))
    ckpt, rows = FakeCheckpointer(), []
    loop._log_eval_checkpoint(_run(ckpt, rows), progress)
    row = {"loss": 2.0, "grad_norm": 1.0, "learning_rate": 0.5, "examples_seen": 48}
    assert rows == [(6, row)] and progress.last_row == row
    [(step, meta)] = ckpt.saved
    assert step == 6 and meta["window"] == {"sum": {}, "count": 0} and meta["last_row"] == row
    assert progress.steps_in_window == 0


def test_a_checkpoint_only_step_saves_the_window_so_far_and_logs_nothing():
    # What a resume from step 3 restores: the step-3 loss goes into the step-4 row.
    progress = _progress(_pending(3, 3.0, 1.0))
    ckpt, rows = FakeCheckpointer(), []
    loop._log_eval_checkpoint(_run(ckpt, rows), progress)
    assert rows == [] and progress.pending == []
    [(step, meta)] = ckpt.saved
    assert step == 3 and meta["window"] == {"sum": {"loss": 3.0, "grad_norm": 1.0}, "count": 1}


def test_only_the_last_steps_save_is_left_to_finish_after_the_run():
    # No step follows the last one to donate its state: its save goes on while the run ends.
    ckpt, rows = FakeCheckpointer(), []
    loop._log_eval_checkpoint(_run(ckpt, rows), _progress(_pending(3, 3.0)))
    loop._log_eval_checkpoint(_run(ckpt, rows), _progress(_pending(CFG.steps, 3.0)))
    assert [step for step, _ in ckpt.saved] == [3, CFG.steps] and ckpt.waited == [True, False]


def test_a_diverged_step_on_a_checkpoint_step_saves_nothing():
    progress = _progress(_pending(5, 1.0), _pending(6, float("nan")))
    ckpt, rows = FakeCheckpointer(), []
    with pytest.raises(RunError, match=r"at step 6; no checkpoint was written"):
        loop._log_eval_checkpoint(_run(ckpt, rows), progress)
    assert ckpt.saved == [] and rows == []
