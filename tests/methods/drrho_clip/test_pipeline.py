"""The experiments' shared steps: the strong reference's own clean data, and the arms' losses."""

import dataclasses

import numpy as np
import pytest

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.methods.drrho_clip.pipeline import (
    DataConfig,
    arm_loss,
    arm_reference,
    check_recipe,
    make_reference_pairs,
    make_splits,
)
from jaxlab.methods.drrho_clip.task import LossConfig

SMALL = DataConfig(
    train_pairs=64, reference_pairs=48, weak_reference_pairs=16, test_pairs=16, held_out_pairs=4
)


def test_strong_reference_data_is_clean_its_own_and_the_same_for_every_seed():
    ref = make_reference_pairs(SMALL)
    assert len(ref.images) == 48 and ref.matched.all()  # all clean, its own size
    again = make_reference_pairs(dataclasses.replace(SMALL, seed=3, noise=0.5))
    np.testing.assert_array_equal(ref.images, again.images)  # one reference serves every seed
    np.testing.assert_array_equal(ref.tokens, again.tokens)
    learner = make_splits(dataclasses.replace(SMALL, noise=0.0))
    # a stream of its own: none of its first pairs is one of the learner's or the weak one's
    for other in (learner.train, learner.weak_reference):
        assert not any((ref.images[:16] == img).all() for img in other.images)


def test_arms_map_to_their_objective_variant_and_reference():
    base = LossConfig()
    assert (base.jest_score, base.jest_keep, base.jest_chunks, base.tau) == (
        "softmax",
        0.2,
        2,
        0.01,
    )
    sig = arm_loss(base, "jest_sigmoid")
    assert (sig.objective, sig.jest_score, sig.jest_keep, sig.jest_chunks) == (
        "jest", "sigmoid", 0.5, 16,
    )  # fmt: skip
    assert arm_loss(base, "drrho_weak").objective == arm_loss(base, "drrho").objective == "drrho"
    assert arm_reference("drrho_weak") == "weak" and arm_reference("drrho") == "strong"
    recipe = TrainConfig(steps=1, batch_size=16, warmup_steps=0)
    refs = {"reference_train": (recipe, "reference_pairs")}
    with pytest.raises(ConfigError, match="needs 80 of the 64"):  # JEST's 20%: 5× the batch
        check_recipe(SMALL, recipe, base, ("clip", "jest"), refs)
    check_recipe(SMALL, recipe, base, ("clip", "jest_sigmoid"), refs)  # 50%: 32 pairs fit


def test_run_shares_give_the_noisy_share_of_all_gated_anchors():
    from jaxlab.methods.drrho_clip.pipeline import run_shares

    # 4 logged rows of 256 anchors each: the gate fires on 2 anchors in the first row (1 noisy)
    # and 6 in the third (6 noisy): 7 of the 8 gated anchors are noisy. The mean of per-row
    # ratios, (1/2 + 0 + 1 + 0) / 4 = 3/8, is what the earlier per-step statistic gave.
    counts = [(2, 1), (0, 0), (6, 6), (0, 0)]
    rows = [
        {"step": i, "gate_off": off / 256, "gate_off_and_noisy": both / 256, "noisy_share": 0.3}
        for i, (off, both) in enumerate(counts)
    ]
    rows.append({"step": 4, "eval_zero_shot_acc": 0.5})  # an eval row holds none of them
    out = run_shares(rows)
    assert out["gate_off_noisy"] == pytest.approx(7 / 8)
    assert out["gate_off"] == pytest.approx(8 / 1024)
    assert out["noisy_share"] == pytest.approx(0.3) and "gate_off_and_noisy" not in out
    assert run_shares([{"gate_off": 0.0, "gate_off_and_noisy": 0.0}])["gate_off_noisy"] == 0
    assert run_shares([{"noisy_share": 0.1}]) == {"noisy_share": 0.1}  # CLIP/JEST arms
