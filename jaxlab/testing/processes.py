"""Running ``experiments/run.py`` as real processes: kill and resume, two ``jax.distributed`` ones.

The checks of the shared loop's promises that only real processes can make — a run SIGKILLed
after a checkpoint resumes to the same metrics, two processes of 4 devices compute what one of 8
does — all start the same short ``lm_baseline`` recipe with extra ``--set`` options (a data
source, say); the one-run-per-workdir checks need a second process holding a workdir. These are the
pieces they share.
"""

from __future__ import annotations

import math
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from jaxlab.core.metrics import read_metrics

__all__ = [
    "COMPARED",
    "RECIPE",
    "assert_rows_close",
    "compared_rows",
    "cpu_env",
    "free_port",
    "hold_workdir",
    "kill_after_checkpoint",
    "lm_command",
    "run_two_processes",
]

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


def lm_command(workdir: pathlib.Path, *extra: str) -> list[str]:
    """``run.py --exp=lm_baseline --smoke`` with :data:`RECIPE` into ``workdir``, plus ``extra``."""
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


def cpu_env(devices: int, **extra: str) -> dict[str, str]:
    """This process's environment with ``devices`` simulated CPU devices and ``extra`` set (its
    other ``XLA_FLAGS`` kept, so a child compiles as this process does)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", **extra)
    kept = [f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*kept, f"--xla_force_host_platform_device_count={devices}"])
    return env


def compared_rows(workdir: pathlib.Path) -> list[dict]:
    """The step and the :data:`COMPARED` metrics of every row of ``workdir``'s metrics file."""
    return [{k: r[k] for k in ("step", *COMPARED) if k in r} for r in read_metrics(workdir)]


def assert_rows_close(got: Sequence[dict], want: Sequence[dict], rtol: float) -> None:
    """Same steps, same keys, every value within ``rtol`` (relative, and absolute near zero)."""
    assert [r["step"] for r in got] == [r["step"] for r in want], "the runs logged other steps"
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys(), (a["step"], sorted(a), sorted(b))
        for key in a:
            ok = math.isclose(a[key], b[key], rel_tol=rtol, abs_tol=rtol)
            assert ok, f"step {a['step']} {key}: {a[key]!r} != {b[key]!r} (rtol {rtol})"


def kill_after_checkpoint(
    command: Sequence[str],
    workdir: pathlib.Path,
    *,
    cwd: pathlib.Path,
    env: dict[str, str],
    checkpoint: int = 10,
    min_rows: int = 3,
    timeout: float = 240,
) -> int:
    """Starts ``command``, SIGKILLs it once checkpoint ``checkpoint`` exists and ``min_rows``
    metric rows are logged (some of them past the checkpoint, which a resume must rewrite), and
    returns the last step logged. Fails if the run ends before it could be killed."""
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if (
            len(read_metrics(workdir)) >= min_rows
            and (workdir / "checkpoints" / str(checkpoint)).exists()
        ):
            break
        time.sleep(0.05)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert alive, "the run finished before it could be killed"
    return max(r["step"] for r in read_metrics(workdir))


_HOLD = """
import sys, time
from jaxlab.core.workdir import workdir_lock
with workdir_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def hold_workdir(workdir: pathlib.Path, repo_root: pathlib.Path) -> subprocess.Popen:
    """Starts a process that holds ``workdir``'s run lock for two minutes and returns it once the
    lock is taken (for the one-run-per-workdir checks; kill it when done)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(workdir)],
        cwd=repo_root,
        env=dict(os.environ, PYTHONPATH=str(repo_root), JAX_PLATFORMS="cpu"),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked", "the holder did not take the lock"
    return proc


def free_port() -> int:
    """A TCP port on localhost that is free now (for a ``jax.distributed`` coordinator)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(
    repo_root: pathlib.Path, command: Sequence[str], *, timeout: float = 900, **env: str
) -> list[str]:
    """Runs ``command`` as two ``jax.distributed`` processes of 4 CPU devices each (through the
    ``JAXLAB_*`` variables ``run.py`` reads), asserts both succeed, and returns their stdouts."""
    port = free_port()
    procs = [
        subprocess.Popen(
            command,
            cwd=repo_root,
            env=cpu_env(
                4,
                JAXLAB_NUM_PROCESSES="2",
                JAXLAB_COORDINATOR=f"127.0.0.1:{port}",
                JAXLAB_PROCESS_ID=str(i),
                **env,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    return [out for out, _ in outs]
