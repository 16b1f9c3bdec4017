"""Seed sweeps: arms × seeds, each trained once in its own sub-workdir, and their averaged curves.

A comparison trains every *arm* (a model, a method, a size) with every seed, each run in
``WORKDIR/<arm>_seed<seed>``. :func:`sweep` drives those runs through one per-run callable and
records each finished run in ``<run>/run.json`` (its result and its full resolved config), so a
re-run of the parent experiment trains nothing that has finished, and an unfinished run resumes
from its checkpoint through the usual loop. A record is reused only for the same config, with the
launcher's resume rules (:func:`jaxlab.core.workdir.changes_to_another_run`): a change to one of the
keys a resume may change (``train.steps``, ``train.learning_rate``, ...) runs the callable again,
which resumes the run as the loop does and records the new result; any other change refuses in one
line, as the launcher refuses a workdir holding a run with another config. A result holding a
non-finite number is a :class:`~jaxlab.core.errors.RunError`, as a diverged step is in the loop,
and nothing is recorded.

The curve helpers read a run's eval curve from its ``metrics.jsonl`` (:func:`read_curve`), average
curves over seeds with the sample standard deviation of :func:`jaxlab.core.scaling.mean_sd`
(:func:`mean_curve`), and read a curve at an equal budget of tokens or FLOPs by linear
interpolation (:func:`value_at`). :func:`check_seeds` is the one validation of a ``seeds`` field.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxlab.core.config import config_diff
from jaxlab.core.errors import ConfigError, RunError
from jaxlab.core.metrics import read_metrics, to_jsonable, write_json
from jaxlab.core.scaling import mean_sd
from jaxlab.core.workdir import changes_to_another_run

__all__ = ["Run", "check_seeds", "mean_curve", "read_curve", "run_dir", "sweep", "value_at"]

RECORD = "run.json"


class Run(NamedTuple):
    """One (arm, seed) run: its full resolved config and the function that trains it.

    Attributes:
      config: everything that defines the run (e.g. ``{"model": ..., "train": ...}`` as
        :func:`~jaxlab.core.config.to_dict` trees); recorded with the result and compared on reuse.
      train: ``train(workdir) -> result`` trains (or resumes) the run in ``workdir`` and returns a
        JSON-ready dict of its results.
    """

    config: Mapping[str, Any]
    train: Callable[[pathlib.Path], dict[str, Any]]


def check_seeds(seeds: Sequence[int], key: str = "seeds") -> None:
    """Checks a ``seeds`` field: a non-empty tuple of distinct non-negative integers.

    Raises:
      ConfigError: one line naming ``key`` and what to change.
    """
    if not isinstance(seeds, tuple) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in seeds
    ):
        raise ConfigError(f"{key}={seeds!r} must be a tuple of integers, e.g. --set {key}=0,1,2")
    if not seeds:
        raise ConfigError(f"{key} is empty; give at least one seed, e.g. --set {key}=0")
    if min(seeds) < 0:
        raise ConfigError(f"{key}={list(seeds)} holds a negative seed; seeds are integers >= 0")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{key}={list(seeds)} repeats a seed; give distinct seeds")


def run_dir(workdir: str | pathlib.Path, arm: str, seed: int) -> pathlib.Path:
    """The sub-workdir of one (arm, seed) run."""
    return pathlib.Path(workdir) / f"{arm}_seed{seed}"


def _non_finite(value: Any, path: str = "") -> str | None:
    """The dotted key of the first non-finite float in a JSON-ready tree, or None."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = _non_finite(v, f"{path}.{k}" if path else str(k))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _non_finite(v, f"{path}[{i}]")
            if found is not None:
                return found
    elif isinstance(value, float | np.floating | np.ndarray):
        arr = np.asarray(value)
        if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            return path or "result"
    return None


