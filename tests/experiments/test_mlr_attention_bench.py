"""The mlr_attention_bench cost model against a pair-by-pair count, and its config checks."""

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.core.experiment import load
from jaxlab.nn.mlr_attention import mlr_covering_levels


@pytest.fixture(scope="module")
def exp(repo_root):
    return load(repo_root / "experiments", "mlr_attention_bench")


def _count(T, ranks, v_dim, per_logit, n_qk, n_v):
    """Pair by pair: the blockwise program computes every causal pair and the whole diagonal
    blocks of the finest level; a pair covered by ``n`` levels contracts their ``r_l``."""
    L = len(ranks)
    count = mlr_covering_levels(T, L)
    computed = np.tril(np.ones((T, T), bool)) | (count == L)
    width = np.cumsum(ranks)[count - 1]
    per_pair = n_qk * 2 * width + n_v * 2 * v_dim + per_logit
    return float(per_pair[computed].sum()), int(computed.sum())


@pytest.mark.parametrize("ranks", [(4, 2, 1, 1), (8,), (2, 2, 2, 2, 2, 2, 2, 2)])
def test_cost_model_counts_every_computed_pair(exp, ranks):
    T, D = 256, sum(ranks)
    assert sum(exp.computed_pairs(T, len(ranks))) == _count(T, ranks, D, 0.0, 1, 1)[1]
    # forward: QK, PV; forward + backward: QK twice, dQ, dK; PV, dV, dP
    for pass_, counts in (("forward", (1, 1)), ("forward_backward", (4, 3))):
        for c in (0.0, 7.5):
            mlr = _count(T, ranks, D, c, *counts)[0]
            mha = _count(T, (D,) + (0,) * (len(ranks) - 1), D, c, *counts)[0]
            np.testing.assert_allclose(exp.model_ratio(ranks, T, D, c, pass_), mlr / mha)
            np.testing.assert_allclose(
                exp.cost_model(np.cumsum(ranks), T, D, c, pass_), mlr, rtol=1e-12
            )


def test_each_pass_is_charged_its_elementwise_pipelines(exp):
    """The forward runs the forward pipeline and one exponential per logit; forward + backward
    both pipelines and two exponentials (the backward recomputes P)."""
    costs = {"exp_cost_matmul_flops": 3.0, "forward_matmul_flops": 10.0,
             "backward_matmul_flops": 20.0}  # fmt: skip
    assert exp.per_logit_costs(costs, "forward") == {"elementwise": 10.0, "exp_only": 3.0}
    assert exp.per_logit_costs(costs, "forward_backward") == {"elementwise": 30.0, "exp_only": 6.0}


def test_elementwise_pipelines_are_the_kernels_steps(exp):
    """The timed pipelines compute the forward step's unnormalised softmax and the backward's
    dS (FlashAttention-2 Alg. 2), checked against numpy."""
    rng = np.random.default_rng(0)
    s, dp = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 5))
    lse, delta = rng.standard_normal((2, 3, 1)), rng.standard_normal((2, 3, 1))
    p, z = exp._forward_elementwise(s)
    want = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(p, want, rtol=1e-6)
    np.testing.assert_allclose(z, want.sum(-1), rtol=1e-6)
    p, ds = exp._backward_elementwise(s, lse, dp, delta)
    np.testing.assert_allclose(ds, np.exp(s - lse) * (dp - delta), rtol=1e-5)


def test_low_ranks_must_cut_the_qk_work_to_a_quarter(exp):
    exp.Config(seq_len=256, ranks=(8, 4, 2, 2), low_ranks=(1, 1, 1, 13))
    with pytest.raises(ConfigError, match="low_ranks"):
        exp.Config(seq_len=256, ranks=(8, 4, 2, 2), low_ranks=(4, 4, 4, 4))
    with pytest.raises(ConfigError, match="sum to"):
        exp.Config(seq_len=256, ranks=(8, 4, 2, 2), low_ranks=(1, 1, 1, 1))


@pytest.mark.parametrize("ranks", [(4, 2, 1, 1), (2, 2, 2, 2, 2, 2, 2, 2)])
def test_timed_products_equal_the_flop_model_when_time_is_flops(exp, ranks):
    """With every product timed at its FLOPs (2 per multiply-add), the timed-products ratio is
    the FLOP model's: each pass charges each of its products once, at the region's width."""
    T, D = 256, sum(ranks)
    times = {f"{p}_{w}": 2.0 * w for p in ("qk", "dq", "dk") for w in np.cumsum(ranks)}
    times |= {f"{p}_{D}": 2.0 * D for p in exp.PRODUCT_SPECS}
    for pass_ in exp.PASS_COUNTS:
        np.testing.assert_allclose(
            exp.timed_products_ratio(ranks, T, times, 5.0, pass_),
            exp.model_ratio(ranks, T, D, 5.0, pass_),
        )
