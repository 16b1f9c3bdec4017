"""The learning-rate grid (one rate per method, through the seed sweep) and the deep tanh
teacher of ``sst_mlp``'s ``deep`` preset."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import RunError
from jaxlab.core.sweep import Run
from jaxlab.methods.sst.optim import galore_adamw
from jaxlab.methods.sst.teacher import TanhMLP, TeacherStudentTask
from jaxlab.methods.sst.tuning import choose_rates, method_rates

# A fake training: the score is a bowl in log(rate) whose bottom depends on the method; at the
# rate 1.0 every method "diverges" (a non-finite result, which core.sweep refuses).
BOTTOM = {"full": 1e-3, "sst": 1e-2}


def _spec(calls):
    def spec(method, rate, seed):
        def train(workdir):
            calls.append((method, rate, seed))
            loss = math.nan if rate == 1.0 else (math.log10(rate / BOTTOM[method])) ** 2
            return {"loss": loss}

        return Run({"method": method, "rate": rate}, train)

    return spec


def test_each_method_gets_its_own_best_rate_and_diverged_rates_score_inf(tmp_path):
    calls = []
    rates = (1e-3, 1e-2, 1.0)
    best, table = choose_rates(
        tmp_path, ("full", "sst"), rates, 7, _spec(calls), lambda r: r["loss"]
    )
    assert best == {"full": 1e-3, "sst": 1e-2}
    assert table["full"]["1"] == math.inf and table["sst"]["0.001"] == pytest.approx(1.0)
    assert sorted(calls) == sorted((m, r, 7) for m in ("full", "sst") for r in rates)
    # every point is a core.sweep run: finished ones are reused, the diverged one runs again
    record = json.loads((tmp_path / "sst_lr0.01_seed7" / "run.json").read_text())
    assert record["result"] == {"loss": 0.0}
    calls.clear()
    assert choose_rates(tmp_path, ("full",), rates, 7, _spec(calls), lambda r: r["loss"])[0] == {
        "full": 1e-3
    }
    assert calls == [("full", 1.0, 7)]


def test_a_method_that_diverges_at_every_rate_is_one_error(tmp_path):
    with pytest.raises(RunError, match="full diverged at every learning rate"):
        choose_rates(tmp_path, ("full",), (1.0,), 0, _spec([]), lambda r: r["loss"])


def test_tanh_mlp_against_numpy():
    widths = (3, 5, 4, 2)
    model = TanhMLP(widths, rngs=nnx.Rngs(params=jax.random.key(0)))
    x = np.random.default_rng(0).standard_normal((6, 3))
    h = x
    for i, layer in enumerate(model.maps):
        w = np.asarray(layer.kernel[...], np.float64)
        assert w.shape == (widths[i], widths[i + 1])
        h = h @ w if i == len(widths) - 2 else np.tanh(h @ w)
    np.testing.assert_allclose(model(jnp.asarray(x, jnp.float32)), h, rtol=1e-5, atol=1e-6)


def test_deep_teacher_task_draws_inputs_and_targets_of_its_widths():
    task = TeacherStudentTask(widths=(8, 16, 16, 4), rows=32, eval_rows=8)
    assert task.x.shape == (40, 8) and task.y.shape == (40, 4) and task.target_var > 0
    with pytest.raises(Exception, match=r"widths=\(8,\) must be \(\) or at least two"):
        TeacherStudentTask(widths=(8,), rows=32, eval_rows=8)


def test_galore_takes_the_rates_divided_by_its_scale_the_same_adam_step():
    """GaLore's update is α·lr·P adam(Pᵀ G) (Zhao et al., ICML 2024, Algorithm 2): at α = 0.25 and
    rate lr / α its steps are those of α = 1 at rate lr for a projected matrix without weight
    decay (sst_mlp's students: every map projected, no decay)."""
    assert method_rates((1e-3, 3e-3), "galore", 0.25) == pytest.approx((4e-3, 1.2e-2), rel=1e-12)
    for method in ("full", "sst", "lora", "relora"):
        assert method_rates((1e-3, 3e-3), method, 0.25) == (1e-3, 3e-3)
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.normal(size=(6, 9)), jnp.float32)}
    grads = [{"w": jnp.asarray(rng.normal(size=(6, 9)), jnp.float32)} for _ in range(5)]
    lr = method_rates((3e-3,), "galore", 0.25)[0]
    paper = galore_adamw(lr, rank=2, update_every=3, scale=0.25, weight_decay=0.0)
    unit = galore_adamw(3e-3, rank=2, update_every=3, scale=1.0, weight_decay=0.0)
    out = []
    for tx in (paper, unit):
        p, state = params, tx.init(params)
        for g in grads:  # across a projector refresh (every 3 steps)
            u, state = tx.update(g, state, p)
            p = jax.tree.map(lambda a, b: a + b, p, u)
        out.append(p["w"])
    np.testing.assert_allclose(out[0], out[1], rtol=1e-6, atol=1e-7)
    assert np.abs(np.asarray(out[0] - params["w"])).max() > 1e-3  # the steps are not zero
