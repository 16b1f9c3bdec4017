"""Kill and resume across SST's redraws and re-SVDs (and ReLoRA*'s merges, GaLore's refreshes)
ends with the same metrics as an uninterrupted run of the shared loop.

Same pattern as ``tests/core/test_task_extensions.py``: the step-8 and step-9 checkpoints of a
finished 9-step run are deleted (as if killed after step 4's), the run is resumed and every logged
row must equal the uninterrupted run's. With ``resample_every=3`` and ``round_redraws=2`` the
resumed part crosses a re-SVD (step 6) and a plain redraw (step 9); ReLoRA* merges at steps 4 and
8; GaLore refreshes its projectors at steps 0, 3 and 6.
"""

import dataclasses
import shutil

import pytest

from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import read_metrics
from jaxlab.methods.sst import LowRankTask, SSTConfig
from jaxlab.testing.toy import ToyTask

CFG = TrainConfig(
    steps=9,
    batch_size=8,
    learning_rate=0.05,
    warmup_steps=2,
    checkpoint_every=4,
    eval_every=3,
    log_every=1,
    eval_batches=2,
    tensorboard=False,
)
SST = SSTConfig(
    rank=2,
    resample_every=3,
    iteration_warmup=2,
    round_redraws=2,
    relora_every=4,
    relora_warmup=2,
    galore_every=3,
)


def _task(method):
    return LowRankTask(ToyTask(hidden=16), dataclasses.replace(SST, method=method))


def _rows(workdir):
    return [{k: v for k, v in r.items() if not k.endswith("per_second")} for r in
            read_metrics(workdir)]  # fmt: skip


@pytest.mark.parametrize(
    "method", ["sst", "relora", pytest.param("galore", marks=pytest.mark.slow)]
)
def test_kill_and_resume_across_hooks_gives_the_same_metrics(method, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_training(_task(method), CFG, whole, verbose=False)
    shutil.copytree(whole, cut)
    for step in ("8", "9"):
        shutil.rmtree(cut / "checkpoints" / step)
    summary = run_training(_task(method), CFG, cut, verbose=False)
    assert summary["resumed_from"] == 4
    rows = _rows(whole)
    assert [r["step"] for r in rows] == list(range(1, 10))
    assert _rows(cut) == rows
