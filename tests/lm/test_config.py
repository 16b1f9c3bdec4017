"""The config every LM shares: string choices and linear options fail when the config is built, the
``--set model.*`` keys reach them, and the loss coefficient is the task's, not the model's."""

import dataclasses

import pytest

from jaxlab.core.config import apply_overrides
from jaxlab.core.errors import ConfigError
from jaxlab.lm.config import LMConfig
from jaxlab.lm.task import LMTask
from jaxlab.lm.transformer import TransformerConfig
from jaxlab.methods.rmt import RMTConfig

CONFIGS = [TransformerConfig, RMTConfig]


@dataclasses.dataclass(frozen=True)
class _Experiment:
    model: LMConfig


def test_the_common_fields_live_in_one_base():
    common = {f.name for f in dataclasses.fields(LMConfig)}
    assert {"vocab_size", "d_ff", "attention_impl", "matmul_impl", "linear", "dtype"} <= common
    for cls in CONFIGS:
        assert issubclass(cls, LMConfig)
        assert "z_loss" not in {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize(
    "field, value",
    [
        ("attention_impl", "flash"),
        ("matmul_impl", "cublas"),
        ("linear", "lowrank"),
        ("positions", "rope"),
        ("norm", "batchnorm"),
        ("dtype", "float16"),
    ],
)
def test_bad_choices_fail_when_the_config_is_built(cls, field, value):
    with pytest.raises(ConfigError, match=rf"model.{field}='{value}' is not an option"):
        cls(**{field: value})


@pytest.mark.parametrize("cls", CONFIGS)
def test_linear_options_are_checked_against_the_models_shapes(cls):
    with pytest.raises(ConfigError, match=r"model.linear='low_rank': model.linear_rank=0 must"):
        cls(linear="low_rank")
    with pytest.raises(ConfigError, match=r"model.linear_mlr_ranks=\(2, 2, 2, 2, 2, 2, 2, 2, 2,"):
        cls(linear="mlr", linear_mlr_ranks=(2,) * 12)  # 2048 blocks divide no width here
    cls(linear="btt")  # the defaults are valid for every kind but the ranked ones


@pytest.mark.parametrize("cls", CONFIGS)
def test_set_keys_reach_the_linear_options(cls):
    cfg = apply_overrides(
        _Experiment(cls()), {"model.linear": "mlr", "model.linear_mlr_ranks": "8,4"}
    )
    assert cfg.model.linear == "mlr" and cfg.model.linear_mlr_ranks == (8, 4)
    spec = cfg.model.linear_factory()
    assert (spec.kind, spec.mlr_ranks, spec.dtype) == ("mlr", (8, 4), cfg.model.dtype)
    with pytest.raises(ConfigError, match="unknown config key 'model.z_loss'"):
        apply_overrides(_Experiment(cls()), {"model.z_loss": "1e-4"})


def test_z_loss_is_checked_by_the_task():
    with pytest.raises(ConfigError, match="z_loss must be >= 0"):
        LMTask(build=None, seq_len=16, z_loss=-1.0)


@pytest.mark.parametrize(
    "linear",
    [
        dict(linear="dense"),
        dict(linear="low_rank", linear_rank=4),
        dict(linear="btt", linear_btt_rank=2),
        dict(linear="mlr", linear_mlr_ranks=(4, 2, 2)),
    ],
    ids=lambda f: f["linear"],
)
def test_flops_per_token_follow_the_maps_as_built(linear):
    """A layer's projections and MLP cost twice the parameters the factory builds for them."""
    from flax import nnx

    from jaxlab.lm.transformer import Transformer
    from jaxlab.nn.layers import count_params

    cfg = TransformerConfig(
        vocab_size=16, seq_len=8, num_layers=1, d_model=48, num_heads=2, d_ff=96, **linear
    )
    block = Transformer(cfg, rngs=nnx.Rngs(0)).blocks[0]
    attn = sum(count_params(m) for m in (block.attn.q, block.attn.k, block.attn.v, block.attn.out))
    proj, mlp, _ = cfg.matrix_flops()
    assert (proj, mlp) == (2 * attn, 2 * count_params(block.mlp))
