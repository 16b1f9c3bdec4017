"""The persistent compilation cache: where it goes, how to turn it off, and that run.py uses it."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from jaxlab.core.compile_cache import cache_dir
from tests.conftest import TEST_CACHE


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"HOME": "/home/u"}, "/home/u/.cache/jaxlab/jax"),
        ({"HOME": "/home/u", "XDG_CACHE_HOME": "/xdg"}, "/xdg/jaxlab/jax"),
        ({"HOME": "/home/u", "JAXLAB_COMPILATION_CACHE": "/elsewhere"}, "/elsewhere"),
        ({"HOME": "/home/u", "JAXLAB_COMPILATION_CACHE": "off"}, None),
        ({"HOME": "/home/u", "JAX_COMPILATION_CACHE_DIR": "/jax"}, None),  # JAX's own setting
    ],
)
def test_cache_dir_from_environment(env, expected):
    got = cache_dir(env)
    assert (str(got) if got else None) == expected


def test_suite_never_writes_into_home():
    # tests/conftest.py points the cache at this test run's own directory, or turns it off.
    path = cache_dir()
    assert path in (None, TEST_CACHE)
    assert path is None or not path.is_relative_to(pathlib.Path.home())


def _cache_counts(stderr: str) -> tuple[int, int]:
    match = re.search(r"persistent cache: (\d+) hits, (\d+) misses", stderr)
    assert match, f"no start-up profile in stderr:\n{stderr[-2000:]}"
    return int(match[1]), int(match[2])


def test_run_py_fills_the_cache_and_a_second_start_compiles_nothing(repo_root, tmp_path):
    env = dict(os.environ, JAXLAB_COMPILATION_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu")

    def start(workdir: str) -> str:
        command = [
            sys.executable,
            "experiments/run.py",
            "--exp=lm_baseline",
            "--smoke",
            "--workdir",
            str(tmp_path / workdir),
            "--set",
            "train.steps=2",
            "--set",
            "train.tensorboard=false",
            "--profile-startup",
        ]
        done = subprocess.run(
            command, cwd=repo_root, env=env, check=True, capture_output=True, text=True, timeout=300
        )
        return done.stderr

    first = start("first")
    assert len(list(pathlib.Path(tmp_path / "cache").iterdir())) > 0
    hits, misses = _cache_counts(first)
    assert misses > 0
    # The same run in a new workdir: every program comes from the cache (JAX's own counters).
    hits_again, misses_again = _cache_counts(start("second"))
    assert (hits_again, misses_again) == (hits + misses, 0)
    parts = ("start-up profile", "import of experiments/lm_baseline.py", "  jax ", "train_step")
    for part in parts:
        assert part in first
