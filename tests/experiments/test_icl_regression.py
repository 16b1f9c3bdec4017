"""icl_regression: the default is the issue's point of the authors' grid with their optimiser
settings, and the equal-FLOPs comparison reads each seed's curve at the smallest total compute."""

import dataclasses

import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.core.experiment import load
from jaxlab.methods.structured_attention.icl_model import ICLTransformer


@pytest.fixture(scope="module")
def exp(repo_root):
    return load(repo_root / "experiments", "icl_regression")


def test_default_is_the_smallest_binding_point_of_the_authors_grid(exp):
    cfg = exp.get_config()
    assert (cfg.dims, cfg.widths, cfg.mlr_ranks, cfg.seeds) == (
        (16,),
        (64,),
        (4, 2, 1, 1),
        (0, 1, 2),
    )
    t = cfg.train
    # train_ICL.py / muPify: AdamW (0.9, 0.95, eps 1e-20), no decay, no clipping, 1,000-step
    # warm-up then constant; the warm-up ends before the run does
    assert (t.b1, t.b2, t.eps, t.weight_decay, t.grad_clip) == (0.9, 0.95, 1e-20, 0.0, 0.0)
    assert (t.warmup_steps, t.min_lr_ratio) == (1000, 1.0) and t.steps > t.warmup_steps
    assert cfg.curriculum_fraction == 0.06
    for name in cfg.models:
        m = cfg.model(name, 16, 64)
        assert (m.n_points, m.parametrization, m.qk_norm, m.rms_cap) == (32, "mup", True, True)
        assert m.num_heads == (1 if name == "mha1" else 8)
        model = ICLTransformer(m, rngs=nnx.Rngs(0))  # zero-initialised output maps
        for layer in [model.read_out, *(b.attn.out for b in model.blocks)]:
            assert not np.asarray(layer.kernel[...]).any()
        assert not any(np.asarray(b.mlp.down.kernel[...]).any() for b in model.blocks)
    with pytest.raises(ConfigError, match="warmup_steps=1000 is above train.steps=500"):
        dataclasses.replace(t, steps=500)
    paper = exp.get_config("paper")
    assert paper.num_layers == 6 and paper.train.batch_size == 64 and paper.widths[-1] == 1024


def test_equal_flops_reads_each_seed_at_the_smallest_total_compute(exp):
    steps = [100, 200, 300, 400]
    entries = {
        "mha8": {"train_flops_per_step": 10.0, "runs": [
            {"steps": steps, "last_error": [0.9, 0.8, 0.7, 0.6]},
            {"steps": steps, "last_error": [1.0, 0.9, 0.5, 0.4]}]},
        "btt8": {"train_flops_per_step": 20.0, "runs": [
            {"steps": steps, "last_error": [0.9, 0.5, 0.3, 0.2]},
            {"steps": steps, "last_error": [0.8, 0.6, 0.2, 0.1]}]},
    }  # fmt: skip
    got = exp.at_equal_flops(entries)
    assert got["flops"] == 4000.0  # mha8's 400 steps at 10; btt8 reaches it at step 200
    assert got["per_seed"]["mha8"] == pytest.approx([0.6, 0.4])
    assert got["per_seed"]["btt8"] == pytest.approx([0.5, 0.6])
    entries["btt8"]["train_flops_per_step"] = 16.0  # step 250: halfway between 0.5 and 0.3
    assert exp.at_equal_flops(entries)["per_seed"]["btt8"] == pytest.approx([0.4, 0.4])


def test_comparisons_on_the_zero_predictors_plateau_are_undecided(exp):
    """Two models both within the margin of the zero predictor's error differ by evaluation noise:
    no verdict; once either is below the plateau line, the lower error wins."""
    plateau = 0.95 * 0.919
    assert exp._below(0.9186, 0.9189, plateau) is None
    assert exp._below(0.60, 0.9189, plateau) is True
    assert exp._below(0.9189, 0.60, plateau) is False
    assert exp._all_decided([True, None]) is None
    assert exp._all_decided([True, True]) is True
    assert exp._all_decided([True, False]) is False


def test_plateau_margin_outside_the_unit_interval_is_a_one_line_error(exp):
    with pytest.raises(ConfigError, match="plateau_margin"):
        exp.Config(plateau_margin=1.5)
