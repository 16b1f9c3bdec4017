"""The ot_benchmark experiment: config validation, its CLI errors, and a small run."""

import json

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.core.experiment import load


@pytest.fixture(scope="module")
def exp(repo_root):
    return load(repo_root / "experiments", "ot_benchmark")


def test_experiment_config_validation(exp):
    with pytest.raises(ConfigError):
        exp.get_config("huge")
    with pytest.raises(ConfigError):
        exp.Config(methods=("splr", "simplex"))
    with pytest.raises(ConfigError):
        exp.Config(problems=("synthetic3:10",))


@pytest.mark.parametrize(
    "argv, message",
    [
        # An empty list ran nothing and reported the claim as true.
        (["--set", "problems="], "problems is empty"),
        (["--set", "etas="], "etas is empty"),
        (["--set", "preset=huge"], "unknown preset 'huge' for ot_benchmark"),
        (["--set", "methods=splr,simplex"], "unknown method 'simplex'"),
        (["--set", "perturbations=-1"], "perturbations must be >= 0"),
    ],
)
def test_cli_errors_exit_2_with_one_line(run_main, capsys, tmp_path, argv, message):
    assert run_main(["--exp", "ot_benchmark", "--workdir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("error:")


@pytest.mark.slow
def test_experiment_small_run(exp, tmp_path):
    cfg = exp.Config(
        problems=("synthetic1:30",),
        etas=(1e-2,),
        methods=("splr", "sinkhorn"),
        ott_variants=("plain", "plain_every10"),
        repeats=2,
    )
    summary = exp.run(cfg, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    peers = ("regot_splr", "ott_plain", "ott_plain_every10", "pot_sinkhorn_log")
    assert {r["method"] for r in rows} == {"splr", "sinkhorn", *peers}
    assert all(r["converged"] and r["plan_l1_to_ref"] < 1e-5 for r in rows)
    by = {r["method"]: r for r in rows}
    # Checked every tenth iteration, ott's default cadence stops at a multiple of 10 at most nine
    # iterations after the every-iteration check; POT checks after iterations 1, 11, 21, ...
    every, tenth = by["ott_plain"]["iters"], by["ott_plain_every10"]["iters"]
    assert tenth % 10 == 0 and every <= tenth < every + 10
    assert by["pot_sinkhorn_log"]["iters"] % 10 == 1
    # One table of the peers, each beside the jaxlab solver it is compared with.
    case = "synthetic1_n30_eta0.01"
    table = {r["peer"]: r for r in summary["peers"]}
    assert set(table) == set(peers)
    for peer, r in table.items():
        ours = "splr" if peer == "regot_splr" else "sinkhorn"
        assert r["case"] == case and r["jaxlab"] == ours
        assert r["peer_iters"] == by[peer]["iters"] and r["jaxlab_iters"] == by[ours]["iters"]
        ratio = by[ours]["seconds"] / by[peer]["seconds"]
        assert r["jaxlab_over_peer_seconds"] == pytest.approx(ratio)
    markdown = (tmp_path / "peers.md").read_text().splitlines()
    assert len(markdown) == 2 + len(peers) and markdown[2].startswith(f"| {case} | regot_splr |")
    assert summary["splr_converged_where_regot_does"]
    head = summary["headline"]
    case = "synthetic1_n30_eta0.01"
    assert head["splr_converged_where_regot_does"] is True
    assert head[f"{case}.splr_iters"] == summary["cases"][case]["splr"]["iters"]
    assert head[f"{case}.sinkhorn_converged"] is True
    assert head[f"{case}.splr_over_regot_seconds"] > 0
    assert summary["timing"] == {"warmup": 1, "repeats": 2, "statistic": "median"}
    assert list(tmp_path.glob("conv_*.png"))


def test_claim_is_untested_without_splr(exp):
    # Without an SPLR row the verdict is None (not tested), never a vacuous True.
    cases = {"c": {"regot_splr": {"iters": 5, "converged": True}, "splr_over_regot_seconds": None}}
    assert exp.claim_headline(cases)["splr_converged_where_regot_does"] is None


def test_perturbed_copies_time_splr_and_regot_on_scaled_costs(exp, tmp_path, monkeypatch):
    """With perturbations=K, SPLR and regot also run on K scaled copies of the cost: one count per
    copy for each, and the ratio is of the summed times."""
    costs = []
    real = exp.jaxlab_runner

    def recording(problem, *args, **kwargs):
        costs.append(np.array(problem.cost))
        return real(problem, *args, **kwargs)

    monkeypatch.setattr(exp, "jaxlab_runner", recording)
    cfg = exp.Config(
        problems=("synthetic1:30",),
        etas=(1e-2,),
        methods=("splr",),
        ott_variants=(),
        pot_sinkhorn=False,
        repeats=1,
        perturbations=2,
    )
    case = exp.run(cfg, tmp_path)["cases"]["synthetic1_n30_eta0.01"]
    got = case["perturbed"]
    assert len(got["splr_iters"]) == len(got["regot_splr_iters"]) == 3
    # the unscaled copy is the case's own problem
    assert got["splr_iters"][0] == case["splr"]["iters"]
    assert got["regot_splr_iters"][0] == case["regot_splr"]["iters"]
    assert got["splr_over_regot_seconds"] == pytest.approx(
        got["splr_seconds"] / got["regot_splr_seconds"]
    )
    # the case's own run, then the copies: cost × (1 + j·1e-14), j = 0, 1, 2
    assert len(costs) == 4
    for j, cost in enumerate(costs[1:]):
        np.testing.assert_array_equal(cost, costs[0] * (1.0 + j * 1e-14))
    assert not np.array_equal(costs[2], costs[0])
