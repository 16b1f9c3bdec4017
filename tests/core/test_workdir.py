"""The workdir: one run at a time (a real second process), stale locks, bad paths, held runs."""

import fcntl
import os

import pytest

from jaxlab.core import finishing
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


def _held(workdir) -> bool:
    """Whether the lock file of ``workdir`` is locked (by any open file, this process's too)."""
    fd = os.open(workdir / ".lock-0", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_inside_the_runners_block_the_lock_outlasts_a_last_save_still_being_written(tmp_path):
    seen = []
    with finishing.later():
        with workdir_lock(tmp_path), workdir_lock(tmp_path):  # a run inside another's hold
            finishing.defer(lambda: seen.append(_held(tmp_path)))  # its last save, handed over
        assert _held(tmp_path)  # the save goes on, and so does the lock
    assert seen == [True] and not _held(tmp_path)
    with finishing.later():  # nothing handed over: released where the block ends, as outside
        with workdir_lock(tmp_path):
            pass
        assert not _held(tmp_path)


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
