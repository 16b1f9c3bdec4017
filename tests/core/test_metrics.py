"""Metric writers: JSONL truncation on resume, TensorBoard events read back, wandb offline."""

import json

import numpy as np
import pytest

from jaxlab.core.metrics import MetricWriter, read_metrics, to_jsonable, write_json


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
