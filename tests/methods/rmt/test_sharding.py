"""The RMT's train step on a (2, 4) data x fsdp mesh gives the single-device losses."""

import pytest

from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import MeshConfig
from jaxlab.core.metrics import read_metrics
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.nn.lm_task import LMTask

MODEL = RMTConfig(seq_len=16, num_layers=2, rank=4, d_key=8, d_value=8, d_ff=64)
TRAIN = TrainConfig(
    steps=2,
    batch_size=8,
    warmup_steps=1,
    log_every=1,
    eval_every=2,
    checkpoint_every=2,
    eval_batches=1,
    tensorboard=False,
)


def test_sharded_rmt_step_equals_single_device(tmp_path):
    task = LMTask(build=lambda rngs: RMT(MODEL, rngs=rngs), seq_len=MODEL.seq_len)
    losses = {}
    for name, mesh in (("one", MeshConfig(1, 1, 1)), ("mesh", MeshConfig(data=2, fsdp=4))):
        run_training(task, TRAIN, tmp_path / name, mesh_cfg=mesh, verbose=False)
        losses[name] = [(r["loss"], r["grad_norm"]) for r in read_metrics(tmp_path / name)]
    for (loss, gnorm), (ref, ref_g) in zip(losses["mesh"], losses["one"], strict=True):
        assert loss == pytest.approx(ref, abs=1e-5)
        assert gnorm == pytest.approx(ref_g, rel=1e-4)
