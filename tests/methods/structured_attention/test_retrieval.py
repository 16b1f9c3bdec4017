"""The recall probe: its prompts hold the answer at the query's key (exactly, or under the query
noise of its stated size), and the one-layer model's FLOP count is the closed form of its maps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.flops import dot_flops
from jaxlab.data.icl_retrieval import retrieval_batch
from jaxlab.methods.structured_attention.icl_model import ICLConfig
from jaxlab.methods.structured_attention.retrieval import EVAL_SEED, RetrievalModel, RetrievalTask


def test_the_query_is_one_of_the_keys_and_the_target_its_value():
    b = retrieval_batch(3, 7, 16, 5, 9)
    rows = np.arange(16)
    np.testing.assert_array_equal(b["query"], b["xs"][rows, b["index"]])
    np.testing.assert_array_equal(b["target"], b["ys"][rows, b["index"]])
    again = retrieval_batch(3, 7, 16, 5, 9)
    assert all(np.array_equal(b[k], again[k]) for k in b)  # a pure function of (seed, index)
    assert not np.array_equal(b["xs"], retrieval_batch(3, 8, 16, 5, 9)["xs"])


def test_query_noise_is_a_fresh_key_scaled_and_leaves_the_prompt_alone():
    d, sigma = 8, 0.7
    exact = retrieval_batch(5, 2, 4000, d, 3)
    noisy = retrieval_batch(5, 2, 4000, d, 3, query_noise=sigma)
    for k in ("xs", "ys", "target", "index"):  # the same keys, values and draws of j
        np.testing.assert_array_equal(noisy[k], exact[k])
    diff = (noisy["query"] - exact["query"]).astype(np.float64)
    # Each coordinate of a key is N(0, 1/d), so the noise's is N(0, sigma^2 / d): 32,000 draws put
    # the sample variance within 3%. Fresh, so independent of every key of its prompt: its dot
    # product with a key then has mean square sigma^2 / d (noise that copied a key would put
    # sigma^2 on one of the N).
    np.testing.assert_allclose(diff.var(), sigma**2 / d, rtol=0.03)
    dots_BN = np.einsum("bd,bnd->bn", diff, exact["xs"].astype(np.float64))
    np.testing.assert_allclose(np.mean(dots_BN**2), sigma**2 / d, rtol=0.1)
    # The task hands its noise to the generator (its evaluation stream is retrieval_batch's).
    task = RetrievalTask(ICLConfig(dim=d, n_points=3, d_model=16), query_noise=sigma)
    got = task.eval_batches(4, 1)[0]["query"]
    np.testing.assert_array_equal(got, retrieval_batch(EVAL_SEED, 0, 4, d, 3, sigma)["query"])


def test_model_answers_from_attention_only_and_counts_its_flops():
    cfg = ICLConfig(dim=4, n_points=6, d_model=16, num_layers=1, num_heads=2, scoring="mha")
    model = RetrievalModel(cfg, rngs=nnx.Rngs(0))
    batch = RetrievalTask(cfg).eval_batches(3, 1)[0]
    pred = model(batch["xs"], batch["ys"], batch["query"])
    assert pred.shape == (3,)
    # Values reach the answer only through attention: zeroing the value map leaves the query's
    # own residual, which holds no y.
    model.attn.v.kernel[...] = jnp.zeros_like(model.attn.v.kernel[...])
    moved = model(batch["xs"], batch["ys"] + 1.0, batch["query"])
    np.testing.assert_allclose(moved, model(batch["xs"], batch["ys"], batch["query"]), atol=1e-6)
    # N + 1 tokens; read-in (d+1) -> D; for the one query: its projection, T key projections and
    # T logits; T value rows, one value sum and one output row; the read-out.
    T, D = 7, 16
    scores = 2 * (1 + T) * D * D + 2 * T * D
    want = 2 * T * 5 * D + scores + 2 * (T + 1) * D * D + 2 * T * D + 2 * D
    assert model.flops() == want


@pytest.mark.parametrize("scoring, heads", [("mha", 4), ("btt", 2), ("mlr", 2)])
def test_flops_match_the_program_and_the_last_row_equals_the_full_attention(scoring, heads, x64):
    cfg = ICLConfig(dim=4, n_points=9, d_model=16, num_layers=1, num_heads=heads,
                    scoring=scoring, mlr_ranks=(3, 2, 1), rms_cap=True)  # fmt: skip
    model = RetrievalModel(cfg, rngs=nnx.Rngs(1))
    batch = {k: jnp.asarray(v) for k, v in RetrievalTask(cfg).eval_batches(1, 1)[0].items()}
    lowered = jax.jit(lambda b: model(b["xs"], b["ys"], b["query"])).lower(batch)
    assert dot_flops(lowered) == pytest.approx(model.flops(), rel=1e-9)
    # Scoring only the last S positions gives the full attention's last S rows (float64).
    nnx.update(model, jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), nnx.state(model)))
    for _, m in nnx.iter_graph(model):  # the linear maps' compute dtype too
        if isinstance(m, nnx.Module) and getattr(m, "dtype", None) is not None:
            m.dtype = jnp.dtype(jnp.float64)
    h = jax.random.normal(jax.random.key(2), (2, 10, 16), jnp.float64)
    full = model.attn(h)
    for S in (1, 3):
        last = model.attn(h, num_queries=S)
        assert last.dtype == jnp.float64
        np.testing.assert_allclose(last, full[:, -S:], atol=1e-12, rtol=1e-12)
