"""The authors' µP recipe (``muPify``, ``src/muP.py``) on the ICL models: every parameter's
learning-rate multiplier and init against their name rules applied to their own model's parameter
list (``authors_mup``), and the task's optimizer applying those rates."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.optim import param_path
from jaxlab.methods.structured_attention.icl_model import ICLConfig, ICLTransformer
from jaxlab.methods.structured_attention.icl_task import ICLRegressionTask
from jaxlab.methods.structured_attention.mup import mup_fan_in, mup_multipliers
from jaxlab.methods.structured_attention.retrieval import RetrievalTask
from tests.methods.structured_attention import authors_mup

# jaxlab path (joined by "/", layer and head/level indices as \d+) -> the authors' name
_NAMES = [
    (r"read_in/kernel", "_read_in.weight"),
    (r"positions", "_backbone.wpe.weight"),
    (r"final_norm/scale", "_backbone.ln_f.weight"),
    (r"read_out/kernel", "_read_out.weight"),
    (r"blocks/(\d+)/norm1/scale", r"_backbone.h.\1.ln_1.weight"),
    (r"blocks/(\d+)/norm2/scale", r"_backbone.h.\1.ln_2.weight"),
    (r"blocks/(\d+)/mlp/up/kernel", r"_backbone.h.\1.mlp.c_fc.weight"),
    (r"blocks/(\d+)/mlp/down/kernel", r"_backbone.h.\1.mlp.c_proj.weight"),
    (r"blocks/(\d+)/attn/v/kernel", r"_backbone.h.\1.attn.c_attn_v.weight"),
    (r"blocks/(\d+)/attn/out/kernel", r"_backbone.h.\1.attn.c_proj.weight"),
    (r"blocks/(\d+)/attn/score/q/kernel", r"_backbone.h.\1.attn.c_attn_q.weight"),
    (r"blocks/(\d+)/attn/score/k/kernel", r"_backbone.h.\1.attn.c_attn_k.weight"),
    (r"blocks/(\d+)/attn/score/q_norm/scale", r"_backbone.h.\1.attn.ln_q.weight"),
    (r"blocks/(\d+)/attn/score/k_norm/scale", r"_backbone.h.\1.attn.ln_k.weight"),
    # every head's BTT core is a slice of their one tensor (same rate, same init)
    (r"blocks/(\d+)/attn/score/maps/\d+/first", r"_backbone.h.\1.attn.bilinear_btt_wk.weight"),
    (r"blocks/(\d+)/attn/score/maps/\d+/second", r"_backbone.h.\1.attn.bilinear_btt_wq.weight"),
    (r"blocks/(\d+)/attn/score/norms/\d+/scale", r"_backbone.h.\1.attn.bilinear_btt_ln_PLPRXT.weight"),  # noqa: E501
    (r"blocks/(\d+)/attn/score/w(q|k)/(\d+)", r"_backbone.h.\1.attn.bilinear_mlr_w\2.\3.weight"),
    (r"blocks/(\d+)/attn/score/norms_(q|k)/(\d+)/scale", r"_backbone.h.\1.attn.bilinear_mlr_ln_w\2.\3.weight"),  # noqa: E501
]  # fmt: skip

CASES = {  # scoring -> their token_mixing_struct
    "mha": "low_rank",
    "btt": "bilinear_BTT",
    "mlr": "bilinear_MLR",
}


def _authors_name(path):
    joined = "/".join(path)
    for pattern, name in _NAMES:
        if re.fullmatch(pattern, joined):
            return re.sub(pattern, name, joined)
    raise AssertionError(f"no authors' name for {joined}")


def _config(scoring, d_model=64, **kw):
    kw = {"parametrization": "mup", **kw}
    return ICLConfig(dim=16, n_points=32, d_model=d_model, num_layers=2, num_heads=8,
                     scoring=scoring, mlr_ranks=(4, 2, 1, 1), rms_cap=True, **kw)  # fmt: skip


def _theirs(cfg):
    shapes = authors_mup.param_shapes(cfg.dim, cfg.d_model, cfg.num_layers, cfg.num_heads,
                                      CASES[cfg.scoring], cfg.mlr_ranks)  # fmt: skip
    return {name: authors_mup.mupify(name, shape) for name, shape in shapes.items()}


@pytest.mark.parametrize("d_model", [64, 128])
@pytest.mark.parametrize("scoring", list(CASES))
def test_learning_rate_multipliers_are_the_authors(scoring, d_model):
    cfg = _config(scoring, d_model)
    theirs = _theirs(cfg)
    ours = mup_multipliers(nnx.eval_shape(lambda: ICLTransformer(cfg, rngs=nnx.Rngs(0))))
    assert {_authors_name(p) for p in ours} == set(theirs)  # every parameter, both ways
    for path, mult in ours.items():
        assert mult == pytest.approx(theirs[_authors_name(path)][1]), "/".join(path)


@pytest.mark.parametrize("scoring", list(CASES))
def test_init_is_the_authors(scoring):
    cfg = _config(scoring)
    theirs = _theirs(cfg)
    model = ICLTransformer(cfg, rngs=nnx.Rngs(3))
    for p, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.Param)):
        path = param_path(p)
        init, value = theirs[_authors_name(path)][0], np.asarray(leaf)
        if init[0] == "zeros":
            assert not value.any(), path
        elif init[0] == "ones":
            np.testing.assert_array_equal(value, 1.0)
        else:  # >= 128 draws each: the sample std within 20%
            assert np.std(value) == pytest.approx(init[1], rel=0.2), path
            assert abs(np.mean(value)) < 0.5 * init[1], path


def test_standard_parametrization_keeps_jaxlab_inits_and_one_rate():
    cfg = _config("btt", parametrization="standard")
    model = ICLTransformer(cfg, rngs=nnx.Rngs(0))
    assert np.std(np.asarray(model.read_in.kernel[...])) == pytest.approx(1.0, rel=0.2)
    assert np.std(np.asarray(model.positions[...])) == pytest.approx(1.0, rel=0.1)
    assert np.asarray(model.read_out.kernel[...]).any()
    assert ICLConfig(parametrization="mup", position_std=0.5).input_stds() == (0.02, 0.5)
    tx = ICLRegressionTask(cfg).optimizer(TrainConfig(), optax.constant_schedule(1e-3))
    assert "inner_states" not in str(tx.init(nnx.state(model, nnx.Param)))  # no groups


@pytest.mark.parametrize("task_cls", [ICLRegressionTask, RetrievalTask])
def test_the_tasks_optimizer_applies_the_authors_rates(task_cls):
    # Adam's first step with eps -> 0 moves every weight by lr * multiplier * sign(g): the rate
    # of each parameter is read off its update and compared with muPify's.
    cfg = _config("mlr" if task_cls is RetrievalTask else "btt")
    if task_cls is RetrievalTask:
        cfg = ICLConfig(**{**cfg.__dict__, "num_layers": 1})
    task = task_cls(cfg)
    model = task.build_model(nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    train = TrainConfig(learning_rate=1e-3, warmup_steps=0, weight_decay=0.0, eps=1e-20,
                        grad_clip=0.0, min_lr_ratio=1.0)  # fmt: skip
    tx = task.optimizer(train, optax.constant_schedule(1e-3))
    grads = jax.tree.map(lambda a: jnp.ones_like(a) * 0.3, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    theirs = _theirs(cfg)
    for p, u in jax.tree_util.tree_leaves_with_path(updates):
        path = param_path(p)
        rate = -float(np.asarray(u).reshape(-1)[0])
        np.testing.assert_allclose(np.asarray(u), -rate, rtol=1e-6)
        # the retrieval model is one block: its attention is block 0's, its norm block 0's ln_1
        if path[0] == "attn":
            path = ("blocks", "0", *path)
        elif path == ("norm", "scale"):
            path = ("blocks", "0", "norm1", "scale")
        want = theirs[_authors_name(path)][1]
        assert rate == pytest.approx(1e-3 * want, rel=1e-5), path


def test_an_unknown_parameter_is_refused():
    with pytest.raises(ConfigError, match="no rule for parameter blocks/0/extra"):
        mup_fan_in(("blocks", "0", "extra"), (4, 4))
