"""The command line of ``experiments/run.py``: listing, exit codes, one table of bad inputs that
each give one line, and the workdir rules (late errors, locks, resuming after a divergence)."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from jaxlab.core import experiment
from jaxlab.core.errors import RunError
from jaxlab.core.metrics import read_metrics
from jaxlab.core.workdir import holds_run
from jaxlab.testing.files import immutable
from jaxlab.testing.processes import cpu_env, hold_workdir


def test_list_shows_every_experiment_with_its_claim(run_main, capsys, repo_root):
    assert run_main(["--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = experiment.available(repo_root / "experiments")
    assert [line.split()[0] for line in lines] == names
    assert "lm_baseline" in names and "run" not in names
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)


def test_the_runner_has_its_figures_drawn_by_the_helper(run_main, monkeypatch, tmp_path):
    """With ``JAXLAB_FIGURE_HELPER`` on (the default outside the suite) the run's figure is written
    by the helper process (that it draws the same pixels: tests/core/test_figure_helper.py)."""
    from jaxlab.core import figure_helper

    monkeypatch.setenv("JAXLAB_FIGURE_HELPER", "on")
    written = []
    draw = figure_helper.FigureHelper.draw

    def spy(self, name, args, kwargs, path):
        done = draw(self, name, args, kwargs, path)
        written.append((name, path.name, done))
        return done

    monkeypatch.setattr(figure_helper.FigureHelper, "draw", spy)
    assert run_main([*SMOKE4, "--set", "train.steps=2", "--workdir", str(tmp_path)]) == 0
    assert written == [("curves_figure", "val_bits_per_byte.png", True)]
    assert (tmp_path / "val_bits_per_byte.png").stat().st_size > 1000
    assert figure_helper.active() is None  # stopped with the run


@pytest.fixture(scope="module")
def finished(run_main, tmp_path_factory):
    """A finished 4-step ``lm_baseline --smoke`` run to copy into cases that resume one."""
    workdir = tmp_path_factory.mktemp("finished")
    assert run_main([*SMOKE4, "--workdir", str(workdir)]) == 0
    return workdir


SMOKE4 = ["--exp", "lm_baseline", "--smoke", "--set", "train.steps=4", "--set",
          "train.tensorboard=false"]  # fmt: skip
LM = ["--exp", "lm_baseline"]


def _copy_finished(workdir, finished):
    shutil.copytree(finished, workdir, dirs_exist_ok=True)


def _file(workdir, finished):
    (workdir / "f").write_text("not a directory")


def _config_not_an_object(workdir, finished):
    _copy_finished(workdir, finished)
    (workdir / "config.json").write_text("[1, 2]")


def _metrics_damaged_in_the_middle(workdir, finished):
    _copy_finished(workdir, finished)
    lines = (workdir / "metrics.jsonl").read_text().splitlines(keepends=True)
    (workdir / "metrics.jsonl").write_text(lines[0] + "garbage\n" + "".join(lines[1:]))


def _other_config(workdir, finished):
    _copy_finished(workdir, finished)
    record = json.loads((workdir / "config.json").read_text())
    record["config"]["data"] = "elsewhere"
    (workdir / "config.json").write_text(json.dumps(record))


# Every bad input reaching the command line: (id, argv, setup of the workdir, exit code, message).
# "{w}" in argv is the test's workdir; setup(workdir, finished) prepares it.
BAD_INPUT = [
    ("unknown-key", [*LM, "--set", "train.stpes=3"], None, 2, "did you mean train.steps"),
    ("wrong-type", [*LM, "--set", "train.steps=lots"], None, 2, "train.steps='lots': expected int"),
    ("heads", [*LM, "--set", "model.num_heads=3"], None, 2, "must divide model.d_model"),
    ("unknown-exp", ["--exp", "lm_basline"], None, 2, "did you mean lm_baseline"),
    ("unknown-preset", [*LM, "--set", "preset=huge"], None, 2, "unknown preset 'huge'"),
    ("smoke-and-preset", [*LM, "--smoke", "--set", "preset=paper"], None, 2, "conflicts"),
    ("infinite-lr", [*LM, "--set", "train.learning_rate=inf"], None, 2,
     "train.learning_rate must be positive and finite"),
    ("adam-b1", [*LM, "--set", "train.b1=1"], None, 2, "train.b1 must lie in [0, 1)"),
    ("adam-b2", [*LM, "--set", "train.b2=-0.1"], None, 2, "train.b2 must lie in [0, 1)"),
    ("negative-eps", [*LM, "--set", "train.eps=-1e-8"], None, 2, "train.eps must be >= 0"),
    ("no-accumulation", [*LM, "--set", "train.grad_accum_steps=0"], None, 2,
     "train.grad_accum_steps must be positive"),
    ("head-dim-0", ["--exp", "rmt_scaling", "--set", "head_dim=0"], None, 2,
     "head_dim must be positive"),
    ("empty-workdir", [*LM, "--smoke", "--workdir="], None, 2, "--workdir is empty; give a dir"),
    ("workdir-is-a-file", [*LM, "--smoke", "--workdir", "{w}/f"], _file, 2, "is a file"),
    ("workdir-below-a-file", [*LM, "--smoke", "--workdir", "{w}/f/run"], _file, 2,
     "cannot create --workdir"),
    ("byte-vocab-below-256", [*LM, "--smoke", "--workdir", "{w}", "--set", "model.vocab_size=200"],
     None, 2, "output vocabulary (200) is smaller than the data's (256 byte values)"),
    ("batch-over-devices", [*SMOKE4, "--workdir", "{w}", "--set", "train.batch_size=6"], None, 2,
     "does not divide over the 8 data-parallel devices"),
    ("accumulation-over-devices", [*SMOKE4, "--workdir", "{w}", "--set",
     "train.grad_accum_steps=4"], None, 2, "micro-batches that divide over the 8"),
    ("steps-below-checkpoint", [*SMOKE4, "--set", "train.steps=2", "--workdir", "{w}"],
     _copy_finished, 2, "train.steps=2 is below step 4"),
    ("config-not-an-object", [*SMOKE4, "--workdir", "{w}"], _config_not_an_object, 1,
     "config.json is damaged (not a JSON object)"),
    ("metrics-damaged", [*SMOKE4, "--workdir", "{w}"], _metrics_damaged_in_the_middle, 1,
     "metrics.jsonl is damaged at line 2"),
    ("other-config", [*SMOKE4, "--workdir", "{w}"], _other_config, 1,
     "holds a run with a different config (config.data)"),
    ("absurd-steps", [*LM, "--set", "train.steps=1e12"], None, 2,
     "train.steps=1000000000000 is more than 1,000,000,000 steps"),
    ("warmup-above-steps", [*SMOKE4, "--set", "train.warmup_steps=5", "--workdir", "{w}"], None,
     2, "train.warmup_steps=5 is above train.steps=4: the run would end before its warmup; set "
     "train.warmup_steps <= 4"),
    ("steps-below-the-preset-warmup", [*LM, "--smoke", "--set", "train.steps=1", "--workdir",
     "{w}"], None, 2, "train.warmup_steps=2 is above train.steps=1"),
    ("sst-grid-below-warmup", ["--exp", "sst_mlp", "--smoke", "--set", "grid_steps=4",
     "--workdir", "{w}"], None, 2,
     "grid_steps=4 is below train.warmup_steps=5: the rate-grid runs would end before"),
    ("float64-without-x64", [*LM, "--set", "model.dtype=float64"], None, 2,
     'start the command with JAX_ENABLE_X64=1 (from your own code: '
     'jax.config.update("jax_enable_x64", True) before building the config)'),
    ("icl-width-over-heads", ["--exp", "icl_regression", "--set", "widths=(25,)"], None, 2,
     "widths=(25,): 25 does not split into the 8 heads of mha8, btt8, mlr8; give widths that are "
     "positive multiples of 8"),
    ("icl-16-heads", ["--exp", "icl_regression", "--set", "models=mha16", "--set", "widths=24"],
     None, 2, "widths=(24,): 24 does not split into the 16 heads of mha16"),
    ("icl-ranks-of-another-width", ["--exp", "icl_regression", "--set", "widths=40"], None, 2,
     "mlr_ranks=(4, 2, 1, 1) sum to 8, but the 8 heads of mlr8 at widths[0]=40 are 5 wide; give "
     "mlr_ranks that sum to 5"),
    ("workdir-inside-a-run", [*SMOKE4, "--workdir", "{w}/rmt_D32_seed0"], _copy_finished, 2,
     "lies inside"),
    # Each of these once failed only after some training had run (issue 31).
    ("sst-rank-above-width", ["--exp", "sst_pretrain", "--smoke", "--set", "sst.rank=64",
     "--workdir", "{w}"], None, 2, "sst.rank for model's maps: rank=64 must lie in [1,"),
    ("drrho-unknown-method", ["--exp", "drrho_clip", "--set", "methods=clip,nope"], None, 2,
     "methods: 'nope' is not one of"),
    ("drrho-batch-above-split", ["--exp", "drrho_clip", "--smoke", "--set",
     "train.batch_size=1000", "--workdir", "{w}"], None, 2, "train.batch_size=1000 needs 5000"),
    ("negative-seed", ["--exp", "drrho_clip", "--set", "seeds=-1"], None, 2,
     "holds a negative seed"),
    ("empty-models", ["--exp", "mlr_lm", "--set", "models="], None, 2, "models is empty"),
    ("grid-alpha-above-1", ["--exp", "warmpot_digits", "--set", "grid_alphas=0.5,1.5"], None, 2,
     "grid_alphas and grid_betas must lie in (0, 1]; got [1.5]"),
    # Each of these once failed only after other arms of its sweep had trained (or trained the
    # same arm twice): smoke presets, so that the old code fails within seconds.
    ("grid-beta-above-1", ["--exp", "warmpot_digits", "--smoke", "--set", "grid_betas=2",
     "--workdir", "{w}"], None, 2, "grid_alphas and grid_betas must lie in (0, 1]; got [2.0]"),
    ("rmt-d-key-0", ["--exp", "rmt_residual_sweep", "--smoke", "--set", "d_keys=8,0",
     "--workdir", "{w}"], None, 2, "d_keys=(8, 0): at d_key=0, model.d_key must be positive"),
    ("rmt-d-key-twice", ["--exp", "rmt_residual_sweep", "--smoke", "--set", "d_keys=8,8",
     "--workdir", "{w}"], None, 2, "d_keys=(8, 8) repeats a value"),
    ("rmt-width-twice", ["--exp", "rmt_scaling", "--smoke", "--set", "widths=32,32", "--set",
     "layers=1,2", "--set", "time_rounds=0", "--workdir", "{w}"], None, 2,
     "widths=[32, 32] repeats a width"),
    ("drrho-size-twice", ["--exp", "drrho_scaling", "--smoke", "--set", "sizes=64,64",
     "--workdir", "{w}"], None, 2, "sizes=[64, 64] repeats a size"),
    ("max-source-0", ["--exp", "warmpot_digits", "--set", "max_source=0"], None, 2,
     "max_source and max_target must be >= 1"),
    ("warmpot-hidden-0", ["--exp", "warmpot_digits", "--set", "train.hidden=0"], None, 2,
     "hidden and features must be >= 1"),
    ("sst-mlp-hidden-0", ["--exp", "sst_mlp", "--set", "hidden=0"], None, 2,
     "d_model, hidden and rows must be >= 1"),
    ("warmpot-unknown-recipe", ["--exp", "warmpot_digits", "--set", "recipes=authors"], None, 2,
     "unknown recipes ['authors']; choose from ('authors_eps_eta',)"),
    ("warmpot-unknown-head", ["--exp", "warmpot_digits", "--set", "train.head=relu"], None, 2,
     "train.head='relu': expected one of 'authors', 'pada_relu'"),
    ("warmpot-infinite-lr", ["--exp", "warmpot_digits", "--set", "train.learning_rate=inf"], None,
     2, "train.learning_rate: not a finite number"),
]  # fmt: skip


@pytest.mark.parametrize(
    "argv, setup, code, message",
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_exits_with_one_line(
    run_main, capsys, tmp_path, request, argv, setup, code, message
):
    if setup is not None:
        setup(tmp_path, request.getfixturevalue("finished"))
    capsys.readouterr()
    assert run_main([a.replace("{w}", str(tmp_path)) for a in argv]) == code
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("error:"), err


def test_an_unwritable_metrics_file_on_resume_is_one_line_and_the_run_resumes_once_fixed(
    run_main, capsys, tmp_path, finished
):
    _copy_finished(tmp_path, finished)
    argv = [*SMOKE4, "--set", "train.steps=6", "--workdir", str(tmp_path)]
    with immutable(tmp_path / "metrics.jsonl") as ok:
        if not ok:
            pytest.skip("needs chattr +i (root on a file system with the attribute)")
        capsys.readouterr()
        assert run_main(argv) == 1
        err = capsys.readouterr().err.strip()
    assert err == (
        f"error: cannot write {tmp_path / 'metrics.jsonl'} (Operation not permitted); make it and "
        "its directory writable (or move it away), then re-run the same command to resume"
    )
    assert not list(tmp_path.glob("*.tmp"))
    assert run_main(argv) == 0
    assert "resumed from step 4" in capsys.readouterr().out
    assert read_metrics(tmp_path)[-1]["step"] == 6


# drrho_clip --smoke: each of these once failed only after the references had trained, leaving
# checkpoints that made the corrected command "a run with a different config" in that workdir.
DRRHO_LATE = [
    ("batch-of-one", ["train.batch_size=1"],
     "train.batch_size=1: a contrastive batch needs at least 2 pairs"),
    ("jest-chunks", ["train.batch_size=5"],
     "train.batch_size=5: the jest arm keeps 5 pairs per step and samples them in 2 chunks "
     "(loss.jest_chunks=2), which must divide them; use a multiple of 2 for train.batch_size or "
     "change loss.jest_chunks"),
    ("batch-over-devices", ["train.batch_size=12"],
     "train.batch_size=12 does not divide over the 8 data-parallel devices; use a multiple of it"),
    ("reference-batch-over-devices", ["reference_train.batch_size=12"],
     "reference_train.batch_size=12 does not divide over the 8 data-parallel devices"),
    ("jest-draw-over-devices", ["loss.jest_keep=0.3", "train.batch_size=16"],
     "train.batch_size=16: the jest arm draws 53 pairs per step (keeping 0.3 of them), which do "
     "not divide over the 8 data-parallel devices"),
]  # fmt: skip


@pytest.mark.parametrize(
    "sets, message", [c[1:] for c in DRRHO_LATE], ids=[c[0] for c in DRRHO_LATE]
)
def test_a_drrho_config_error_comes_before_any_sub_run(run_main, capsys, tmp_path, sets, message):
    workdir = tmp_path / "run"
    argv = ["--exp", "drrho_clip", "--smoke", "--workdir", str(workdir)]
    capsys.readouterr()
    assert run_main([*argv, *(a for kv in sets for a in ("--set", kv))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {message}") and len(err.splitlines()) == 1, err
    # Nothing trained: at most the config record, so the corrected command runs in place.
    assert not holds_run(workdir)
    assert not workdir.exists() or {p.name for p in workdir.iterdir()} <= {"config.json", ".lock-0"}


def test_list_keys(run_main, capsys):
    assert run_main(["--exp", "lm_baseline", "--smoke", "--list-keys"]) == 0
    out = capsys.readouterr().out
    assert "train.steps = 60" in out and "model.d_model = 32" in out


def test_late_config_error_does_not_poison_the_default_workdir(
    run_main, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the default workdir runs/lm_baseline_smoke lands here
    workdir = tmp_path / "runs" / "lm_baseline_smoke"
    # A batch that does not fit the devices is found before anything is written ...
    assert run_main([*SMOKE4, "--set", "train.batch_size=6"]) == 2
    assert "does not divide over the 8" in capsys.readouterr().err
    assert not workdir.exists()
    # ... a vocabulary below the data's only once the data is read, after config.json.
    assert run_main([*SMOKE4, "--set", "model.vocab_size=200"]) == 2
    assert "smaller than the data's" in capsys.readouterr().err
    assert (workdir / "config.json").exists() and not holds_run(workdir)
    assert run_main([*SMOKE4, "--set", "train.batch_size=8"]) == 0
    record = json.loads((workdir / "config.json").read_text())
    assert record["config"]["train"]["batch_size"] == 8
    assert record["config"]["model"]["vocab_size"] == 256


def test_a_second_run_on_a_held_workdir_refuses_in_one_line(run_main, capsys, tmp_path, repo_root):
    proc = hold_workdir(tmp_path, repo_root)
    try:
        assert run_main([*SMOKE4, "--workdir", str(tmp_path)]) == 1
        err = capsys.readouterr().err.strip()
        assert err == (
            f"error: {tmp_path} is in use by another run (process {proc.pid}); wait for it to "
            "finish, or use another --workdir"
        )
        assert not (tmp_path / "config.json").exists()  # refused before writing anything
    finally:
        proc.kill()
        proc.wait()
    # The killed holder's lock file stays behind and does not block the run.
    assert run_main([*SMOKE4, "--workdir", str(tmp_path)]) == 0


CLIMB = """\"\"\"A parameter climbs at the learning rate to a cliff where the loss is NaN.\"\"\"
import dataclasses

