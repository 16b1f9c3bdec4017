"""Every experiment runs at ``--smoke`` size and writes its files; a re-run on the same workdir
duplicates no row.

Experiments are discovered the way the runner finds them, so a new experiment file is tested here
without editing this file. Every experiment writes its rows through the same code
(:class:`jaxlab.core.metrics.MetricWriter`, and :mod:`jaxlab.core.sweep` or
:func:`jaxlab.core.loop.run_training` for its runs), so the re-run property is checked on one
experiment of each kind (:data:`RERUN`) rather than on all of them, which would double the slowest
tests of the suite: run twice on the same workdir, the top-level ``metrics.jsonl`` must hold the
same rows afterwards — same steps, same keys, no duplicates, same values except measured times,
which a re-run measures again. Resuming a sweep's runs is tested in ``tests/core/test_sweep.py``.
"""

import functools
import json

import jax
import pytest

from jaxlab.core import experiment
from jaxlab.core.metrics import read_metrics
from tests.conftest import REPO

EXP_DIR = REPO / "experiments"


# One experiment per way of running: the training loop resumed from its final checkpoint, and a
# sweep of sub-runs whose recorded results are reused.
RERUN = ("lm_baseline", "nard_synthetic")


@functools.cache
def _run(name, workdir):
    first = experiment.launch(EXP_DIR, name, smoke=True, workdir=workdir)
    return first, read_metrics(workdir)


@functools.cache
def _rerun(name, workdir):
    _run(name, workdir)
    return experiment.launch(EXP_DIR, name, smoke=True, workdir=workdir), read_metrics(workdir)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return lambda name: _run(name, tmp_path_factory.getbasetemp() / f"smoke_{name}")


@pytest.fixture(scope="module")
def smoke_again(tmp_path_factory):
    return lambda name: _rerun(name, tmp_path_factory.getbasetemp() / f"smoke_{name}")


def _timing(key: str) -> bool:
    return "second" in key or "time" in key


@pytest.mark.parametrize("name", experiment.available(EXP_DIR))
def test_smoke_run_writes_its_files(name, smoke, tmp_path_factory):
    first, rows = smoke(name)
    workdir = tmp_path_factory.getbasetemp() / f"smoke_{name}"
    assert not jax.config.jax_enable_x64, f"{name} left 64-bit mode on for the whole process"
    record = json.loads((workdir / "config.json").read_text())
    assert record["experiment"] == name and record["preset"] == "smoke"
    assert json.loads((workdir / "summary.json").read_text())["experiment"] == name
    assert rows and first["wall_seconds"] > 0
    steps = [r["step"] for r in rows]
    assert len(set(steps)) == len(steps)


@pytest.mark.parametrize("name", RERUN)
def test_smoke_rerun_on_the_same_workdir_duplicates_no_row(name, smoke, smoke_again):
    _, rows = smoke(name)
    again, rows_again = smoke_again(name)
    assert again["wall_seconds"] > 0
    steps = [r["step"] for r in rows_again]
    assert steps == [r["step"] for r in rows] and len(set(steps)) == len(steps)
    for a, b in zip(rows, rows_again, strict=True):
        assert a.keys() == b.keys()
        assert {k: v for k, v in a.items() if not _timing(k)} == {
            k: v for k, v in b.items() if not _timing(k)
        }


def test_lm_baseline_smoke_learns_below_unigram_entropy_and_resumes(
    smoke, smoke_again, tmp_path_factory
):
    first, _ = smoke("lm_baseline")
    again, _ = smoke_again("lm_baseline")
    # A model that ignores context can reach the unigram entropy of the validation text; learning
    # means getting below it (a uniform guess over bytes, 8 bits, is a much weaker bar).
    assert first["val_bits_per_byte"] < first["unigram_entropy_bits"]
    assert first["headline"]["below_unigram_entropy"] is True
    workdir = tmp_path_factory.getbasetemp() / "smoke_lm_baseline"
    assert (workdir / "val_bits_per_byte.png").stat().st_size > 1000
    assert again["resumed_from"] == 60 and again["val_bits_per_byte"] == first["val_bits_per_byte"]


