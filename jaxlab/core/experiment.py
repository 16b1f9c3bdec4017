"""Experiment discovery and launch: the machinery behind ``experiments/run.py``.

An experiment is one module ``experiments/<name>.py`` (names starting with ``_`` are private) with

* a module docstring whose first line states the claim it tests (shown by ``--list``), followed by
  the command, the runtime and the result measured;
* ``get_config(preset: str = "default")`` returning a frozen dataclass; every experiment knows the
  presets ``"default"`` and ``"smoke"`` (tiny shapes, under a minute), and paper-scale ones such as
  ``"paper"`` where they make sense;
* ``run(cfg, workdir: pathlib.Path) -> dict``: does the work, writes ``metrics.jsonl``, plots into
  ``workdir`` and returns the summary, which :func:`launch` writes to ``summary.json``.

Experiments are found by module name: there is no table to edit. ``launch`` builds the config
(every check of its dataclasses runs then), checks each training batch against the devices
(:func:`check_batches`), then the workdir, locks it for the run (a second run on the same workdir
refuses in one line), writes ``config.json`` and runs the experiment; re-running a command resumes
it. An experiment with sub-runs (references, arms, seeds) checks in its config every constraint
they will meet, so that a config error never leaves a sub-run behind it: its checkpoints would make
the corrected command a different run.

A workdir *holds a run* when it has a checkpoint (its own or a sub-run's) or a finished
``summary.json`` (:func:`jaxlab.core.workdir.holds_run`). Such a workdir is refused when the new
config differs from its ``config.json`` in anything but the keys a resume may change
(:data:`jaxlab.core.workdir.RESUMABLE_CHANGES`, with the reason for each). A workdir that
holds no run (for instance one whose command failed on a config error before its first checkpoint)
has its ``config.json`` replaced, so the corrected command just runs.

"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib.util
import json
import pathlib
import sys
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from jaxlab.core import finishing
from jaxlab.core.config import TrainConfig, apply_overrides, to_dict
from jaxlab.core.errors import ConfigError, RunError
from jaxlab.core.metrics import write_json
from jaxlab.core.startup import StartupProfile
from jaxlab.core.workdir import changes_to_another_run, holds_run, prepare_workdir, workdir_lock

__all__ = [
    "available",
    "check_batches",
    "claim",
    "launch",
    "load",
    "resolve_config",
    "select_preset",
]


def available(exp_dir: str | pathlib.Path) -> list[str]:
    """Names of the experiments in ``exp_dir`` (every public module except ``run``)."""
    exp_dir = pathlib.Path(exp_dir)
    return sorted(
        p.stem for p in exp_dir.glob("*.py") if not p.stem.startswith("_") and p.stem != "run"
    )


def claim(exp_dir: str | pathlib.Path, name: str) -> str:
    """First line of an experiment's docstring, read without importing it (fast ``--list``)."""
    source = (pathlib.Path(exp_dir) / f"{name}.py").read_text()
    doc = ast.get_docstring(ast.parse(source)) or "(no docstring)"
    return doc.strip().splitlines()[0]


def load(exp_dir: str | pathlib.Path, name: str) -> ModuleType:
    """Imports ``experiments/<name>.py``; an unknown name raises ConfigError naming close ones."""
    names = available(exp_dir)
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see --list"
        raise ConfigError(f"unknown experiment {name!r}{hint}")
    path = pathlib.Path(exp_dir) / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"jaxlab_experiments.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for attr in ("get_config", "run"):
        if not hasattr(module, attr):
            raise ConfigError(f"experiment {name!r} defines no {attr}()")
    return module


def select_preset(experiment: str, presets: Mapping[str, Callable[[], Any]], preset: str) -> Any:
    """The config of ``preset`` from an experiment's one table of presets.

    Every experiment declares its presets as one mapping from name to a zero-argument builder
    (``{"default": lambda: Config(...), "smoke": ..., "paper": ...}``) and its ``get_config`` is
    ``select_preset(NAME, PRESETS, preset)``, so the error for an unknown preset is the same
    everywhere.

    Raises:
      ConfigError: ``preset`` is not in the table (the message lists the ones that are).
    """
    if preset not in presets:
        close = difflib.get_close_matches(str(preset), list(presets), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"unknown preset {preset!r} for {experiment}{hint}; choose one of {', '.join(presets)}"
        )
    return presets[preset]()


def resolve_config(module: ModuleType, overrides: dict[str, str], smoke: bool) -> tuple[str, Any]:
    """Builds the experiment's config: preset (``--smoke``, ``--set preset=...``), overrides."""
    overrides = dict(overrides)
    preset = overrides.pop("preset", None)
    if smoke and preset not in (None, "smoke"):
        raise ConfigError(f"--smoke conflicts with --set preset={preset}; use one of them")
    preset = "smoke" if smoke else (preset or "default")
    cfg = module.get_config(preset)
    return preset, apply_overrides(cfg, overrides)


