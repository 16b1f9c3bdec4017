"""sst_pretrain's seed-paired gap reductions and crossover step, on hand-made results."""

import sys

import pytest


@pytest.fixture(scope="module")
def sst_pretrain(repo_root):
    sys.path.insert(0, str(repo_root / "experiments"))
    import sst_pretrain

    return sst_pretrain


def _runs(finals, curves):
    return {
        "runs": [
            {"final_ppl": f, "eval_steps": [100, 200, 300], "eval_ppl": c}
            for f, c in zip(finals, curves, strict=True)
        ]
    }


def test_paired_gap_reduction_and_crossover(sst_pretrain):
    results = {
        "transformer/full": _runs([4.0, 4.0], [[5, 4.5, 4.0], [5, 4.5, 4.0]]),
        "transformer/sst": _runs([5.0, 5.2], [[7, 5.6, 5.0], [7, 5.6, 5.2]]),
        "transformer/lora": _runs([6.0, 6.0], [[6, 6.4, 6.0], [6, 5.4, 6.0]]),
    }
    out = sst_pretrain._paired(results)["paired"]["lora"]
    # seed 0: 1 - (5 - 4)/(6 - 4) = 0.5; seed 1: 1 - (5.2 - 4)/(6 - 4) = 0.4
    assert out["gap_reduction_per_seed"] == pytest.approx([0.5, 0.4])
    assert out["gap_reduction"]["mean"] == pytest.approx(0.45)
    # seed means of SST - LoRA: +1.0, -0.3, -0.9: ahead from step 200 on
    assert out["sst_minus_baseline_ppl"] == pytest.approx([1.0, -0.3, -0.9])
    assert out["sst_ahead_from_step"] == 200
    results["transformer/sst"]["runs"][1]["eval_ppl"][2] = 8.0  # behind again at the end
    assert sst_pretrain._paired(results)["paired"]["lora"]["sst_ahead_from_step"] is None
