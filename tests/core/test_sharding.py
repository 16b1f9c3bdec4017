"""Sharded training on a (2, 4) CPU mesh gives the single-device losses; parameters are sharded."""

import jax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import AxisRules, MeshConfig, make_mesh, state_shardings
from jaxlab.core.metrics import read_metrics
from jaxlab.nn.lm_task import LMTask
from jaxlab.nn.transformer import Transformer, TransformerConfig

MODEL = TransformerConfig(seq_len=16, num_layers=2, d_model=32, num_heads=4, num_kv_heads=2)
TRAIN = TrainConfig(
    steps=3,
    batch_size=8,
    warmup_steps=1,
    log_every=1,
    eval_every=3,
    checkpoint_every=3,
    eval_batches=1,
    tensorboard=False,
)


@pytest.fixture(scope="module")
def task():
    return LMTask(build=lambda rngs: Transformer(MODEL, rngs=rngs), seq_len=MODEL.seq_len)


def _losses(task, mesh_cfg, workdir):
    run_training(task, TRAIN, workdir, mesh_cfg=mesh_cfg, verbose=False)
    return [(r["loss"], r["grad_norm"]) for r in read_metrics(workdir)]


@pytest.fixture(scope="module")
def single_device(task, tmp_path_factory):
    return _losses(task, MeshConfig(data=1, fsdp=1, tensor=1), tmp_path_factory.mktemp("one"))


@pytest.mark.parametrize("shape", [(2, 4, 1), (2, 2, 2)], ids=["data2-fsdp4", "data2-fsdp2-tp2"])
def test_sharded_step_equals_single_device(task, single_device, tmp_path, shape):
    sharded = _losses(task, MeshConfig(*shape), tmp_path)
    assert len(sharded) == len(single_device) == 3
    for (loss, gnorm), (ref_loss, ref_gnorm) in zip(sharded, single_device, strict=True):
        assert loss == pytest.approx(ref_loss, abs=1e-5)
        assert gnorm == pytest.approx(ref_gnorm, rel=1e-4)


def test_parameters_follow_the_logical_rules():
    mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
    model = nnx.eval_shape(lambda: Transformer(MODEL, rngs=nnx.Rngs(0)))
    shardings = state_shardings(nnx.state(model), mesh, AxisRules())
    assert shardings["embed"]["tokens"]["embedding"].spec == P("tensor", "fsdp")
    assert shardings["blocks"][0]["mlp"]["up"]["kernel"].spec == P("fsdp", "tensor")
    assert shardings["blocks"][0]["attn"]["out"]["kernel"].spec == P("tensor", "fsdp")


def test_mesh_shape_errors_are_config_errors():
    assert make_mesh(MeshConfig()).devices.shape == (jax.device_count(), 1, 1)
    with pytest.raises(ConfigError, match="do not divide"):
        make_mesh(MeshConfig(data=-1, fsdp=3))
    with pytest.raises(ConfigError, match="at most one"):
        MeshConfig(data=-1, fsdp=-1)
