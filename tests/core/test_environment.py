"""The ``JAXLAB_*`` environment variables: every bad value is one line naming the variable, from
the library and from the command line, and booleans read as booleans."""

import subprocess
import sys

import pytest

from jaxlab.core.compile_cache import cache_dir, enable_compilation_cache
from jaxlab.core.environment import (
    Distributed,
    check_environment,
    distributed_settings,
    env_flag,
    env_switch,
)
from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import maybe_initialize_distributed
from jaxlab.testing.processes import cpu_env

MULTI = {"JAXLAB_NUM_PROCESSES": "2", "JAXLAB_PROCESS_ID": "1",
         "JAXLAB_COORDINATOR": "10.0.0.1:1234"}  # fmt: skip

# (id, environment, the one-line message's start)
BAD = [
    ("count-not-a-number", {"JAXLAB_NUM_PROCESSES": "two"},
     "JAXLAB_NUM_PROCESSES='two' is not a whole number; give an integer >= 1"),
    ("count-zero", {"JAXLAB_NUM_PROCESSES": "0"},
     "JAXLAB_NUM_PROCESSES='0' is below 1; give an integer >= 1"),
    ("id-not-a-number", {**MULTI, "JAXLAB_PROCESS_ID": "first"},
     "JAXLAB_PROCESS_ID='first' is not a whole number; give an integer >= 0"),
    ("id-negative", {"JAXLAB_PROCESS_ID": "-1"}, "JAXLAB_PROCESS_ID='-1' is below 0"),
    ("id-too-large", {**MULTI, "JAXLAB_PROCESS_ID": "2"},
     "JAXLAB_PROCESS_ID=2 is not below JAXLAB_NUM_PROCESSES=2; give each process an index from 0 "
     "to 1"),
    ("id-missing", {"JAXLAB_NUM_PROCESSES": "2", "JAXLAB_COORDINATOR": "h:1"},
     "a multi-process run (JAXLAB_NUM_PROCESSES=2) needs JAXLAB_PROCESS_ID"),
    ("coordinator-missing", {**MULTI, "JAXLAB_COORDINATOR": ""},
     "a multi-process run (JAXLAB_NUM_PROCESSES=2) needs JAXLAB_COORDINATOR=host:port"),
    ("coordinator-no-port", {**MULTI, "JAXLAB_COORDINATOR": "10.0.0.1"},
     "JAXLAB_COORDINATOR='10.0.0.1' is not host:port"),
    ("coordinator-bad-port", {**MULTI, "JAXLAB_COORDINATOR": "h:99999"},
     "JAXLAB_COORDINATOR='h:99999' is not host:port (a port in 1..65535)"),
    ("distributed", {"JAXLAB_DISTRIBUTED": "slurm"},
     "JAXLAB_DISTRIBUTED='slurm' must be auto, or 1/true/yes/on or 0/false/no/off"),
    ("pallas", {"JAXLAB_PALLAS": "fast"},
     "JAXLAB_PALLAS='fast' must be auto, or 1/true/yes/on or 0/false/no/off"),
    ("smoke", {"JAXLAB_SMOKE": "2"},
     "JAXLAB_SMOKE='2' is not a boolean; use 1/true/yes/on or 0/false/no/off"),
    ("figure-helper", {"JAXLAB_FIGURE_HELPER": "later"},
     "JAXLAB_FIGURE_HELPER='later' is not a boolean; use 1/true/yes/on or 0/false/no/off"),
    ("cache-is-a-file", {"JAXLAB_COMPILATION_CACHE": "{file}"},
     "JAXLAB_COMPILATION_CACHE='{file}' is a file; give a directory, or off"),
    ("cache-below-a-file", {"JAXLAB_COMPILATION_CACHE": "{file}/jax"},
     "JAXLAB_COMPILATION_CACHE='{file}/jax' lies below the file {file}"),
]  # fmt: skip


@pytest.mark.parametrize("env, message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_every_bad_value_is_one_line_naming_the_variable(env, message, tmp_path):
    (tmp_path / "f").write_text("a file")
    env = {k: v.replace("{file}", str(tmp_path / "f")) for k, v in env.items()}
    with pytest.raises(ConfigError) as err:
        check_environment(env)
    assert str(err.value).startswith(message.replace("{file}", str(tmp_path / "f")))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),
        ({"JAXLAB_NUM_PROCESSES": "1", "JAXLAB_PROCESS_ID": "0"}, None),
        ({"JAXLAB_NUM_PROCESSES": " "}, None),  # empty: unset
        (MULTI, Distributed(False, 2, 1, "10.0.0.1:1234")),
        ({"JAXLAB_DISTRIBUTED": "auto", "JAXLAB_NUM_PROCESSES": "3"}, Distributed(True)),
        ({"JAXLAB_DISTRIBUTED": "off", **MULTI}, Distributed(False, 2, 1, "10.0.0.1:1234")),
    ],
)
def test_distributed_settings(env, expected):
    assert distributed_settings(env) == expected


def test_the_library_start_up_refuses_a_bad_count_in_one_line(monkeypatch):
    monkeypatch.setenv("JAXLAB_NUM_PROCESSES", "two")
    with pytest.raises(ConfigError, match="JAXLAB_NUM_PROCESSES='two' is not a whole number"):
        maybe_initialize_distributed()


@pytest.mark.parametrize("value", ["1", "true", "Yes", "ON"])
def test_true_words(value):
    assert env_flag("X", env={"X": value}) is True
    assert env_switch("X", env={"X": value}) == "on"


@pytest.mark.parametrize("value", ["0", "false", "No", "OFF"])
def test_false_words(value):
    assert env_flag("X", default=True, env={"X": value}) is False
    assert env_switch("X", env={"X": value}) == "off"


@pytest.mark.parametrize(
    "value, expected", [("", "/home/u/.cache/jaxlab/jax"), ("yes", "/home/u/.cache/jaxlab/jax"),
                        ("no", None), ("0", None), ("none", None)],
)  # fmt: skip
def test_the_cache_switch_reads_booleans(value, expected):
    got = cache_dir({"HOME": "/home/u", "JAXLAB_COMPILATION_CACHE": value})
    assert (str(got) if got else None) == expected


def test_a_cache_directory_that_cannot_be_created_is_one_line():
    # Nothing, not even root, creates directories in /proc.
    env = {"JAXLAB_COMPILATION_CACHE": "/proc/jaxlab-cache/jax"}
    with pytest.raises(ConfigError) as err:
        enable_compilation_cache(env)
    assert str(err.value).startswith(
        "JAXLAB_COMPILATION_CACHE='/proc/jaxlab-cache/jax': cannot create that directory ("
    )
    assert str(err.value).endswith("); give a writable directory, or off")


def test_the_command_line_prints_one_line_and_exits_2(repo_root):
    proc = subprocess.run(
        [sys.executable, "experiments/run.py", "--exp=lm_baseline", "--smoke"],
        cwd=repo_root,
        env=cpu_env(1, JAXLAB_NUM_PROCESSES="two"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        "error: JAXLAB_NUM_PROCESSES='two' is not a whole number; give an integer >= 1 (the "
        "number of processes)"
    )