from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.testing.toy import ClimbTask


@dataclasses.dataclass(frozen=True)
class Config:
    train: TrainConfig = TrainConfig(
        steps=6, batch_size=8, learning_rate=0.3, warmup_steps=0, min_lr_ratio=1.0,
        checkpoint_every=3, eval_every=6, log_every=1, tensorboard=False,
    )


def get_config(preset="default"):
    return Config()


def run(cfg, workdir):
    return run_training(ClimbTask(), cfg.train, workdir, verbose=False)
"""


def test_nan_error_names_a_rerun_that_resumes_from_the_last_good_checkpoint(tmp_path):
    (tmp_path / "exps").mkdir()
    (tmp_path / "exps" / "climb.py").write_text(CLIMB)
    workdir = tmp_path / "run"
    # lr 0.3: w = 0.9 after step 3 (checkpointed), 1.2 after step 4, so the loss of step 5 is NaN.
    with pytest.raises(RunError) as info:
        experiment.launch(tmp_path / "exps", "climb", workdir=workdir)
    message = str(info.value)
    assert message.startswith("non-finite loss (nan) at step 5; the last good checkpoint (step 3)")
    assert message.count("\n") == 0 and "it resumes from step 3" in message
    # Follow the advice literally.
    key, value = re.search(r"--set (train\.learning_rate)=(\S+)", message).groups()
    summary = experiment.launch(tmp_path / "exps", "climb", workdir=workdir, overrides={key: value})
    assert summary["resumed_from"] == 3 and summary["final_step"] == 6
    rows = read_metrics(workdir)
    assert [r["step"] for r in rows] == list(range(1, 7))
    w = [r["w"] for r in rows]
    np.testing.assert_allclose(w[:4], [0.0, 0.3, 0.6, 0.9], atol=1e-5)  # as before the NaN
    np.testing.assert_allclose(np.diff(w[3:]), float(value), rtol=1e-3)  # then the lower rate
    record = json.loads((workdir / "config.json").read_text())
    assert record["config"]["train"]["learning_rate"] == float(value)


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


def test_the_float64_advice_works_from_the_command_line(repo_root):
    # The message once said jax.enable_x64(True), which no command line can do.
    command = [sys.executable, "experiments/run.py", *LM, "--smoke", "--list-keys", "--set",
               "model.dtype=float64"]  # fmt: skip
    proc = subprocess.run(
        command, cwd=repo_root, env=cpu_env(1, JAX_ENABLE_X64="1"), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "model.dtype = 'float64'" in proc.stdout


def test_every_preset_of_every_experiment_builds(repo_root):
    # Config checks run when a preset is built, so a preset that could never run (a batch above
    # its eval split, say) fails here rather than on the accelerator it was written for.
    exp_dir = repo_root / "experiments"
    built = 0
    for name in experiment.available(exp_dir):
        module = experiment.load(exp_dir, name)
        for preset in getattr(module, "PRESETS", {"default": None}):
            overrides = {} if preset == "smoke" else {"preset": preset}
            assert experiment.resolve_config(module, overrides, preset == "smoke")[0] == preset
            built += 1
    assert built > 2 * len(experiment.available(exp_dir))


def test_a_full_disk_during_training_is_one_line_and_the_run_resumes(repo_root, tmp_path):
    # A real full disk: a small tmpfs (root can mount one; skipped elsewhere), and the real
    # command in its own process, whose whole stderr is read: orbax's writer threads print
    # hundreds of lines there when a save fails; the runner prints one and exits 1, and once there
    # is room the same command finishes the run from its last checkpoint.
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    command = [sys.executable, "experiments/run.py", *LM, "--smoke", "--set", "train.steps=20",
               "--set", "train.checkpoint_every=10", "--workdir", str(disk / "run")]  # fmt: skip
    try:
        full = subprocess.run(
            command, cwd=repo_root, env=cpu_env(8), capture_output=True, text=True, timeout=300
        )
        err = full.stderr.strip()
        assert full.returncode == 1 and len(err.splitlines()) == 1, err[-3000:]
        assert err.startswith("error: no space left on the device of")
        subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
        again = subprocess.run(command, cwd=repo_root, env=cpu_env(8), capture_output=True)
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads((disk / "run" / "summary.json").read_text())["final_step"] == 20
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
