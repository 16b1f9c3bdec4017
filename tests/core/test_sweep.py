"""The seed sweep on the toy task: each run once, reuse on re-run, resume of an unfinished run,
configs that changed, non-finite results, and the curve helpers against numpy."""

import dataclasses
import json

import numpy as np
import pytest

from jaxlab.core.config import TrainConfig, apply_overrides, to_dict
from jaxlab.core.errors import ConfigError, RunError
from jaxlab.core.loop import run_training
from jaxlab.core.sweep import (
    Run,
    check_seeds,
    mean_curve,
    read_curve,
    run_dir,
    sweep,
    value_at,
)
from jaxlab.testing.toy import ToyTask

CFG = TrainConfig(
    steps=4,
    batch_size=8,
    warmup_steps=1,
    checkpoint_every=2,
    eval_every=2,
    log_every=2,
    eval_batches=1,
    tensorboard=False,
)
HIDDEN = {"small": 8, "wide": 16}


class Counting:
    """A ``spec`` for :func:`sweep` that trains ToyTask arms and counts the runs it trains."""

    def __init__(self, train: TrainConfig = CFG, stop_at: int | None = None):
        # stop_at: the logged step at which the run is stopped (its last checkpoint is before it).
        self.train, self.stop_at, self.trained = train, stop_at, []

    def __call__(self, arm: str, seed: int) -> Run:
        train = dataclasses.replace(self.train, seed=seed)
        config = {"hidden": HIDDEN[arm], "train": to_dict(train)}

        def fit(workdir):
            self.trained.append((arm, seed))
            task = ToyTask(hidden=HIDDEN[arm])
            summary = run_training(task, train, workdir, hooks=[self.kill], verbose=False)
            steps, losses = read_curve(workdir, "eval_loss", x="step")
            return {"seed": seed, "steps": steps, "eval_loss": losses,
                    "resumed_from": summary["resumed_from"]}  # fmt: skip

        return Run(config, fit)

    def kill(self, step: int, row: dict) -> None:
        """Stops the run at ``stop_at``, after the checkpoint before it (as a kill would)."""
        if step == self.stop_at:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sweep")
    spec = Counting()
    return workdir, spec, sweep(workdir, ("small", "wide"), (0, 1), spec)


def test_every_arm_and_seed_runs_once_in_its_own_workdir(swept):
    workdir, spec, results = swept
    assert sorted(spec.trained) == [("small", 0), ("small", 1), ("wide", 0), ("wide", 1)]
    assert list(results) == ["small", "wide"]
    assert [r["seed"] for r in results["wide"]] == [0, 1]
    for arm in ("small", "wide"):
        for seed in (0, 1):
            record = json.loads((run_dir(workdir, arm, seed) / "run.json").read_text())
            assert record["config"]["hidden"] == HIDDEN[arm]
            assert record["config"]["train"]["seed"] == seed
            assert record["result"] == results[arm][seed]
    # Different seeds are different runs.
    assert results["small"][0]["eval_loss"] != results["small"][1]["eval_loss"]


def test_a_rerun_trains_nothing_and_returns_the_recorded_results(swept):
    workdir, _, results = swept
    again = Counting()
    assert sweep(workdir, ("small", "wide"), (0, 1), again) == results
    assert again.trained == []


def test_a_changed_config_is_not_reused_silently(swept):
    workdir, _, _ = swept

    def other_model(arm, seed):
        run = Counting()(arm, seed)
        return run._replace(config={**run.config, "hidden": 32})

    with pytest.raises(RunError, match=r"different config \(hidden\)"):
        sweep(workdir, ("small",), (0,), other_model)


def test_a_resumable_change_runs_again_and_records_the_new_result(tmp_path):
    sweep(tmp_path, ("small",), (0,), Counting())
    longer = Counting(dataclasses.replace(CFG, steps=6))
    result = sweep(tmp_path, ("small",), (0,), longer)["small"][0]
    assert longer.trained == [("small", 0)]
    assert result["resumed_from"] == 4 and result["steps"] == [2, 4, 6]
    record = json.loads((run_dir(tmp_path, "small", 0) / "run.json").read_text())
    assert record["config"]["train"]["steps"] == 6 and record["result"] == result


