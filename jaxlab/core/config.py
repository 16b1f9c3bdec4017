"""Frozen dataclass configs, typed ``--set a.b=value`` overrides, and user-facing config errors.

Every experiment's ``get_config()`` returns a frozen dataclass whose fields may themselves be frozen
dataclasses (``cfg.train.steps``). ``apply_overrides`` walks dotted keys, converts the string to
the field's annotated type (int, float, bool, str, Literal, Optional, tuples) and rebuilds the
dataclasses bottom-up with ``dataclasses.replace`` so that every ``__post_init__`` validation runs
again on the new values. All user mistakes raise :class:`ConfigError`, a one-line message that the
runner prints before exiting with status 2 — never a traceback from deep inside JAX.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from jaxlab.core.errors import ConfigError

__all__ = [
    "ConfigError",
    "TrainConfig",
    "apply_overrides",
    "check",
    "check_choices",
    "config_diff",
    "flat_keys",
    "from_dict",
    "parse_overrides",
    "to_dict",
]


def check(condition: bool, message: str) -> None:
    """Raises :class:`ConfigError` with ``message`` (saying what to change) unless ``condition``."""
    if not condition:
        raise ConfigError(message)


def check_choices(cfg: Any, prefix: str = "") -> None:
    """Checks every ``Literal``-typed field of a dataclass config holds one of its options.

    Call it from ``__post_init__`` so that a bad string fails when the config is built (from code
    as well as from ``--set``), not when a model is first traced. ``prefix`` is the field's dotted
    position in the experiment config (``"model."``), used in the message.

    Raises:
      ConfigError: naming the field, the value and the options.
    """
    for name, tp in _fields(type(cfg)).items():
        options = _literal_options(tp)
        value = getattr(cfg, name)
        if options is not None and value not in options:
            raise ConfigError(
                f"{prefix}{name}={value!r} is not an option; choose one of "
                + ", ".join(repr(o) for o in options)
            )


def _literal_options(tp: Any) -> tuple[Any, ...] | None:
    """The options of ``Literal[...]`` (or of ``Optional[Literal[...]]``, None included)."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [
            _literal_options(a) if a is not type(None) else (None,) for a in typing.get_args(tp)
        ]
        if all(p is not None for p in parts):
            return tuple(o for p in parts for o in p)
    return None