def _read_record(path: pathlib.Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise RunError(f"{path} is damaged; delete it to train that run again")
    return record


def _run_one(workdir: pathlib.Path, run: Run) -> dict[str, Any]:
    """The result of one run: its record's when finished with this config, else trained now."""
    path = workdir / RECORD
    config = to_jsonable(run.config)
    record = _read_record(path)
    if record is not None:
        diffs = config_diff(record["config"], config)
        fixed = changes_to_another_run(record["config"], config)
        if fixed:
            raise RunError(
                f"{workdir} holds a run with a different config ({', '.join(fixed[:5])}); "
                "use another --workdir or delete that run"
            )
        if not diffs and record.get("result") is not None:
            return record["result"]
    # Recorded before training, so a run killed half-way is still checked against its config.
    write_json(path, {"config": config, "result": None})
    result = run.train(workdir)
    bad = _non_finite(result)  # before to_jsonable, which writes non-finite floats as strings
    if bad is not None:
        raise RunError(
            f"the run in {workdir} finished with a non-finite {bad}; nothing is recorded. Re-run "
            "with a lower --set train.learning_rate, or check the data"
        )
    result = to_jsonable(result)
    write_json(path, {"config": config, "result": result})
    return result


def sweep(
    workdir: str | pathlib.Path,
    arms: Sequence[str],
    seeds: Sequence[int],
    spec: Callable[[str, int], Run],
) -> dict[str, list[dict[str, Any]]]:
    """Runs every arm with every seed once, each in :func:`run_dir`, reusing finished runs.

    Args:
      workdir: the parent experiment's workdir.
      arms: names of the arms, used in the sub-workdir names (``<arm>_seed<seed>``).
      seeds: the seeds every arm is trained with.
      spec: ``spec(arm, seed)`` gives the :class:`Run` of one arm and seed.

    Returns:
      ``{arm: [result of each seed, in the order of seeds]}``.

    Raises:
      RunError: a recorded run whose config differs beyond the resumable keys, a damaged record,
        or a result holding a non-finite number (plus whatever the run itself raises).
    """
    return {
        arm: [_run_one(run_dir(workdir, arm, seed), spec(arm, seed)) for seed in seeds]
        for arm in arms
    }


def read_curve(
    workdir: str | pathlib.Path, metric: str = "eval_loss", x: str = "tokens_seen"
) -> tuple[list[float], list[float]]:
    """A run's curve of ``metric`` against ``x`` (e.g. ``step``), from the rows that hold it.

    Raises:
      RunError: the run in ``workdir`` logged no ``metric``.
    """
    rows = [r for r in read_metrics(workdir) if metric in r]
    if not rows:
        raise RunError(f"{workdir} holds no {metric} in its metrics.jsonl; re-run that run")
    return [r[x] for r in rows], [r[metric] for r in rows]


def mean_curve(
    xs: Sequence[Sequence[float]], ys: Sequence[Sequence[float]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and sample sd over seeds, point by point, of curves logged at the same x.

    Args:
      xs: each seed's x values (they must agree: runs of one recipe log at the same steps).
      ys: each seed's values.

    Returns:
      ``(x, mean, sd)`` as float64 arrays; the sd of one seed is 0 (see
      :func:`~jaxlab.core.scaling.mean_sd`).

    Raises:
      ValueError: the seeds' x values differ.
    """
    x = np.asarray(xs[0], np.float64)
    if any(not np.array_equal(np.asarray(other, np.float64), x) for other in xs[1:]):
        raise ValueError("the seeds' curves are logged at different x values")
    stats = [mean_sd(column) for column in np.asarray(ys, np.float64).T]
    return x, np.array([s["mean"] for s in stats]), np.array([s["sd"] for s in stats])


def value_at(x: Sequence[float], y: Sequence[float], at: float, scale: float = 1.0) -> float:
    """A curve's value at ``at`` on the axis ``x * scale``, by linear interpolation.

    ``scale`` puts a curve logged against tokens on the FLOP axis (FLOPs per token), so two models
    are compared at equal tokens (``scale = 1``) or at equal FLOPs. Outside the curve the nearest
    end value is returned (``numpy.interp``).
    """
    return float(np.interp(at, np.asarray(x, np.float64) * scale, np.asarray(y, np.float64)))
