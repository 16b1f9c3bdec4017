"""Config overrides: typing from annotations, unknown keys, wrong types, invalid combinations."""

import dataclasses
from typing import Literal

import pytest

from jaxlab.core.config import (
    ConfigError,
    TrainConfig,
    apply_overrides,
    config_diff,
    flat_keys,
    from_dict,
    parse_overrides,
    to_dict,
)
from jaxlab.lm.transformer import TransformerConfig


@dataclasses.dataclass(frozen=True)
class _Inner:
    size: int = 4
    rate: float = 0.5
    name: str = "a"
    flag: bool = False
    kind: Literal["x", "y"] = "x"
    dims: tuple[int, ...] = (1, 2)
    maybe: int | None = None


@dataclasses.dataclass(frozen=True)
class _Outer:
    inner: _Inner = _Inner()
    train: TrainConfig = TrainConfig()
    model: TransformerConfig = TransformerConfig()


def test_overrides_are_typed_from_annotations():
    cfg = apply_overrides(
        _Outer(),
        parse_overrides(
            [
                "inner.size=7",
                "inner.rate=1e-3",
                "inner.name=bob",
                "inner.flag=true",
                "inner.kind=y",
                "inner.dims=3,4,5",
                "inner.maybe=none",
                "train.steps=2e3",
            ]
        ),
    )
    assert cfg.inner == _Inner(7, 1e-3, "bob", True, "y", (3, 4, 5), None)
    assert cfg.train.steps == 2000 and isinstance(cfg.train.steps, int)


def test_unknown_key_names_closest_valid_keys():
    with pytest.raises(ConfigError, match=r"unknown config key 'train.stpes'.*train\.steps"):
        apply_overrides(_Outer(), {"train.stpes": "3"})
    with pytest.raises(ConfigError, match=r"train\.learning_rate"):
        apply_overrides(_Outer(), {"learning_rate": "3"})


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("train.steps", "abc", "expected int"),
        ("train.steps", "2.5", "expected int"),
        ("inner.flag", "maybe", "expected bool"),
        ("inner.kind", "z", "one of 'x', 'y'"),
        ("train.learning_rate", "fast", "expected float"),
    ],
)
def test_wrong_type_names_field_and_type(key, value, expected):
    with pytest.raises(ConfigError, match=expected) as err:
        apply_overrides(_Outer(), {key: value})
    assert key in str(err.value)
    assert "\n" not in str(err.value)


def test_invalid_combination_fails_when_built_and_says_what_to_change():
    with pytest.raises(ConfigError, match="num_heads=5 must divide model.d_model=256"):
        apply_overrides(_Outer(), {"model.num_heads": "5"})
    with pytest.raises(ConfigError, match="train.steps must be positive"):
        apply_overrides(_Outer(), {"train.steps": "0"})


def test_group_key_is_rejected():
    with pytest.raises(ConfigError, match="is a group"):
        apply_overrides(_Outer(), {"train": "3"})


def test_dict_round_trip_and_diff():
    cfg = apply_overrides(_Outer(), {"inner.dims": "9,8", "train.seed": "3"})
    data = to_dict(cfg)
    assert from_dict(_Outer, data) == cfg
    assert config_diff(to_dict(_Outer()), data) == ["inner.dims", "train.seed"]
    assert "model.num_heads" in set(flat_keys(cfg))


def test_bad_set_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["train.steps"])


def test_check_choices_rejects_a_bad_literal_built_from_code():
    import dataclasses
    from typing import Literal

    from jaxlab.core.config import check_choices

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        kind: Literal["a", "b"] = "a"
        maybe: Literal["x"] | None = None
        free: str = "anything"

        def __post_init__(self):
            check_choices(self, "model.")

    Cfg(kind="b", maybe="x")
    with pytest.raises(
        ConfigError, match=r"model.kind='c' is not an option; choose one of 'a', 'b'"
    ):
        Cfg(kind="c")
    with pytest.raises(ConfigError, match=r"model.maybe='y'"):
        Cfg(maybe="y")
