"""The scaling analysis of the RMT paper's comparison: reading the tokens and FLOPs to reach a loss
off validation curves, per seed and over seeds, and the power laws across sizes."""

import numpy as np
import pytest

from jaxlab.core.scaling import mean_sd
from jaxlab.methods.rmt.scaling import (
    fraction_to_reach,
    pair_reach,
    scaling_fits,
    tokens_to_reach,
)


def test_tokens_to_reach_interpolates_the_first_crossing():
    tokens, losses = [100, 200, 300, 400], [4.0, 3.0, 2.0, 2.5]
    assert tokens_to_reach(tokens, losses, 2.5) == pytest.approx(250.0)  # between 3.0 and 2.0
    assert tokens_to_reach(tokens, losses, 4.0) == 100.0  # reached at the first evaluation
    assert tokens_to_reach(tokens, losses, 1.0) is None


def test_fraction_to_reach_scales_tokens_by_the_flops_ratio():
    transformer = ([100, 200, 400], [4.0, 3.0, 2.0])
    rmt = ([100, 200, 400], [3.5, 2.0, 1.5])  # reaches 2.0 at 200 tokens: half of 400
    out = fraction_to_reach(rmt, transformer, 3.0, 4.0)
    assert out == {"target_loss": 2.0, "tokens_fraction": 0.5, "flops_fraction": 0.375}
    never = fraction_to_reach(([100, 400], [5.0, 4.0]), transformer, 3.0, 4.0)
    assert never["tokens_fraction"] is None and never["flops_fraction"] is None


def _run(seed, losses):
    return {"seed": seed, "tokens": [100, 200, 400], "eval_loss": losses}


def test_pair_reach_per_seed_and_over_the_seeds_that_reach():
    transformer_runs = [_run(0, [4.0, 3.0, 2.0]), _run(1, [4.0, 3.0, 2.0]), _run(2, [4, 3, 2.0])]
    rmt_runs = [_run(0, [3.5, 2.0, 1.5]), _run(1, [3.0, 2.5, 2.0]), _run(2, [5.0, 4.0, 3.0])]
    counts = {"train_flops_per_token_no_vocab": 3.0, "measured_train_flops_per_token": 6.0}
    tf_counts = {"train_flops_per_token_no_vocab": 4.0, "measured_train_flops_per_token": 12.0}
    out = pair_reach(transformer_runs, rmt_runs, tf_counts, counts)
    assert (out["reached"], out["seeds"]) == (2, 3)
    assert [s["seed"] for s in out["per_seed"]] == [0, 1, 2]
    assert [s["tokens_fraction"] for s in out["per_seed"]] == [0.5, 1.0, None]
    assert out["per_seed"][0]["measured_flops_fraction"] == 0.25  # 0.5 * 6 / 12
    assert out["tokens_fraction"] == mean_sd([0.5, 1.0])
    assert out["flops_fraction"] == mean_sd([0.375, 0.75])
    with pytest.raises(ValueError):  # one run per seed on both sides
        pair_reach(transformer_runs, rmt_runs[:2], tf_counts, counts)


def test_scaling_fits_recover_a_power_law_across_sizes():
    flops_per_token = np.array([6e6, 2.4e7, 9.6e7])  # 6 FLOPs per parameter and token
    tokens = 1e9
    loss = 300.0 * (flops_per_token * tokens) ** -0.2
    entries = [
        {
            "train_flops_per_token": f,
            "non_embedding_params": int(f / 6),
            "final_eval_loss": {"mean": float(l_), "sd": 0.0, "n": 1},
            "runs": [{"tokens": [tokens / 2, tokens]}],
        }
        for f, l_ in zip(flops_per_token, loss, strict=True)
    ]
    fit = scaling_fits(entries)
    np.testing.assert_allclose(fit.compute, flops_per_token * tokens)
    np.testing.assert_array_equal(fit.params, (flops_per_token / 6).astype(int))
    assert fit.vs_flops.b == pytest.approx(0.2, rel=1e-6) and fit.vs_flops.c == 0.0  # 3 sizes
    assert fit.vs_params.b == pytest.approx(0.2, rel=1e-6)
