"""The timing protocol: warm-up calls are not timed, rounds interleave, medians are reported."""

import jax.numpy as jnp
import pytest

from jaxlab.core.timing import time_call, time_interleaved


def test_warmup_and_repeats_call_counts():
    calls = []
    timing = time_call(lambda: calls.append(1) or jnp.zeros(()), repeats=3, calls=2, warmup=2)
    assert len(calls) == 2 + 3 * 2
    assert len(timing.samples) == 3 and timing.median in timing.samples
    assert timing.spread >= 0


def test_interleaved_order():
    order = []
    fns = {n: (lambda n=n: order.append(n)) for n in "ab"}
    out = time_interleaved(fns, repeats=2, calls=1, warmup=1)
    assert order == ["a", "b", "a", "b", "a", "b"]  # warm-up a, b; then rounds a b, a b
    assert set(out) == {"a", "b"}


@pytest.mark.parametrize("kw", [dict(repeats=0), dict(calls=0), dict(warmup=-1)])
def test_bad_settings(kw):
    with pytest.raises(ValueError):
        time_call(lambda: None, **kw)
