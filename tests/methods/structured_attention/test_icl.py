"""In-context regression: the prompt generator, the curriculum, the model's causality, and its
analytic FLOP count against the matrix products of the lowered program."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.core.flops import dot_flops
from jaxlab.data.icl_regression import least_squares_error, regression_batch
from jaxlab.methods.structured_attention.icl_model import ICLConfig, ICLTransformer
from jaxlab.methods.structured_attention.icl_task import ICLRegressionTask, curriculum

CFG = ICLConfig(dim=4, n_points=8, d_model=16, num_layers=1)


def test_prompts_are_deterministic_scaled_and_solvable():
    a, b = regression_batch(0, 3, 256, 8, 16), regression_batch(0, 3, 256, 8, 16)
    np.testing.assert_array_equal(a["xs"], b["xs"])
    assert not np.array_equal(a["xs"], regression_batch(0, 4, 256, 8, 16)["xs"])
    assert abs(float(np.mean(a["ys"] ** 2)) - 1.0) < 0.1  # E[y^2] = 1: the zero predictor's error
    assert least_squares_error(a["xs"], a["ys"]) < 1e-8  # 15 points determine w in 8 dims
    masked = regression_batch(0, 0, 4, 8, 16, active_dims=3)
    assert (masked["xs"][..., 3:] == 0).all() and (masked["xs"][..., :3] != 0).all()


def test_curriculum_rises_in_stages_to_the_full_problem():
    cfg = ICLConfig(dim=8, n_points=16)
    assert curriculum(0, cfg, 100) == (2, 4)
    assert curriculum(50, cfg, 100) == (5, 10)
    assert curriculum(100, cfg, 100) == curriculum(10**6, cfg, 100) == (8, 16)
    assert curriculum(0, cfg, 0) == (8, 16)


@pytest.mark.parametrize("scoring, heads", [("mha", 4), ("btt", 1), ("mlr", 2)])
def test_predictions_see_only_earlier_points_and_flops_match_the_program(scoring, heads):
    cfg = dataclasses.replace(CFG, scoring=scoring, num_heads=heads, mlr_ranks=(3, 2, 1))
    model = ICLTransformer(cfg, rngs=nnx.Rngs(0))
    batch = regression_batch(1, 0, 2, cfg.dim, cfg.n_points)
    xs, ys = jnp.asarray(batch["xs"]), jnp.asarray(batch["ys"])
    # The prediction of y_5 depends on x_1..x_5 and y_1..y_4, not on y_5 or anything later.
    g_x, g_y = jax.grad(lambda x, y: model(x, y)[:, 4].sum(), argnums=(0, 1))(xs, ys)
    assert float(jnp.abs(g_y[:, :4]).min()) > 0 and float(jnp.abs(g_x[:, 4]).min()) > 0
    np.testing.assert_array_equal(g_y[:, 4:], 0.0)
    np.testing.assert_array_equal(g_x[:, 5:], 0.0)
    lowered = jax.jit(lambda x, y: model(x, y)).lower(xs[:1], ys[:1])
    assert dot_flops(lowered) == pytest.approx(model.flops(), rel=1e-9)


def test_task_masks_the_curriculum_points_and_reports_the_last_error():
    task = ICLRegressionTask(CFG, curriculum_steps=10)
    batch = next(task.train_iterator(3, seed=0))
    assert batch["mask"].sum(1).tolist() == [2, 2, 2]  # stage 0: n_points / 4
    model = task.build_model(nnx.Rngs(0))
    ev = task.eval_batches(3, 1)[0]
    assert ev["mask"].all()
    loss, metrics = task.loss(model, {k: jnp.asarray(v) for k, v in ev.items()})
    assert set(metrics) == {"loss", "last_error"} and bool(jnp.isfinite(loss))


def test_bad_configs_fail_when_built():
    with pytest.raises(ConfigError, match="num_heads"):
        ICLConfig(d_model=16, num_heads=3)
    with pytest.raises(ConfigError, match="scoring"):
        ICLConfig(scoring="dense")
    with pytest.raises(ConfigError, match="mlr_ranks"):
        ICLConfig(d_model=12, scoring="mlr", mlr_ranks=(1, 1, 1, 1))
    with pytest.raises(ConfigError, match="LayerNorm"):  # level 0 normalises one number
        ICLConfig(d_model=32, num_heads=8, scoring="mlr", mlr_ranks=(1, 1, 1, 1))
    ICLConfig(d_model=32, num_heads=8, scoring="mlr", mlr_ranks=(1, 1, 1, 1), qk_norm=False)
