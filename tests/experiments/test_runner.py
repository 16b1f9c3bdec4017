"""The command line of ``experiments/run.py``: listing, exit codes and one-line user errors."""

import json
import subprocess
import sys

import pytest

from jaxlab.core import experiment


@pytest.fixture(scope="module")
def run_main(repo_root):
    sys.path.insert(0, str(repo_root / "experiments"))
    import run  # experiments/run.py

    return run.main


def test_list_shows_every_experiment_with_its_claim(run_main, capsys, repo_root):
    assert run_main(["--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = experiment.available(repo_root / "experiments")
    assert [line.split()[0] for line in lines] == names
    assert "lm_baseline" in names and "run" not in names
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--exp", "lm_baseline", "--set", "train.stpes=3"], "did you mean train.steps"),
        (["--exp", "lm_baseline", "--set", "train.steps=lots"], "train.steps='lots': expected int"),
        (["--exp", "lm_baseline", "--set", "model.num_heads=3"], "must divide model.d_model"),
        (["--exp", "lm_basline"], "did you mean lm_baseline"),
        (["--exp", "lm_baseline", "--set", "preset=huge"], "unknown preset 'huge'"),
        (["--exp", "lm_baseline", "--smoke", "--set", "preset=paper"], "conflicts"),
    ],
)
def test_user_errors_exit_2_with_one_line(run_main, capsys, argv, message):
    assert run_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("error:")


def test_list_keys(run_main, capsys):
    assert run_main(["--exp", "lm_baseline", "--smoke", "--list-keys"]) == 0
    out = capsys.readouterr().out
    assert "train.steps = 30" in out and "model.d_model = 32" in out


def test_workdir_with_other_config_is_refused(run_main, capsys, tmp_path):
    record = {"experiment": "lm_baseline", "preset": "smoke", "config": {"data": "elsewhere"}}
    (tmp_path / "config.json").write_text(json.dumps(record))
    assert run_main(["--exp", "lm_baseline", "--smoke", "--workdir", str(tmp_path)]) == 1
    assert "different config" in capsys.readouterr().err


def test_real_cli_exit_code_without_traceback(repo_root):
    proc = subprocess.run(
        [sys.executable, "experiments/run.py", "--exp=lm_baseline", "--set", "train.lr=1"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "train.learning_rate" in proc.stderr
