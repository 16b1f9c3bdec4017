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
    recipe = TrainConfig(steps=1, batch_size=16)
    with pytest.raises(ConfigError, match="needs 80 of the 64"):  # JEST's 20%: 5× the batch
        check_recipe(SMALL, recipe, recipe, base, ("clip", "jest"))
    check_recipe(SMALL, recipe, recipe, base, ("clip", "jest_sigmoid"))  # 50%: 32 pairs fit