def test_drrho_clip_smoke_reports_paired_differences_per_seed(smoke, tmp_path_factory):
    first, _ = smoke("drrho_clip")
    workdir = tmp_path_factory.getbasetemp() / "smoke_drrho_clip"
    per_seed = json.loads((workdir / "per_seed.json").read_text())
    assert "jest" in per_seed  # the joint sampler runs in the smoke preset
    for other in ("reference", "clip", "jest"):
        want = [d - o for d, o in zip(
            [r["zero_shot_test"] for r in per_seed["drrho"]],
            [r["zero_shot_test"] for r in per_seed[other]],
            strict=True,
        )]  # fmt: skip
        got = first["drrho_minus"][other]["zero_shot_test"]
        assert got["n"] == len(want) and abs(got["mean"] - sum(want) / len(want)) < 1e-12
        assert first["headline"][f"drrho_minus_{other}"] == got["mean"]


def test_warmpot_smoke_reports_paired_differences_per_seed(smoke, tmp_path_factory):
    first, _ = smoke("warmpot_digits")
    workdir = tmp_path_factory.getbasetemp() / "smoke_warmpot_digits"
    setting = "digits_to_mnist_subgroup"
    record = lambda m, s: json.loads((workdir / f"{setting}_{m}_seed{s}" / "run.json").read_text())
    last = {m: [record(m, s)["result"]["last"] for s in (0, 1)] for m in ("warmpot", "source_only")}
    diffs = [w - x for w, x in zip(last["warmpot"], last["source_only"], strict=True)]
    paired = first["headline"][setting]["warmpot_minus"]["source_only"]
    assert paired["per_seed"] == pytest.approx(diffs, abs=1e-4)
    assert paired["mean"] == pytest.approx(sum(diffs) / 2, abs=1e-4)
    assert paired["sd"] == pytest.approx(abs(diffs[0] - diffs[1]) / 2**0.5, abs=1e-4)  # sample sd
    assert paired["wins"] == sum(d > 0 for d in diffs) and paired["n"] == 2
    assert "at_cap" in first["headline"][setting]["warmpot"]


def test_warmpot_smoke_runs_the_authors_eps_eta_beside_the_tuned_recipe(smoke, tmp_path_factory):
    # Same data, seeds and recipe; only ε and η are the authors' (their run.sh for Office-Home).
    first, _ = smoke("warmpot_digits")
    workdir = tmp_path_factory.getbasetemp() / "smoke_warmpot_digits"
    setting = "digits_to_mnist_subgroup"
    record = lambda arm, s: json.loads(
        (workdir / f"{setting}_{arm}_seed{s}" / "run.json").read_text()
    )
    authors = {"epsilon": 7.0, "eta1": 0.5, "eta2": 7.0, "eta3": 0.25}
    last = {}
    for arm in ("warmpot", "warmpot_authors_eps_eta"):
        last[arm] = [record(arm, s)["result"]["last"] for s in (0, 1)]
    for s in (0, 1):
        tuned, theirs = (
            record("warmpot", s)["config"],
            record("warmpot_authors_eps_eta", s)["config"],
        )
        assert theirs["data"] == tuned["data"]
        assert {k: v for k, v in theirs["train"].items() if tuned["train"][k] != v} == authors
    diffs = [w - a for w, a in zip(last["warmpot"], last["warmpot_authors_eps_eta"], strict=True)]
    paired = first["headline"][setting]["warmpot_minus"]["warmpot_authors_eps_eta"]
    assert paired["per_seed"] == pytest.approx(diffs, abs=1e-4)
    assert "warmpot_authors_eps_eta" in first["headline"][setting]
