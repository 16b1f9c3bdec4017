"""run_with_devices: a function runs where JAX has the asked number of simulated CPU devices, and
its result or its error comes back."""

import functools

import jax
import pytest

from jaxlab.core.aot import run_with_devices
from jaxlab.core.errors import ConfigError


def device_count_or_fail(fail: bool) -> int:
    """Module-level, so that it pickles into the child process."""
    if fail:
        raise ConfigError("bad option in the child")
    return jax.device_count()


def test_runs_in_this_process_when_it_has_the_devices():
    calls = []
    assert run_with_devices(lambda: calls.append(1) or "here", jax.device_count()) == "here"
    assert calls == [1]  # a lambda does not pickle: it ran here


def test_runs_in_a_child_process_with_simulated_devices():
    assert run_with_devices(functools.partial(device_count_or_fail, False), 3) == 3


def test_an_error_in_the_child_is_raised_here():
    with pytest.raises(ConfigError, match="bad option in the child"):
        run_with_devices(functools.partial(device_count_or_fail, True), 3)
