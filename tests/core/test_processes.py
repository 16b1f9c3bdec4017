"""Real processes: SIGKILL + resume equals an uninterrupted run; two processes equal one.

Each case starts ``experiments/run.py --exp=lm_baseline --smoke`` as a subprocess, so what is tested
is the command users run: the orbax checkpoints, the grain iterator state, the metrics file
truncation on resume and ``jax.distributed`` start-up through the ``JAXLAB_*`` variables.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from jaxlab.core.metrics import read_metrics

COMPARED = ("loss", "bits_per_byte", "grad_norm", "eval_loss", "eval_bits_per_byte")
# A fixed short recipe (not the smoke preset, which is tuned to learn): 30 steps at a modest rate,
# so that two processes reproduce one to 1e-5 (float differences of reductions across processes
# grow with the learning rate and the number of steps).
RECIPE = (
    "train.steps=30",
    "train.learning_rate=3e-3",
    "train.batch_size=8",
    "train.eval_batches=2",
)


def _command(workdir, *extra):
    return [
        sys.executable,
        "experiments/run.py",
        "--exp=lm_baseline",
        "--smoke",
        "--workdir",
        str(workdir),
        "--set",
        "train.tensorboard=false",
        *(f"--set={kv}" for kv in RECIPE),
        *extra,
    ]


def _env(devices, **extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu", **extra)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def _rows(workdir):
    return [{k: r[k] for k in ("step", *COMPARED) if k in r} for r in read_metrics(workdir)]


def _assert_rows_close(got, want, rtol):
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=rtol, abs=rtol), (a["step"], key)


@pytest.fixture(scope="module")
def uninterrupted(repo_root, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    subprocess.run(
        _command(workdir),
        cwd=repo_root,
        env=_env(8),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return workdir


def test_sigkill_then_rerun_ends_with_same_metrics(repo_root, uninterrupted, tmp_path):
    # Kill 1: during start-up, before anything is written. Kill 2: mid-run, after the first
    # checkpoint (step 10) and with metrics logged past it, which the resumed run must rewrite.
    proc = subprocess.Popen(
        _command(tmp_path),
        cwd=repo_root,
        env=_env(8),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc = subprocess.Popen(
        _command(tmp_path),
        cwd=repo_root,
        env=_env(8),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if len(read_metrics(tmp_path)) >= 3 and (tmp_path / "checkpoints" / "10").exists():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(r["step"] for r in read_metrics(tmp_path))
    assert 10 <= killed_at < 30

    done = subprocess.run(
        _command(tmp_path), cwd=repo_root, env=_env(8), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "resumed from step" in done.stdout
    _assert_rows_close(_rows(tmp_path), _rows(uninterrupted), rtol=0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(repo_root, command):
    """Runs ``command`` as two ``jax.distributed`` processes of 4 devices; asserts both pass."""
    port = _free_port()
    procs = [
        subprocess.Popen(
            command,
            cwd=repo_root,
            env=_env(
                4,
                JAXLAB_NUM_PROCESSES="2",
                JAXLAB_COORDINATOR=f"127.0.0.1:{port}",
                JAXLAB_PROCESS_ID=str(i),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]


def test_two_processes_match_one_process(repo_root, uninterrupted, tmp_path):
    run_two_processes(repo_root, _command(tmp_path))
    # Two processes x 4 devices run the same (8-device) global program as one process x 8 devices.
    _assert_rows_close(_rows(tmp_path), _rows(uninterrupted), rtol=1e-5)
