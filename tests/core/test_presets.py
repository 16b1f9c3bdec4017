"""One preset table per experiment, one error for an unknown preset."""

import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.core.experiment import select_preset

PRESETS = {"default": lambda: "d", "smoke": lambda: "s", "paper": lambda: "p"}


def test_select_builds_only_the_chosen_preset():
    built = []
    table = {k: (lambda k=k: built.append(k) or k) for k in PRESETS}
    assert select_preset("exp", table, "smoke") == "smoke" and built == ["smoke"]


def test_unknown_preset_names_the_choices():
    with pytest.raises(
        ConfigError,
        match=r"unknown preset 'papr' for exp \(did you mean paper\?\)"
        r"; choose one of default, smoke, paper",
    ):
        select_preset("exp", PRESETS, "papr")
