"""µP learning-rate groups: multipliers from fan-in ratios, and the optimizer applies them."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.optim import make_optimizer, param_path
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.methods.rmt.mup import mup_lr_groups

BASE = RMTConfig(seq_len=8, num_layers=1, rank=4, d_key=8, d_value=8, d_ff=64)


def _multipliers(cfg):
    labels, mult = mup_lr_groups(cfg)
    params = nnx.state(nnx.eval_shape(lambda: RMT(cfg, rngs=nnx.Rngs(0))), nnx.Param)
    return {
        param_path(p): mult[name] for p, name in jax.tree_util.tree_leaves_with_path(labels(params))
    }


def test_base_model_keeps_every_rate():
    assert set(_multipliers(dataclasses.replace(BASE, mup=True)).values()) == {1.0}


def test_wider_model_scales_hidden_and_output_rates_by_fan_in():
    wide = dataclasses.replace(BASE, rank=8, d_ff=128, mup=True, mup_base_rank=4, mup_base_d_ff=64)
    m = _multipliers(wide)
    by_name = {"/".join(p): v for p, v in m.items()}
    assert by_name["layers/0/ff/mlp/up/kernel"] == 0.5  # fan-in R*Dv doubled
    assert by_name["layers/0/ff/mlp/down/kernel"] == 0.5  # fan-in d_ff doubled
    assert by_name["unembed/kernel"] == 0.5
    assert by_name["layers/0/attn/write"] == 0.5  # storage keys read over R
    assert by_name["layers/0/attn/read_qkv"] == 1.0  # retrieval keys read over Dk (unchanged)
    assert by_name["embed/tokens/embedding"] == 1.0  # input weights: Theta(1)
    assert by_name["final_norm/scale"] == 1.0  # vectors: Theta(1)


def test_optimizer_applies_group_multipliers():
    wide = dataclasses.replace(BASE, rank=8, d_ff=128, mup=True, mup_base_rank=4, mup_base_d_ff=64)
    model = RMT(wide, rngs=nnx.Rngs(0))
    train = TrainConfig(learning_rate=1e-2, warmup_steps=0, weight_decay=0.0, grad_clip=0.0)
    opt = nnx.Optimizer(model, make_optimizer(train, lr_groups=mup_lr_groups(wide)), wrt=nnx.Param)
    before = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
    opt.update(model, jax.tree.map(jnp.ones_like, before))  # Adam's first step moves by ~lr
    after = nnx.state(model, nnx.Param)
    up = (
        after["layers"][0]["ff"]["mlp"]["up"]["kernel"][...]
        - before["layers"][0]["ff"]["mlp"]["up"]["kernel"][...]
    )
    emb = after["embed"]["tokens"]["embedding"][...] - before["embed"]["tokens"]["embedding"][...]
    assert float(jnp.abs(up).max()) == pytest.approx(0.5e-2, rel=1e-3)
    assert float(jnp.abs(emb).max()) == pytest.approx(1e-2, rel=1e-3)


def test_training_with_mup_groups_on_a_mesh(tmp_path):
    from jaxlab.core.loop import run_training
    from jaxlab.core.mesh import MeshConfig
    from jaxlab.lm.task import LMTask

    wide = dataclasses.replace(BASE, rank=8, d_ff=128, mup=True, mup_base_rank=4, mup_base_d_ff=64)
    task = LMTask(build=lambda rngs: RMT(wide, rngs=rngs), seq_len=wide.seq_len)
    train = TrainConfig(
        steps=2,
        batch_size=8,
        warmup_steps=1,
        log_every=1,
        eval_every=2,
        checkpoint_every=2,
        eval_batches=1,
        tensorboard=False,
    )
    summary = run_training(
        task,
        train,
        tmp_path,
        mesh_cfg=MeshConfig(data=2, fsdp=4),
        lr_groups=mup_lr_groups(wide),
        verbose=False,
    )
    assert summary["final_step"] == 2 and jnp.isfinite(summary["eval"]["eval_loss"])
