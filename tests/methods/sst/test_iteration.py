"""SST's iteration schedule (Zhao et al., ICML 2025, App. F): a redraw every T₃ steps, and the
learning rate re-warmed linearly over the first steps of every iteration after the first, through
the optimizer the task really builds and the loop that really runs the hook."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.loop import run_training
from jaxlab.core.task import StateHook
from jaxlab.methods.sst import LowRankTask, SSTConfig
from jaxlab.methods.sst.config import scaled_iteration
from jaxlab.methods.sst.teacher import TeacherStudentTask

T3, WARMUP = 5, 3


def _applied_rates(task, steps, base=0.5):
    """The learning rate each update applies: on a non-spectral array with a constant gradient,
    the column Adam step is exactly 1, so ``-update = rate``."""
    cfg = TrainConfig(grad_clip=0.0, weight_decay=0.0, eps=0.0)
    tx = task.optimizer(cfg, optax.constant_schedule(base))
    params = {"w": jnp.ones((2, 2))}
    grads = {"w": jnp.ones((2, 2))}
    state, rates = tx.init(params), []
    for _ in range(steps):
        updates, state = tx.update(grads, state, params)
        rates.append(-float(updates["w"][0, 0]))
    return np.asarray(rates)


def test_each_iteration_after_the_first_starts_with_a_linear_warmup():
    sst = SSTConfig(method="sst", rank=2, resample_every=T3, iteration_warmup=WARMUP)
    rates = _applied_rates(LowRankTask(None, sst), 3 * T3)
    count = np.arange(3 * T3)
    # written from App. F: update `count` follows the redraw after update ⌊count/T₃⌋·T₃
    want = np.where(count < T3, 1.0, np.minimum(1.0, (count % T3 + 1) / WARMUP)) * 0.5
    np.testing.assert_allclose(rates, want, rtol=1e-6)
    assert rates[T3] == pytest.approx(0.5 / WARMUP)  # the update right after the first redraw


@pytest.mark.parametrize("method, warmup", [("sst", 0), ("full", WARMUP), ("lora", WARMUP)])
def test_no_iteration_warmup_when_off_or_not_sst(method, warmup):
    sst = SSTConfig(method=method, rank=2, resample_every=T3, iteration_warmup=warmup)
    np.testing.assert_allclose(_applied_rates(LowRankTask(None, sst), 2 * T3), 0.5, rtol=1e-6)


def test_the_loop_redraws_after_every_t3_steps(tmp_path):
    """The hook the task gives runs after updates T₃, 2T₃, ..., the same steps at which the
    warm-up above restarts."""
    seen = []
    sst = SSTConfig(method="sst", rank=2, resample_every=3, iteration_warmup=1)
    task = LowRankTask(TeacherStudentTask(d_model=4, hidden=8, rows=64, eval_rows=16), sst)
    (hook,) = task.state_hooks()

    def recorded(state, step):
        jax.debug.callback(lambda s: seen.append(int(s)), step)
        return hook.fn(state, step)

    task.state_hooks = lambda: (StateHook(hook.every, recorded, hook.name),)
    train = TrainConfig(
        steps=10, batch_size=8, warmup_steps=9, log_every=5, eval_every=10, checkpoint_every=10,
        eval_batches=1, tensorboard=False,
    )  # fmt: skip
    run_training(task, train, tmp_path, verbose=False)
    assert seen == [3, 6, 9]


def test_scaled_iteration_keeps_the_paper_values_when_they_fit():
    assert scaled_iteration(steps=200 * 4 * 16, k=64, rank=4, rounds=4) == (200, 20)
    # 3,000 steps, 4 rounds of 16 iterations: T₃ = ⌊3000/64⌋ = 46, warm-up 46/10 → 5
    assert scaled_iteration(steps=3000, k=64, rank=4, rounds=4) == (46, 5)
    assert scaled_iteration(steps=30, k=64, rank=4, rounds=1) == (1, 1)
    # ⌈10/4⌉ = 3 iterations per round: T₃ = ⌊1000/6⌋ = 166, warm-up round(16.6) = 17
    assert scaled_iteration(steps=1000, k=10, rank=4, rounds=2) == (166, 17)
    with pytest.raises(ConfigError, match="cannot hold 4 rounds"):
        scaled_iteration(steps=10, k=64, rank=4, rounds=4)
