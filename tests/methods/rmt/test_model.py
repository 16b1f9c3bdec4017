"""RMT: storage/retrieval algebra, init variance (Table 1) by Monte Carlo, presets, FLOPs.

Causality, document masking and sharding are the language-model contract
(``tests/contracts/test_language_models.py``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.lm.transformer import TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig, retrieve, store
from jaxlab.methods.rmt.model import MatrixNorm, retrieve_reference, store_reference
from jaxlab.nn.attention import dot_product_attention
from jaxlab.nn.layers import count_params

TINY = RMTConfig(seq_len=16, num_layers=2, rank=4, d_key=8, d_value=8, d_ff=64)


def test_store_then_retrieve_is_exact_with_orthonormal_keys():
    R, K, V = 5, 8, 6
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(K, K)))
    keys_RK = jnp.asarray(q[:R])  # R orthonormal rows (R <= Dk)
    y = jax.random.normal(jax.random.key(0), (2, 3, R, V))
    np.testing.assert_allclose(retrieve(store(y, keys_RK), keys_RK.T), y, atol=1e-5)


def test_store_and_retrieve_match_explicit_sums():
    y = np.random.default_rng(1).normal(size=(1, 1, 3, 4))
    w = np.random.default_rng(2).normal(size=(3, 5))
    x = sum(np.outer(w[h], y[0, 0, h]) for h in range(3))  # X = sum_h w_h y_h^T, Dk x Dv
    xt = store(jnp.asarray(y), jnp.asarray(w))  # jaxlab's layout: X^T, (Dv, Dk) per token
    np.testing.assert_allclose(xt[0, 0], x.T, rtol=1e-5)
    r = np.random.default_rng(3).normal(size=(5, 3))
    np.testing.assert_allclose(retrieve(xt, jnp.asarray(r))[0, 0], r.T @ x, rtol=1e-5)


@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_store_and_retrieve_values_and_gradients_equal_plain_einsums(dtype, tol):
    """The hand-written VJPs against JAX's autodiff of the one-einsum references."""
    k = jax.random.split(jax.random.key(0), 6)
    y, w = jax.random.normal(k[0], (2, 3, 5, 6), dtype), jax.random.normal(k[1], (5, 8))
    x, r = jax.random.normal(k[2], (2, 3, 6, 8), dtype), jax.random.normal(k[3], (8, 5))
    for fast, ref, a, b, key in [
        (store, store_reference, y, w, k[4]),
        (retrieve, retrieve_reference, x, r, k[5]),
    ]:
        out = jax.jit(fast)(a, b)  # jitted: one program each instead of op-by-op dispatch
        assert out.dtype == dtype
        want = jax.jit(ref)(a, b)
        np.testing.assert_allclose(out.astype(float), want.astype(float), rtol=tol, atol=tol)
        ct = jax.random.normal(key, out.shape, dtype)
        grads = [
            jax.jit(
                jax.grad(
                    lambda a, b, f=f, ct=ct: jnp.sum((f(a, b) * ct).astype(jnp.float32)), (0, 1)
                )
            )(a, b)
            for f in (fast, ref)
        ]
        for g_fast, g_ref in zip(*grads, strict=True):
            assert g_fast.dtype == g_ref.dtype
            scale = float(jnp.abs(g_ref.astype(float)).max())
            np.testing.assert_allclose(
                g_fast.astype(float), g_ref.astype(float), rtol=tol, atol=tol * scale
            )


@pytest.mark.parametrize("R, K", [(8, 32), (16, 16)])
def test_init_variance_ratios_match_table1_formulas(R, K):
    """Forward: storage multiplies variance by R s^2, retrieval by Dk s^2; backward swaps them."""
    n, V = 4000, 16
    s_store, s_read = R**-0.5, K**-0.5  # the model's init
    k1, k2, k3, k4 = jax.random.split(jax.random.key(R), 4)
    w = jax.random.normal(k1, (n, R, K)) * s_store
    r = jax.random.normal(k2, (n, K, R)) * s_read
    y = jax.random.normal(k3, (n, R, V))
    x = jax.random.normal(k4, (n, K, V))
    st = lambda y, w: jnp.einsum("nrv,nrk->nkv", y, w)  # noqa: E731
    rd = lambda x, r: jnp.einsum("nkv,nkr->nrv", x, r)  # noqa: E731
    assert jnp.var(st(y, w)) == pytest.approx(R * s_store**2, rel=0.05)
    assert jnp.var(rd(x, r)) == pytest.approx(K * s_read**2, rel=0.05)
    g_store = jax.grad(lambda y: jnp.sum(st(y, w) * x))(y)  # upstream gradient ~ N(0, 1)
    g_read = jax.grad(lambda x: jnp.sum(rd(x, r) * y))(x)
    assert jnp.var(g_store) == pytest.approx(K * s_store**2, rel=0.05)
    assert jnp.var(g_read) == pytest.approx(R * s_read**2, rel=0.05)


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
def test_matrix_norm_is_scale_invariant_and_read_folds_it(kind):
    norm = MatrixNorm(RMTConfig(d_key=4, d_value=6, norm=kind), rngs=nnx.Rngs(0))
    norm.scale[...] = jax.random.uniform(jax.random.key(1), norm.scale.shape, minval=0.5)
    x = jax.random.normal(jax.random.key(0), (2, 3, 6, 4))
    np.testing.assert_allclose(norm(x), norm(7.5 * x), atol=1e-5)
    flat = np.asarray(norm(x)).reshape(2, 3, -1) / np.asarray(norm.scale[...])
    np.testing.assert_allclose(
        (flat**2).mean(-1) if kind == "rmsnorm" else flat.var(-1), 1, rtol=1e-3
    )
    keys = jax.random.normal(jax.random.key(2), (4, 3))
    np.testing.assert_allclose(norm.read(x, keys), retrieve_reference(norm(x), keys), atol=1e-5)