def test_an_unfinished_run_resumes_from_its_checkpoint(swept, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        sweep(tmp_path, ("small",), (1,), Counting(stop_at=4))
    record = json.loads((run_dir(tmp_path, "small", 1) / "run.json").read_text())
    assert record["result"] is None  # started, not finished
    resumed = Counting()
    result = sweep(tmp_path, ("small",), (1,), resumed)["small"][0]
    assert resumed.trained == [("small", 1)] and result["resumed_from"] == 2
    uninterrupted = swept[2]["small"][1]
    np.testing.assert_allclose(result["eval_loss"], uninterrupted["eval_loss"], rtol=1e-6)


def test_an_unfinished_run_with_another_config_is_refused(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        sweep(tmp_path, ("small",), (0,), Counting(stop_at=4))
    with pytest.raises(RunError, match="different config"):
        sweep(tmp_path, ("small",), (0,), lambda a, s: Counting()("wide", s))


def test_a_non_finite_result_is_a_run_error_and_is_not_recorded(tmp_path):
    calls = []

    def spec(arm, seed):
        def fit(workdir):
            calls.append(arm)
            return {"final": float("nan") if len(calls) == 1 else 1.0}

        return Run({"arm": arm}, fit)

    with pytest.raises(RunError, match="non-finite final"):
        sweep(tmp_path, ("a",), (0,), spec)
    assert json.loads((run_dir(tmp_path, "a", 0) / "run.json").read_text())["result"] is None
    assert sweep(tmp_path, ("a",), (0,), spec) == {"a": [{"final": 1.0}]}
    assert len(calls) == 2


def test_mean_curve_matches_numpy():
    rng = np.random.default_rng(0)
    x = [10, 20, 30, 40]
    ys = rng.normal(size=(3, 4))
    got_x, mean, sd = mean_curve([x] * 3, ys.tolist())
    np.testing.assert_array_equal(got_x, x)
    np.testing.assert_allclose(mean, ys.mean(0), rtol=1e-12)
    np.testing.assert_allclose(sd, ys.std(0, ddof=1), rtol=1e-12)
    _, one_mean, one_sd = mean_curve([x], ys[:1].tolist())
    np.testing.assert_allclose(one_mean, ys[0])
    np.testing.assert_array_equal(one_sd, 0.0)
    with pytest.raises(ValueError, match="different x"):
        mean_curve([x, [10, 20, 30, 50]], ys[:2].tolist())


def test_value_at_interpolates_on_the_scaled_axis():
    tokens, loss = [100, 200, 400], [3.0, 2.0, 1.5]
    assert value_at(tokens, loss, 300.0) == pytest.approx(1.75)
    # On a FLOP axis of 6 FLOPs per token, 900 FLOPs is 150 tokens.
    assert value_at(tokens, loss, 900.0, scale=6.0) == pytest.approx(2.5)
    assert value_at(tokens, loss, 1e9, scale=6.0) == 1.5  # past the end: the last value


def test_read_curve_reads_the_rows_holding_the_metric(swept):
    workdir = run_dir(swept[0], "small", 0)
    steps, losses = read_curve(workdir, "eval_loss", x="step")
    assert steps == [2, 4] and losses == swept[2]["small"][0]["eval_loss"]
    with pytest.raises(RunError, match="no eval_nothing"):
        read_curve(workdir, "eval_nothing")


@dataclasses.dataclass(frozen=True)
class _Seeded:
    seeds: tuple[int, ...] = (0, 1)

    def __post_init__(self):
        check_seeds(self.seeds)


def test_seeds_are_set_as_a_tuple_and_validated():
    assert apply_overrides(_Seeded(), {"seeds": "0,1,2"}).seeds == (0, 1, 2)
    assert apply_overrides(_Seeded(), {"seeds": "5"}).seeds == (5,)
    for text, message in (("", "empty"), ("0,-1", "negative"), ("1,1", "repeats")):
        with pytest.raises(ConfigError, match=message):
            apply_overrides(_Seeded(), {"seeds": text})
    with pytest.raises(ConfigError, match="tuple of integers"):
        _Seeded(seeds=3)
