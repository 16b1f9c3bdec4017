"""Language-model experiments trained from BPE shards, through ``experiments/run.py``.

The shipped KJV is prepared with a BPE trained on a slice of it (:mod:`jaxlab.testing.corpus`),
then: ``lm_baseline --smoke`` from the shards as a subprocess (the uninterrupted reference), the
same command SIGKILLed after its first checkpoint and re-run (identical metrics), two
``jax.distributed`` processes (equal to one process; each reads only its rows from disk), and
the other language-model experiments' smoke runs from the shards. The helpers and the recipe are
those of ``tests/core/test_processes.py`` (:mod:`jaxlab.testing.processes`).
"""

import json
import subprocess
import sys

import pytest

from jaxlab.core.metrics import read_metrics
from jaxlab.testing.corpus import kjv_bpe_corpus
from jaxlab.testing.processes import (
    assert_rows_close,
    compared_rows,
    cpu_env,
    kill_after_checkpoint,
    lm_command,
    run_two_processes,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tokenizer, shards = kjv_bpe_corpus(tmp_path_factory.getbasetemp() / "kjv_bpe")
    return [f"--set=data=shards:{shards}", f"--set=tokenizer={tokenizer}"]


@pytest.fixture(scope="module")
def uninterrupted(repo_root, data, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("shards_uninterrupted")
    done = subprocess.run(
        lm_command(workdir, *data),
        cwd=repo_root,
        env=cpu_env(8),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "val_bits_per_token" in done.stdout  # the BPE headline, not the byte one
    return workdir


def test_lm_baseline_learns_from_bpe_shards(uninterrupted):
    rows = read_metrics(uninterrupted)
    first, last = rows[0], rows[-1]
    assert {"bits_per_token", "bits_per_byte", "eval_bits_per_token"} <= last.keys()
    assert last["eval_loss"] < first["loss"]
    # Bits per byte are bits per token over the corpus's bytes per token (about 3 for this BPE).
    assert 2 < last["eval_bits_per_token"] / last["eval_bits_per_byte"] < 4


def test_sigkill_then_rerun_from_shards_ends_with_same_metrics(
    repo_root, data, uninterrupted, tmp_path
):
    killed_at = kill_after_checkpoint(
        lm_command(tmp_path, *data), tmp_path, cwd=repo_root, env=cpu_env(8)
    )
    assert 10 <= killed_at < 30
    done = subprocess.run(
        lm_command(tmp_path, *data),
        cwd=repo_root,
        env=cpu_env(8),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from step" in done.stdout
    assert_rows_close(compared_rows(tmp_path), compared_rows(uninterrupted), rtol=0)


def test_two_processes_from_shards_match_one_process(repo_root, data, uninterrupted, tmp_path):
    run_two_processes(repo_root, lm_command(tmp_path, *data))
    assert_rows_close(compared_rows(tmp_path), compared_rows(uninterrupted), rtol=1e-5)


# Every language-model experiment takes its vocabulary from the shards (a config left at 256
# bytes takes the index's), at smoke size with one seed and the fewest arms that still train.
# (rmt_scaling is not run here: it reads shards through the same LMTask as these, and its
# smoke from shards cost about 20 s of the suite.)
BPE_RUNS = {
    "xlstm_lm": ["--set=seeds=0"],
    "mlr_lm": ["--set=seeds=0", "--set=models=mha,mlr"],
    "sst_pretrain": ["--set=methods=full,sst", "--set=rmt_methods=", "--set=time_rounds=0"],
}


@pytest.mark.parametrize("name", sorted(BPE_RUNS))
def test_language_model_experiments_train_on_bpe_shards(name, repo_root, data, tmp_path):
    sys.path.insert(0, str(repo_root / "experiments"))
    import run  # experiments/run.py

    args = [f"--exp={name}", "--smoke", "--workdir", str(tmp_path), data[0], *BPE_RUNS[name]]
    assert run.main(args) == 0
    configs = [json.loads(p.read_text()) for p in tmp_path.glob("*_seed0/run.json")]
    assert configs and all(c["config"]["model"]["vocab_size"] == 512 for c in configs)
