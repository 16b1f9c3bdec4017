"""Metric writers: JSONL truncation on resume and rewrite for experiments, damaged files,
TensorBoard events read back, wandb offline and its stable run id."""

import json

import numpy as np
import pytest

from jaxlab.core.errors import RunError
from jaxlab.core.metrics import MetricWriter, read_metrics, to_jsonable, wandb_run_id, write_json
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.testing.files import immutable


def test_jsonl_and_tensorboard_round_trip(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricWriter(tmp_path, tensorboard=True) as writer:
        for step in (1, 2, 3):
            writer.write(step, {"loss": np.float32(1.0 / step), "note": "x"})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    scalars = events.Scalars("loss")
    assert [s.step for s in scalars] == [1, 2, 3]
    assert scalars[-1].value == pytest.approx(1 / 3)


def test_resume_drops_rows_after_the_checkpoint(tmp_path):
    with MetricWriter(tmp_path, tensorboard=False) as writer:
        for step in range(1, 6):
            writer.write(step, {"loss": step})
    with MetricWriter(tmp_path, start_step=3, tensorboard=False) as writer:
        writer.write(4, {"loss": 40})
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path)] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 40),
    ]


def test_wandb_offline_mode_logs_without_network(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with MetricWriter(tmp_path, tensorboard=False, wandb="offline", config={"a": 1}) as writer:
        writer.write(1, {"loss": 0.5})
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_json_helpers_handle_numpy_and_non_finite(tmp_path):
    write_json(tmp_path / "s.json", {"a": np.arange(3), "b": np.float64("nan"), "c": (1, 2)})
    data = json.loads((tmp_path / "s.json").read_text())
    assert data == {"a": [0, 1, 2], "b": "nan", "c": [1, 2]}
    assert to_jsonable(np.int64(4)) == 4


def test_concurrent_write_json_from_two_processes(tmp_path):
    """Processes of a multi-host run write config.json together; neither may lose its rename."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(tmp_path / "c.json",)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert json.loads((tmp_path / "c.json").read_text()) == {"a": 1}


def _write_many(path):
    for _ in range(200):
        write_json(path, {"a": 1})


def test_experiment_level_writer_rewrites_instead_of_appending(tmp_path):
    for _ in range(2):  # the experiment run twice on the same workdir
        with MetricWriter(tmp_path, tensorboard=False) as writer:
            for step in (0, 1):
                writer.write(step, {"loss": step})
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1]


def test_half_written_last_line_is_dropped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 1}\n{"step": 2, "lo')
    assert read_metrics(tmp_path) == [{"step": 1, "loss": 1}]
    with MetricWriter(tmp_path, start_step=1, tensorboard=False) as writer:
        writer.write(2, {"loss": 2})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


@pytest.mark.parametrize(
    "text", ['{"step": 1}\ngarbage\n{"step": 3}\n', '{"step": 1}\n[1, 2]\n', "\x00\xff"]
)
def test_damage_in_the_middle_is_a_one_line_error_naming_the_file(tmp_path, text):
    (tmp_path / "metrics.jsonl").write_bytes(text.encode("latin-1"))
    with pytest.raises(RunError, match=r"metrics.jsonl is damaged") as info:
        MetricWriter(tmp_path, start_step=1, tensorboard=False)
    assert "\n" not in str(info.value)


def test_wandb_run_id_is_stable_across_processes(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from jaxlab.core.metrics import wandb_run_id; print(wandb_run_id(sys.argv[1]))"
    )
    ids = {
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "my run")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    }
    assert ids == {wandb_run_id(tmp_path / "my run")}
    assert wandb_run_id(tmp_path / "other") != wandb_run_id(tmp_path / "my run")
    assert ids.pop().startswith("my_run-")


# Each file a run writes, written once more when its target cannot be replaced.
REWRITES = {
    "config.json": lambda wd: write_json(wd / "config.json", {"a": 2}),
    "summary.json": lambda wd: write_json(wd / "summary.json", {"a": 2}),
    "metrics.jsonl": lambda wd: MetricWriter(wd, start_step=1, tensorboard=False),
    "plot.png": lambda wd: save_figure(
        curves_figure({"a": ([0, 1], [1, 2])}, xlabel="x", ylabel="y"), wd / "plot.png"
    ),
}


def _first_version(workdir, name):
    if name == "metrics.jsonl":
        with MetricWriter(workdir, tensorboard=False) as writer:
            writer.write(1, {"loss": 1.0})
    else:
        (workdir / name).write_text('{"a": 1}\n')


@pytest.mark.parametrize("name", REWRITES)
def test_a_file_that_cannot_be_replaced_is_one_line_and_leaves_no_temporary_file(tmp_path, name):
    _first_version(tmp_path, name)
    before = (tmp_path / name).read_bytes()
    with immutable(tmp_path / name) as ok:
        if not ok:
            pytest.skip("needs chattr +i (root on a file system with the attribute)")
        with pytest.raises(RunError) as err:
            REWRITES[name](tmp_path)
        leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert str(err.value) == (
        f"cannot write {tmp_path / name} (Operation not permitted); make it and its directory "
        "writable (or move it away), then re-run the same command to resume"
    )
    assert leftovers == []
    assert (tmp_path / name).read_bytes() == before  # untouched


@pytest.mark.parametrize("name", REWRITES)
def test_a_directory_in_place_of_a_file_is_one_line(tmp_path, name):
    (tmp_path / name).mkdir()  # no user, root included, can rename a file over a directory
    with pytest.raises(RunError) as err:
        REWRITES[name](tmp_path)
    doing = "read" if name == "metrics.jsonl" else "write"  # a resume reads the rows first
    assert str(err.value).startswith(f"cannot {doing} {tmp_path / name} (Is a directory); ")
    assert "\n" not in str(err.value)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