def _check_resumable(workdir: pathlib.Path, record: dict[str, Any]) -> None:
    """Refuses a workdir holding a run whose config differs beyond what a resume may change."""
    path = workdir / "config.json"
    if not path.exists() or not holds_run(workdir):
        return  # nothing to resume: the config is (re)written by this run
    try:
        old = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        old = None
    if not isinstance(old, dict):
        raise RunError(
            f"{path} is damaged (not a JSON object); delete it to resume the run in {workdir} "
            "with this command's config, or use another --workdir"
        )
    diffs = changes_to_another_run(old, record)
    if diffs:
        raise RunError(
            f"{workdir} holds a run with a different config ({', '.join(diffs[:5])}); "
            "use another --workdir or delete that one"
        )


def _check_not_inside_a_run(workdir: pathlib.Path) -> None:
    """Refuses a workdir inside another run's workdir (its sub-runs' files would be overwritten,
    and every later re-run of that run would break)."""
    for parent in workdir.expanduser().resolve().parents:
        record = parent / "config.json"
        if not record.is_file():
            continue
        try:
            owner = json.loads(record.read_text()).get("experiment")
        except (ValueError, AttributeError, OSError):
            continue
        if owner:
            raise ConfigError(
                f"--workdir {workdir} lies inside {parent}, the workdir of a {owner} run; "
                "use a directory outside it"
            )


def _train_configs(cfg: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every :class:`~jaxlab.core.config.TrainConfig` in a (nested) config, with its dotted key."""
    found = []
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if isinstance(value, TrainConfig):
            found.append((f"{prefix}{field.name}", value))
        elif dataclasses.is_dataclass(value):
            found += _train_configs(value, f"{prefix}{field.name}.")
    return found


def check_batches(cfg: Any) -> None:
    """Checks every ``TrainConfig`` batch of an experiment against the data-parallel devices.

    The loop checks its own batch when a run starts; an experiment with sub-runs (references,
    arms, seeds) would meet a batch that does not fit only when the run using it starts, after
    the others have trained and left checkpoints that make the corrected command a different run.
    So the launcher checks them all once the devices are known, before anything is written: on
    the experiment's ``mesh`` (a :class:`~jaxlab.core.mesh.MeshConfig` field) or the loop's
    default, all devices data-parallel.

    Raises:
      ConfigError: naming the key (``reference_train.batch_size``, say) and the multiple to use.
    """
    found = _train_configs(cfg) if dataclasses.is_dataclass(cfg) else []
    if not found:
        return
    from jaxlab.core.loop import check_batch_fits  # deferred: they import JAX
    from jaxlab.core.mesh import AxisRules, MeshConfig, batch_shards, make_mesh

    mesh_cfg = getattr(cfg, "mesh", None)
    mesh_cfg = mesh_cfg if isinstance(mesh_cfg, MeshConfig) else None
    shards = batch_shards(make_mesh(mesh_cfg), AxisRules())
    for key, train in found:
        check_batch_fits(train, shards, key, mesh_keys=mesh_cfg is not None)


def launch(
    exp_dir: str | pathlib.Path,
    name: str,
    *,
    overrides: dict[str, str] | None = None,
    smoke: bool = False,
    workdir: str | pathlib.Path | None = None,
    profile: StartupProfile | None = None,
) -> dict[str, Any]:
    """Resolves the config, locks the workdir, writes ``config.json``, runs, writes the summary.

    ``profile`` (from ``run.py --profile-startup``) is told where each phase ends and listens to
    JAX's compilation events during the run.

    Raises:
      ConfigError: a bad config, a batch that does not fit the devices (:func:`check_batches`) or
        a bad workdir (nothing is written).
      RunError: another run holds the workdir, the workdir holds a run with another config, or
        the run cannot go on.
    """
    module = load(exp_dir, name)
    if profile is not None:
        profile.mark(f"import of experiments/{name}.py")
    preset, cfg = resolve_config(module, overrides or {}, smoke)
    if workdir is None:
        workdir = pathlib.Path("runs") / (f"{name}_smoke" if smoke else name)
    _check_not_inside_a_run(pathlib.Path(workdir))
    # Multi-process start-up first, so that each process locks its own file (by process index),
    # and the devices are known for the last config check.
    from jaxlab.core.mesh import maybe_initialize_distributed  # deferred: it imports JAX

    maybe_initialize_distributed()
    check_batches(cfg)
    workdir = prepare_workdir(workdir)
    if profile is not None:
        profile.listen_to_jax()
        profile.mark("config, workdir, distributed set-up")
    record = {"experiment": name, "preset": preset, "config": to_dict(cfg)}
    with workdir_lock(workdir):
        _check_resumable(workdir, record)
        write_json(workdir / "config.json", record)
        start = time.perf_counter()
        # A run's last checkpoint is written while the experiment goes on (its figures, its own
        # evaluations), and is on disk before the summary is (jaxlab.core.finishing).
        with finishing.later():
            summary = module.run(cfg, workdir)
        summary = dict(summary or {})
        summary.setdefault("experiment", name)
        summary.setdefault("preset", preset)
        summary["wall_seconds"] = round(time.perf_counter() - start, 2)
        write_json(workdir / "summary.json", summary)
        if profile is not None:
            profile.mark("run (data, compilation, steps, eval, checkpoints)")
    return summary
