"""Real processes: SIGKILL + resume equals an uninterrupted run (two processes: test_shard_runs).

Each case starts ``experiments/run.py --exp=lm_baseline --smoke`` as a subprocess, so what is tested
is the command users run: the orbax checkpoints, the grain iterator state, the metrics file
truncation on resume and ``jax.distributed`` start-up through the ``JAXLAB_*`` variables.
"""

import signal
import subprocess
import time

import pytest

from jaxlab.testing.processes import (
    assert_rows_close,
    compared_rows,
    cpu_env,
    kill_after_checkpoint,
    lm_command,
)


@pytest.fixture(scope="module")
def uninterrupted(repo_root, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    subprocess.run(
        lm_command(workdir),
        cwd=repo_root,
        env=cpu_env(8),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return workdir


def test_sigkill_then_rerun_ends_with_same_metrics(repo_root, uninterrupted, tmp_path):
    # Kill 1: during start-up, before anything is written. Kill 2: mid-run, after the first
    # checkpoint (step 10) and with metrics logged past it, which the resumed run must rewrite.
    proc = subprocess.Popen(
        lm_command(tmp_path),
        cwd=repo_root,
        env=cpu_env(8),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = kill_after_checkpoint(lm_command(tmp_path), tmp_path, cwd=repo_root, env=cpu_env(8))
    assert 10 <= killed_at < 30

    done = subprocess.run(
        lm_command(tmp_path),
        cwd=repo_root,
        env=cpu_env(8),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "resumed from step" in done.stdout
    assert_rows_close(compared_rows(tmp_path), compared_rows(uninterrupted), rtol=0)


# Two jax.distributed processes against one: tests/experiments/test_shard_runs.py runs the same
# command from BPE shards (each process reading only its rows), which covers this byte-corpus case's
# start-up and global program too; running both cost about 20 s of the suite.