def _reference_logits(model: RMT, tokens, seg):
    """The RMT forward written in the paper's layout (X is Dk x Dv), with the matrix norm
    materialised and plain einsums everywhere: an independent check of the fast model's layout,
    hand-written gradients and norm folding. Shares only the embedding, MLP and unembedding."""
    cfg = model.cfg
    B, T = tokens.shape
    R, K, V = cfg.rank, cfg.d_key, cfg.d_value

    def norm(x_BTKV, scale):
        x = x_BTKV - (x_BTKV.mean((2, 3), keepdims=True) if cfg.norm == "layernorm" else 0)
        g = scale[...].reshape(V, K).T  # the gain is stored flat in (Dv, Dk) order
        return g * x / jnp.sqrt((x**2).mean((2, 3), keepdims=True) + 1e-6)

    def st(y_BTRV, w_RK):
        return jnp.einsum("btrv,rk->btkv", y_BTRV, w_RK)

    x = st(model.embed(tokens, None).reshape(B, T, R, V), model.store_embed[...])
    for layer in model.layers:
        a, f = layer.attn, layer.ff
        q, k, v = jnp.einsum("btkv,ckr->cbtrv", norm(x, a.norm.scale), a.read_qkv[...])
        o = dot_product_attention(
            q, k, v, causal=True, segment_ids=seg, alibi_slopes=a.slopes, scale=a.scale, impl="xla"
        )
        x = x + st(o, a.write[...])
        y = jnp.einsum("btkv,kr->btrv", norm(x, f.norm.scale), f.read[...])
        x = x + st(f.mlp(y.reshape(B, T, -1)).reshape(B, T, R, V), f.write[...])
    y = jnp.einsum("btkv,kr->btrv", norm(x, model.final_norm.scale), model.read_out[...])
    return model.unembed(y.reshape(B, T, -1))


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_model_equals_paper_layout_reference(norm):
    cfg = RMTConfig(**{**TINY.__dict__, "norm": norm, "d_value": 6})
    model = RMT(cfg, rngs=nnx.Rngs(0))
    norms = [model.final_norm] + [
        n for layer in model.layers for n in (layer.attn.norm, layer.ff.norm)
    ]
    for i, n in enumerate(norms):  # non-trivial gains, so that their layout matters
        n.scale[...] = jax.random.uniform(jax.random.key(i), n.scale.shape, minval=0.5)
    tokens = jax.random.randint(jax.random.key(0), (2, 16), 0, 256)
    seg = jnp.array([[1] * 7 + [2] * 9, [1] * 16])

    def logits_and_grads(forward):
        loss = lambda m: jnp.mean(jax.nn.log_softmax(forward(m))[..., 0])  # noqa: E731
        return nnx.jit(lambda m: (forward(m), nnx.grad(loss)(m)))(model)

    (fast, g_fast), (ref, g_ref) = (
        logits_and_grads(lambda m: m(tokens, segment_ids=seg)),
        logits_and_grads(lambda m: _reference_logits(m, tokens, seg)),
    )
    np.testing.assert_allclose(fast, ref, atol=2e-5)
    for a, b in zip(
        jax.tree_util.tree_leaves(nnx.state(g_fast)),
        jax.tree_util.tree_leaves(nnx.state(g_ref)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-4)


def test_query_zero_init_option():
    model = RMT(RMTConfig(**{**TINY.__dict__, "query_zero_init": True}), rngs=nnx.Rngs(0))
    assert float(jnp.abs(model.layers[0].attn.read_qkv[...][0]).max()) == 0.0
    assert float(jnp.abs(model.layers[0].attn.read_qkv[...][1]).max()) > 0.0


@pytest.mark.parametrize(
    "size, target", [("46m", 45.9), ("134m", 134.2), ("206m", 206.2), ("305m", 304.9)]
)
@pytest.mark.parametrize("positions", ["alibi", "learned"])
def test_rmt_paper_parameter_counts_within_one_percent(size, target, positions):
    model = nnx.eval_shape(
        lambda: RMT(RMTConfig.paper(size, positions=positions), rngs=nnx.Rngs(0))
    )
    assert count_params(model) / 1e6 == pytest.approx(target, rel=0.01)


@pytest.mark.parametrize(
    "size, target", [("49m", 49.2), ("160m", 162.1), ("260m", 263.5), ("405m", 404.9)]
)
def test_transformer_paper_parameter_counts_within_one_percent(size, target):
    from jaxlab.lm.transformer import Transformer

    model = nnx.eval_shape(
        lambda: Transformer(TransformerConfig.paper(size, positions="alibi"), rngs=nnx.Rngs(0))
    )
    assert count_params(model) / 1e6 == pytest.approx(target, rel=0.01)


def test_bad_presets_and_fields():
    with pytest.raises(ConfigError, match="unknown RMT preset"):
        RMTConfig.paper("1b")
    with pytest.raises(ConfigError, match="model.rank must be positive"):
        RMTConfig(rank=0)
