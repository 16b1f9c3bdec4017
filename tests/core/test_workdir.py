"""The workdir: one run at a time (a real second process), stale locks, bad paths, held runs."""

import os

import pytest

from jaxlab.core.errors import ConfigError, RunError
from jaxlab.core.workdir import holds_run, prepare_workdir, workdir_lock
from jaxlab.testing.processes import hold_workdir


def test_a_second_process_is_refused_while_the_first_holds_the_workdir(tmp_path, repo_root):
    proc = hold_workdir(tmp_path, repo_root)
    try:
        with pytest.raises(RunError, match=rf"in use by another run \(process {proc.pid}\)"):
            with workdir_lock(tmp_path):
                pass
    finally:
        proc.kill()
        proc.wait()
    # Killed: the OS released its lock; the file it left behind does not block.
    assert (tmp_path / ".lock-0").exists()
    with workdir_lock(tmp_path):
        pass


def test_stale_lock_file_does_not_block(tmp_path):
    (tmp_path / ".lock-0").write_text("12345\n")
    with workdir_lock(tmp_path) as path:
        assert path.read_text() == f"{os.getpid()}\n"


def test_lock_is_reentrant_in_one_process_and_per_process_index(tmp_path, monkeypatch):
    with workdir_lock(tmp_path), workdir_lock(tmp_path):
        monkeypatch.setenv("JAXLAB_PROCESS_ID", "1")  # another process of the same run
        with workdir_lock(tmp_path) as path:
            assert path.name == ".lock-1"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: "", "--workdir is empty; give a directory"),
        (lambda p: (p / "f").write_text("x") and p / "f", "is a file; give a directory"),
        (lambda p: (p / "f").write_text("x") and p / "f" / "sub", "cannot create --workdir"),
    ],
    ids=["empty", "file", "below-a-file"],
)
def test_unusable_workdirs_are_config_errors(tmp_path, make, message):
    with pytest.raises(ConfigError, match=message):
        prepare_workdir(make(tmp_path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_workdir_is_a_config_error(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="is not writable"):
            prepare_workdir(tmp_path)
    finally:
        tmp_path.chmod(0o700)


def test_holds_run(tmp_path):
    assert not holds_run(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "checkpoints" / "step.orbax-checkpoint-tmp-1").mkdir(parents=True)
    assert not holds_run(tmp_path)  # a save killed before it completed holds nothing
    (tmp_path / "sub" / "checkpoints" / "10").mkdir(parents=True)
    assert holds_run(tmp_path)
