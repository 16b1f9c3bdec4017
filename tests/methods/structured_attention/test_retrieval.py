"""The recall probe: its prompts hold the answer at the query's key, and the one-layer model's
FLOP count is the closed form of its maps."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.data.icl_retrieval import retrieval_batch
from jaxlab.methods.structured_attention.icl_model import ICLConfig
from jaxlab.methods.structured_attention.retrieval import RetrievalModel, RetrievalTask


def test_the_query_is_one_of_the_keys_and_the_target_its_value():
    b = retrieval_batch(3, 7, 16, 5, 9)
    rows = np.arange(16)
    np.testing.assert_array_equal(b["query"], b["xs"][rows, b["index"]])
    np.testing.assert_array_equal(b["target"], b["ys"][rows, b["index"]])
    again = retrieval_batch(3, 7, 16, 5, 9)
    assert all(np.array_equal(b[k], again[k]) for k in b)  # a pure function of (seed, index)
    assert not np.array_equal(b["xs"], retrieval_batch(3, 8, 16, 5, 9)["xs"])


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
    T, D = 7, 16  # N + 1 tokens; read-in (d+1) -> D, scores 2 (2 T D^2) + 2 T^2 D, v and out
    want = 2 * T * 5 * D + (4 * T * D * D + 2 * T * T * D) + 4 * T * D * D + 2 * T * T * D + 2 * D
    assert model.flops() == want