MAX_STEPS = 10**9  # no run here trains more steps; a larger count is a typo


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Fields of the shared training loop (:func:`jaxlab.core.loop.run_training`).

    The schedule is linear warmup to ``learning_rate`` over ``warmup_steps`` (at most ``steps``;
    equal to it, the rate peaks at the last step) then cosine decay to
    ``learning_rate * min_lr_ratio`` at ``steps``; AdamW with decoupled weight decay applied only to
    parameters with two or more dimensions (norm scales, biases are not decayed), after global-norm
    clipping at ``grad_clip`` (0 disables it). A run extended on resume (``steps`` raised) keeps the
    schedule length of the run that started it (see :func:`jaxlab.core.loop.run_training`).
    ``grad_accum_steps`` splits each global batch of ``batch_size`` rows into that many
    micro-batches whose gradients are averaged before one update (same update, less memory).
    """

    steps: int = 1000
    batch_size: int = 32
    learning_rate: float = 3e-3
    seed: int = 0
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    grad_accum_steps: int = 1
    checkpoint_every: int = 200
    keep_checkpoints: int = 3
    eval_every: int = 200
    eval_batches: int = 8
    log_every: int = 20
    tensorboard: bool = True
    wandb: Literal["off", "offline", "online"] = "off"
    wandb_project: str = "jaxlab"

    def __post_init__(self) -> None:
        check(self.steps > 0, f"train.steps must be positive, got {self.steps}")
        # A typo such as 1e12 would start a run that can never finish and, once checkpointed,
        # block the intended command in that workdir ("steps below the checkpoint").
        check(
            self.steps <= MAX_STEPS,
            f"train.steps={self.steps} is more than {MAX_STEPS:,} steps; give the steps to train",
        )
        check(self.batch_size > 0, f"train.batch_size must be positive, got {self.batch_size}")
        check(
            0 < self.learning_rate < math.inf,
            f"train.learning_rate must be positive and finite, got {self.learning_rate}",
        )
        check(self.warmup_steps >= 0, "train.warmup_steps must be >= 0")
        # Equal is allowed: the rate then rises over the whole run and peaks at the last step.
        check(
            self.warmup_steps <= self.steps,
            f"train.warmup_steps={self.warmup_steps} is above train.steps={self.steps}: the run "
            f"would end before its warmup; set train.warmup_steps <= {self.steps}",
        )
        check(0.0 <= self.min_lr_ratio <= 1.0, "train.min_lr_ratio must lie in [0, 1]")
        check(0 <= self.weight_decay < math.inf, "train.weight_decay must be >= 0 and finite")
        for name in ("b1", "b2"):
            value = getattr(self, name)
            check(
                0.0 <= value < 1.0, f"train.{name} must lie in [0, 1) (Adam's decay), got {value}"
            )
        check(0 <= self.eps < math.inf, f"train.eps must be >= 0 and finite, got {self.eps}")
        check(0 <= self.grad_clip < math.inf, "train.grad_clip must be >= 0 (0 disables clipping)")
        check(
            self.grad_accum_steps > 0,
            "train.grad_accum_steps must be positive (1: no accumulation)",
        )
        for name in ("checkpoint_every", "eval_every", "log_every", "keep_checkpoints"):
            check(getattr(self, name) > 0, f"train.{name} must be positive")
        check(self.eval_batches > 0, "train.eval_batches must be positive")


# ----------------------------------------------------------------------------- type coercion


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "comma-separated " + _type_name(typing.get_args(tp)[0]) + "s"
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def _coerce(text: str, tp: Any) -> Any:
    """Converts ``text`` to type ``tp``; raises ValueError when it does not fit."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        for option in typing.get_args(tp):
            if str(option) == text:
                return option
        raise ValueError(text)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and text.lower() in ("none", "null"):
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(text, arg)
            except ValueError:
                pass
        raise ValueError(text)
    if origin is tuple:
        (elem, *rest) = typing.get_args(tp)
        parts = [p.strip() for p in text.strip("()[] ").split(",") if p.strip()]
        return tuple(_coerce(p, elem) for p in parts)
    if tp is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError(text)
    if tp is int:
        value = float(text) if ("e" in text.lower() and "x" not in text.lower()) else None
        if value is not None:
            if not value.is_integer():
                raise ValueError(text)
            return int(value)
        return int(text, 0)
    if tp is float:
        return float(text)
    if tp is str:
        return text
    if tp is Any:
        return json.loads(text)
    raise ValueError(f"unsupported field type {tp}")


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def flat_keys(cfg: Any, prefix: str = "") -> Iterator[str]:
    """Yields every dotted key of a (nested) dataclass config."""
    for name in _fields(type(cfg)):
        value = getattr(cfg, name)
        if dataclasses.is_dataclass(value):
            yield from flat_keys(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Parses ``["a.b=1", "c=x"]`` into ``{"a.b": "1", "c": "x"}``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _unknown(key: str, cfg: Any) -> ConfigError:
    keys = list(flat_keys(cfg))
    tail = key.rsplit(".", 1)[-1]

    def abbreviates(name: str) -> bool:  # "lr" -> learning_rate, "steps" -> train.steps
        words = name.split("_")
        return tail == name or tail == "".join(w[0] for w in words if w) or tail in words

    close = [k for k in keys if abbreviates(k.rsplit(".", 1)[-1])]
    close += difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
    close = list(dict.fromkeys(close))[:3]
    hint = f"; did you mean {', '.join(close)}?" if close else "; see --list-keys"
    return ConfigError(f"unknown config key {key!r}{hint}")


def _coerce_at(cfg: Any, path: list[str], text: str, full_key: str, root: Any) -> Any:
    """The value ``text`` takes at ``path`` below ``cfg``, typed from its field's annotation."""
    fields = _fields(type(cfg))
    name = path[0]
    if name not in fields:
        raise _unknown(full_key, root)
    current = getattr(cfg, name)
    if len(path) > 1:
        if not dataclasses.is_dataclass(current):
            raise _unknown(full_key, root)
        return _coerce_at(current, path[1:], text, full_key, root)
    if dataclasses.is_dataclass(current):
        raise ConfigError(
            f"{full_key!r} is a group; set one of its fields, e.g. "
            f"{full_key}.{next(iter(flat_keys(current)))}=..."
        )
    try:
        return _coerce(text, fields[name])
    except ValueError:
        raise ConfigError(f"{full_key}={text!r}: expected {_type_name(fields[name])}") from None


def _replace(cfg: Any, changes: Mapping[tuple[str, ...], Any]) -> Any:
    """``cfg`` with every change applied by one ``dataclasses.replace`` per dataclass, bottom-up."""
    direct = {path[0]: value for path, value in changes.items() if len(path) == 1}
    for name in dict.fromkeys(path[0] for path in changes if len(path) > 1):
        below = {path[1:]: value for path, value in changes.items() if path[0] == name}
        direct[name] = _replace(getattr(cfg, name), below)
    return dataclasses.replace(cfg, **direct)


def apply_overrides(cfg: Any, overrides: Mapping[str, str]) -> Any:
    """Returns ``cfg`` with dotted-key string overrides applied, typed from the annotations.

    All the overrides of one dataclass are applied together, so its ``__post_init__`` checks the
    combination (``--set model.linear=low_rank --set model.linear_rank=8`` works in either order).

    Raises:
      ConfigError: for an unknown key (naming the closest valid ones), a value that does not parse
        as the field's type, or a combination rejected by a dataclass's ``__post_init__``.
    """
    changes = {
        tuple(key.split(".")): _coerce_at(cfg, key.split("."), text, key, cfg)
        for key, text in overrides.items()
    }
    return _replace(cfg, changes)


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-ready nested dict of a dataclass config (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def from_dict(cls: type, data: Mapping[str, Any]) -> Any:
    """Rebuilds a dataclass config of type ``cls`` from :func:`to_dict` output."""
    kwargs = {}
    for name, tp in _fields(cls).items():
        if name not in data:
            continue
        value = data[name]
        if dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
            value = from_dict(tp, value)
        elif typing.get_origin(tp) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two :func:`to_dict` trees."""
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            diffs += config_diff(a, b, f"{prefix}{key}.")
        elif a != b:
            diffs.append(f"{prefix}{key}")
    return diffs
