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
    g_x, g_y = jax.jit(jax.grad(lambda x, y: model(x, y)[:, 4].sum(), argnums=(0, 1)))(xs, ys)
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
    loss, metrics = nnx.jit(task.loss)(model, {k: jnp.asarray(v) for k, v in ev.items()})
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


def _np_layernorm(v, scale, eps):
    mu, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
    return (v - mu) / np.sqrt(var + eps) * scale


def _np_gelu(x):  # the tanh GELU of GPT-2
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def test_mha_model_matches_a_float64_numpy_forward():
    """The ICL Transformer in float64 numpy (Kuang et al. 2025, Sec. 5.1, after Garg et al. 2022):
    tokens ``x_1, (y_1, 0..0), x_2, ...``, read-in plus learned positions, pre-norm blocks
    ``h + W_O softmax_causal(c LN(h W_Q^i) . LN(h W_K^i)) (h W_V)^i`` (head i: columns
    ``i E .. (i+1) E`` of each map) and ``h + W_2 gelu(W_1 LN(h))``, a final LayerNorm and a
    read-out at the x tokens; no biases (jaxlab's choice, documented). Only weights are read."""
    cfg = dataclasses.replace(CFG, dim=3, n_points=4, d_model=8, num_layers=2, num_heads=2)
    model = ICLTransformer(cfg, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    norms = [model.final_norm]
    for b in model.blocks:
        norms += [b.norm1, b.norm2, b.attn.score.q_norm, b.attn.score.k_norm]
    for n in norms:  # scales away from one, so that each norm's place matters
        n.scale[...] = jnp.asarray(rng.uniform(0.5, 1.5, n.scale.shape), jnp.float32)
    xs, ys = rng.normal(size=(2, cfg.n_points, cfg.dim)), rng.normal(size=(2, cfg.n_points))
    forward = nnx.jit(lambda m, x, y: m(x, y))  # one program, not op-by-op dispatch
    got = forward(model, jnp.asarray(xs, jnp.float32), jnp.asarray(ys, jnp.float32))

    f64 = lambda a: np.asarray(a[...], np.float64)  # noqa: E731
    B, N, d = xs.shape
    H, E, T = cfg.num_heads, cfg.d_model // cfg.num_heads, 2 * N
    z = np.zeros((B, N, 2, d))
    z[:, :, 0], z[:, :, 1, 0] = xs, ys
    h = z.reshape(B, T, d) @ f64(model.read_in.kernel) + f64(model.positions)[:T]
    causal = np.arange(T)[None, :] <= np.arange(T)[:, None]
    for blk in model.blocks:
        a, s = blk.attn, blk.attn.score
        u = _np_layernorm(h, f64(blk.norm1.scale), 1e-6)
        q = _np_layernorm((u @ f64(s.q.kernel)).reshape(B, T, H, E), f64(s.q_norm.scale), 1e-5)
        k = _np_layernorm((u @ f64(s.k.kernel)).reshape(B, T, H, E), f64(s.k_norm.scale), 1e-5)
        logits = np.where(causal, np.einsum("bqhe,bthe->bhqt", q, k) / np.sqrt(E), -np.inf)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        v = (u @ f64(a.v.kernel)).reshape(B, T, H, E)
        o = np.einsum("bhqt,bthe->bqhe", p, v).reshape(B, T, H * E)
        h = h + o @ f64(a.out.kernel)
        u = _np_layernorm(h, f64(blk.norm2.scale), 1e-6)
        h = h + _np_gelu(u @ f64(blk.mlp.up.kernel)) @ f64(blk.mlp.down.kernel)
    pred = _np_layernorm(h, f64(model.final_norm.scale), 1e-6) @ f64(model.read_out.kernel)
    want = pred[..., 0][:, ::2]  # the prediction of y_i is read at the token of x_i
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
