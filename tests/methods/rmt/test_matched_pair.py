"""A matched pair differs in its residual stream only: every field of the shared LM config is equal,
whatever recipe it is given, and the models' non-residual parts are built alike."""

import dataclasses

import pytest

from jaxlab.lm.config import LMConfig
from jaxlab.methods.rmt.scaling import MATCHED_RECIPE, matched_pair

SHARED = [f.name for f in dataclasses.fields(LMConfig)]


@pytest.mark.parametrize(
    "recipe",
    [
        {},
        dict(init="gpt2", alibi="press"),
        dict(init="authors", norm="layernorm", positions="learned"),
    ],
)
def test_every_shared_field_is_equal(recipe):
    t, r = matched_pair(96, 3, head_dim=16, d_key=24, seq_len=64, vocab_size=256, **recipe)
    assert {k: getattr(t, k) for k in SHARED} == {k: getattr(r, k) for k in SHARED}
    for key, value in {**MATCHED_RECIPE, **recipe}.items():
        assert getattr(t, key) == value
    assert (t.d_model, t.num_heads, t.head_dim) == (r.width, r.rank, r.d_value)
