"""The partial_ot_bench experiment: config checks, CLI errors, POT's cycle count, a small run."""

import json

import jax
import numpy as np
import ot
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.core.experiment import load
from jaxlab.data.ot_problems import make_problem


@pytest.fixture(scope="module")
def exp(repo_root):
    return load(repo_root / "experiments", "partial_ot_bench")


def test_config_validation(exp):
    with pytest.raises(ConfigError):
        exp.get_config("huge")
    with pytest.raises(ConfigError, match="mass must lie in"):
        exp.Config(mass=1.5)
    with pytest.raises(ConfigError):
        exp.Config(entropic_problems=("synthetic3:10",))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "exact_problems="], "exact_problems is empty"),
        (["--set", "preset=huge"], "unknown preset 'huge' for partial_ot_bench"),
    ],
)
def test_cli_errors_exit_2_with_one_line(run_main, capsys, tmp_path, argv, message):
    assert run_main(["--exp", "partial_ot_bench", "--workdir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("error:")


def test_pots_cycle_count_is_the_number_of_cycles_it_ran(exp):
    # Independent of the count's formula: POT rerun with exactly that many cycles as its budget
    # returns the same plan, and with one fewer a different one.
    problem = make_problem("synthetic2", 40)
    cfg = exp.Config(exact_problems=("synthetic2:40",), pot_stop=1e-9)
    runner = exp._pot(problem, cfg, 0.05)
    row = runner.row(runner.call(), 1.0)
    assert row["converged"] and 1 < row["iters"] < cfg.max_iter

    def plan(budget):
        return ot.partial.entropic_partial_wasserstein(
            problem.a, problem.b, problem.cost, reg=0.05, m=cfg.mass, numItermax=budget,
            stopThr=cfg.pot_stop,
        )  # fmt: skip

    np.testing.assert_array_equal(plan(row["iters"]), row["plan"])
    assert np.abs(plan(row["iters"] - 1) - row["plan"]).max() > 0


def test_small_run(exp, tmp_path):
    cfg = exp.Config(
        exact_problems=("synthetic1:30",), entropic_problems=("synthetic2:30",), repeats=2
    )
    summary = exp.run(cfg, tmp_path)
    assert not jax.config.jax_enable_x64
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["case"], r["solver"]) for r in rows] == [
        ("synthetic1_n30_exact", "jaxlab"),
        ("synthetic1_n30_exact", "pot"),
        ("synthetic2_n30_entropic_eps0.05", "jaxlab"),
        ("synthetic2_n30_entropic_eps0.05", "pot"),
    ]
    assert all(r["converged"] and r["feasibility_error"] < 1e-8 for r in rows)
    exact, entropic = summary["cases"].values()
    assert exact["plan_l1_gap"] < 1e-12 and entropic["plan_l1_gap"] < 1e-6
    for case in (exact, entropic):
        ratio = case["jaxlab"]["seconds"] / case["pot"]["seconds"]
        assert case["jaxlab_over_pot_seconds"] == pytest.approx(ratio)
    head = summary["headline"]
    assert head["max_exact_ratio"] == round(exact["jaxlab_over_pot_seconds"], 3)
    assert head["exact_within_target"] == (exact["jaxlab_over_pot_seconds"] <= 1.5)
    assert summary["timing"] == {"warmup": 1, "repeats": 2, "statistic": "median"}
    table = (tmp_path / "table.md").read_text().splitlines()
    assert len(table) == 4 and table[2].startswith("| synthetic1_n30_exact | 1 / ")
