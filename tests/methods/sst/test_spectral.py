"""SST's spectral layers, conversion, updates and redraws (issue 15's tests), on tiny shapes.

References are independent of the code under test: the dense twin's outputs, numpy float64 SVDs and
matrix products, the dense-weight gradient ``G`` of the same loss taken by autodiff on ``M``.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.step import create_state, make_train_step, merge_state
from jaxlab.core.task import TrainState
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.methods.sst import (
    LowRankTask,
    SSTConfig,
    enhanced_gradient,
    linear_layers,
    merge_dense,
    redraw,
    spectral_projection,
    to_spectral,
)
from jaxlab.methods.sst.optim import make_method_optimizer
from jaxlab.nn.spectral import Frozen, Spectral
from jaxlab.testing.toy import ToyTask

T = 8
TRANSFORMER = TransformerConfig(seq_len=T, num_layers=2, d_model=16, num_heads=2)
RMT_CFG = RMTConfig(seq_len=T, num_layers=2, rank=4, d_key=8, d_value=8, d_ff=32)
TOKENS = (jnp.arange(2 * T).reshape(2, T) * 7) % 256


def _orthonormality_error(a):
    a = np.asarray(a, np.float64)
    return np.abs(a.T @ a - np.eye(a.shape[1])).max()


@pytest.mark.parametrize("model_cls, cfg", [(Transformer, TRANSFORMER), (RMT, RMT_CFG)])
def test_conversion_has_zero_distortion_and_merge_gives_the_same_outputs(model_cls, cfg):
    dense = model_cls(cfg, rngs=nnx.Rngs(0))
    want = np.asarray(dense(TOKENS))
    model = to_spectral(model_cls(cfg, rngs=nnx.Rngs(0)), 3, key=jax.random.key(1))
    layers = linear_layers(model, Spectral)
    assert layers and not linear_layers(model, nnx.Linear)
    assert all(p[-1] != "unembed" for p, _ in layers)  # the output head stays dense
    np.testing.assert_allclose(model(TOKENS), want, rtol=1e-5, atol=1e-5)
    for _, layer in layers:  # the stored factors are an SVD: orthonormal, s >= 0
        u, s, v = layer.factors()
        assert _orthonormality_error(u) < 1e-5 and _orthonormality_error(v) < 1e-5
        assert bool(jnp.all(s >= 0))
    # Move away from the SVD (a random perturbation of every factor), then merge back.
    for i, (_, layer) in enumerate(layers):
        u, s, v = layer.factors()
        noise = jax.random.normal(jax.random.key(i), u.shape) * 0.1
        layer.set_factors(u + noise, s * 1.5, v)
    moved = np.asarray(model(TOKENS))
    assert np.abs(moved - want).max() > 1e-3
    merged = merge_dense(model)
    assert not linear_layers(merged, Spectral)
    np.testing.assert_allclose(merged(TOKENS), moved, rtol=1e-5, atol=1e-5)


def test_the_spectral_linear_kind_builds_the_dense_twin():
    dense = Transformer(TRANSFORMER, rngs=nnx.Rngs(3))
    spectral_cfg = dataclasses.replace(TRANSFORMER, linear="spectral", linear_rank=4)
    spectral = Transformer(spectral_cfg, rngs=nnx.Rngs(3))
    assert isinstance(spectral.blocks[0].mlp.up, Spectral)
    np.testing.assert_allclose(spectral(TOKENS), dense(TOKENS), rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="model.linear_rank=17 must lie in"):
        dataclasses.replace(spectral_cfg, linear_rank=17)


# ------------------------------------------------------------------------- gradients

D_IN, D_OUT, R = 6, 9, 2


def _layer_and_loss():
    layer = Spectral(D_IN, D_OUT, rank=R, std=0.5, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (5, D_IN))
    y = jax.random.normal(jax.random.key(2), (5, D_OUT))
    return layer, lambda m: jnp.sum(jnp.sin(x @ m) * y)


def test_gradients_are_the_projections_of_the_dense_gradient():
    layer, loss = _layer_and_loss()
    u, s, v = (np.asarray(a, np.float64) for a in layer.factors())
    g = np.asarray(jax.jit(jax.grad(loss))(layer.dense_matrix()), np.float64)  # G = dL/dM
    grads = nnx.jit(nnx.grad(lambda lay: loss(lay.dense_matrix())))(layer)
    # dL/ds_i = u_iᵀ G v_i for every pair (all singular values train every step).
    np.testing.assert_allclose(grads.s[...], np.einsum("ik,ij,jk->k", u, g, v), rtol=1e-4)
    params = nnx.as_pure(nnx.state(layer, nnx.Param))
    fed, _ = enhanced_gradient().update(nnx.as_pure(nnx.state(grads, nnx.Param)), None, params)
    # The optimizer sees G v_i and Gᵀ u_i (autodiff's s_i G v_i divided by s_i).
    np.testing.assert_allclose(fed["u_active"], g @ v[:, :R], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(fed["v_active"], g.T @ u[:, :R], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(fed["s"], grads.s[...], rtol=0)
    assert grads.u_active[...] == pytest.approx(np.asarray(fed["u_active"]) * s[:R], rel=1e-4)


def test_projection_keeps_s_non_negative_and_columns_unit_norm():
    layer, _ = _layer_and_loss()
    params = nnx.as_pure(nnx.state(layer, nnx.Param))
    big = jax.tree.map(lambda p: -3.0 * jnp.ones_like(p), params)  # drives s below 0
    upd, _ = spectral_projection().update(big, None, params)
    new = optax.apply_updates(params, upd)
    assert float(jnp.min(new["s"])) == 0.0
    for name in ("u_active", "v_active"):
        np.testing.assert_allclose(jnp.linalg.norm(new[name], axis=0), 1.0, atol=1e-6)


# ------------------------------------------------------------------------- a step in the loop

SST = SSTConfig(method="sst", rank=3, resample_every=2, round_redraws=2, iteration_warmup=1)
TRAIN = TrainConfig(steps=4, batch_size=8, learning_rate=0.05, warmup_steps=1, grad_clip=1.0)


@pytest.fixture(scope="module")
def stepped():
    """A spectral toy MLP before and after two train steps of the loop's own step."""
    task = LowRankTask(ToyTask(dim=8, hidden=12), SST)
    tx = make_method_optimizer(TRAIN, optax.constant_schedule(0.05), SST)
    graphdef, state = create_state(task, tx, jax.random.key(0))
    batch = {k: jnp.asarray(v) for k, v in next(task.train_iterator(8, 0)).items()}
    step = jax.jit(make_train_step(task, graphdef))
    after, _ = step(state, batch, jax.random.key(1))
    after, _ = step(after, batch, jax.random.key(2))
    return graphdef, state, after, tx


def _layers(graphdef, state):
    return linear_layers(merge_state(graphdef, state).model, Spectral)


def test_a_step_keeps_frozen_columns_and_normalises_the_updated_ones(stepped):
    graphdef, before, after, _ = stepped
    for (_, b), (_, a) in zip(_layers(graphdef, before), _layers(graphdef, after), strict=True):
        np.testing.assert_array_equal(a.u_frozen[...], b.u_frozen[...])  # bit-identical
        np.testing.assert_array_equal(a.v_frozen[...], b.v_frozen[...])
        assert np.abs(a.u_active[...] - b.u_active[...]).max() > 1e-4  # they did move
        for cols in (a.u_active[...], a.v_active[...]):
            np.testing.assert_allclose(jnp.linalg.norm(cols, axis=0), 1.0, atol=1e-6)
        assert bool(jnp.all(a.s[...] >= 0)) and np.abs(a.s[...] - b.s[...]).max() > 0


def test_optimizer_state_holds_only_the_active_columns(stepped):
    graphdef, state, _, tx = stepped
    ts = merge_state(graphdef, state)
    mu = ts.optimizer.opt_state[1][1].mu  # chain: clip, sst_adamw (enhance, column adam, ...)
    for path, layer in _layers(graphdef, state):
        node = mu
        for key in path:
            node = node[key]
        m, n, k = layer.d_in, layer.d_out, layer.k
        assert sum(x.size for x in jax.tree.leaves(node)) == SST.rank * (m + n) + k
    memory = LowRankTask(ToyTask(dim=8, hidden=12), SST).memory(TRAIN)
    full = LowRankTask(ToyTask(dim=8, hidden=12), SSTConfig(method="full")).memory(TRAIN)
    per_layer = 3 * (8 + 12) + 8
    assert memory["trainable_params"] == 2 * per_layer
    assert full["trainable_params"] == 2 * 8 * 12
    assert memory["optimizer_state_bytes"] < full["optimizer_state_bytes"]


def _redraw(ts: TrainState, key, index):
    """The plain redraw on the loop's live state; returns the new column-Adam state."""
    params, frozen, opt = redraw(
        nnx.as_pure(nnx.state(ts.model, nnx.Param)),
        nnx.as_pure(nnx.state(ts.model, Frozen)),
        nnx.as_pure(ts.optimizer.opt_state),
        key,
        index,
        round_redraws=SST.round_redraws,
    )
    nnx.update(ts.model, params, frozen)
    return opt[1][1]  # chain: clip, sst_adamw (enhance, column adam, ...)


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def test_redraw_and_resvd_keep_the_matrix_and_move_the_moments(stepped):
    graphdef, _, after, _ = stepped
    ts = merge_state(graphdef, after)
    path, layer = linear_layers(ts.model, Spectral)[0]
    w = np.asarray(layer.dense_matrix(), np.float64)
    adam = nnx.as_pure(ts.optimizer.opt_state)[1][1]
    mu, count = _at(adam.mu, path), _at(adam.count, path)
    mu_u, mu_s = np.asarray(mu["u_active"]), np.asarray(mu["s"])
    np.testing.assert_array_equal(count["u_active"], [[2] * SST.rank])  # two steps so far
    u_old = np.asarray(layer.factors()[0])
    assert _orthonormality_error(u_old) > 1e-4  # training moved U off orthonormality

    # Redraw without a re-SVD (redraw index 1 of a 2-redraw round).
    adam = _redraw(ts, jax.random.key(5), jnp.asarray(1))
    mu, count = _at(adam.mu, path), _at(adam.count, path)
    np.testing.assert_allclose(layer.dense_matrix(), w, rtol=1e-5, atol=1e-6)
    u_new = np.asarray(layer.factors()[0])
    perm = [int(np.argmin(np.abs(u_old - u_new[:, [j]]).sum(0))) for j in range(layer.k)]
    np.testing.assert_array_equal(u_new, u_old[:, perm])  # a pure permutation of the columns
    np.testing.assert_array_equal(mu["s"], mu_s[perm])
    for j in range(SST.rank):  # stayers keep their moments, entering pairs start at zero
        want = mu_u[:, perm[j]] if perm[j] < SST.rank else 0.0
        np.testing.assert_array_equal(mu["u_active"][:, j], want)
        for name in ("u_active", "v_active"):  # and their step counts (fresh bias correction)
            assert int(count[name][0, j]) == (2 if perm[j] < SST.rank else 0)
    assert any(p >= SST.rank for p in perm[: SST.rank])  # some pair did enter

    # The start of a round: re-SVD, then redraw.
    mu = _at(_redraw(ts, jax.random.key(6), jnp.asarray(2)).mu, path)
    got = np.asarray(layer.dense_matrix(), np.float64)
    assert np.linalg.norm(got - w) <= 1e-5 * np.linalg.norm(w)
    u, s, v = layer.factors()
    assert _orthonormality_error(u) < 1e-5 and _orthonormality_error(v) < 1e-5
    np.testing.assert_allclose(
        np.sort(np.asarray(s))[::-1], np.linalg.svd(w, compute_uv=False), rtol=1e-5, atol=1e-6
    )
    for name in ("u_active", "s"):  # new coordinates: the layer's moments restart at zero
        assert float(jnp.abs(mu[name]).max()) == 0.0


def test_redraw_runs_as_a_jitted_state_hook(stepped):
    from jaxlab.core.step import make_hook_step
    from jaxlab.methods.sst.hooks import sst_hook

    graphdef, _, after, _ = stepped
    hook = sst_hook(SST)
    new, finite = jax.jit(make_hook_step(hook, graphdef, False))(after, jnp.int32(4))
    assert bool(finite)
    before = [lay.dense_matrix() for _, lay in _layers(graphdef, after)]
    for w, (_, lay) in zip(before, _layers(graphdef, new), strict=True):
        np.testing.assert_allclose(lay.dense_matrix(), w, rtol=1e-5, atol=1e-6)
    assert isinstance(merge_state(graphdef, new), TrainState)


def _subset_probs(p, r):
    """P(unordered set) of r sequential draws without replacement from p (Plackett–Luce)."""
    import itertools

    subsets = list(itertools.combinations(range(len(p)), r))
    probs = []
    for subset in subsets:
        total = 0.0
        for order in itertools.permutations(subset):
            left, prob = 1.0, 1.0
            for i in order:
                prob *= p[i] / left
                left -= p[i]
            total += prob
        probs.append(total)
    return subsets, np.asarray(probs) / np.sum(probs)


def test_the_hooks_own_redraws_follow_the_current_singular_values(stepped):
    # χ² on the draws the jitted loop hook makes (paper Sec. 4.4: p_i = s_i / Σ s on the *current*
    # s), not on sample_active alone: each redraw's key comes from its step, so many steps give
    # many independent draws; the drawn set is read off the new active s values. Rounds are long
    # here (no re-SVD after the first redraw), so s itself is only permuted.
    import scipy.stats

    from jaxlab.core.step import make_hook_step
    from jaxlab.methods.sst.hooks import sst_hook

    graphdef, _, after, _ = stepped
    cfg = dataclasses.replace(SST, round_redraws=100_000)
    (_, layer), _ = _layers(graphdef, after)
    s = np.asarray(layer.s[...], np.float64)
    assert len(np.unique(s)) == layer.k and np.ptp(s) > 0.1 * s.mean()  # distinct, far from uniform
    n = 3000
    steps = cfg.resample_every * jnp.arange(1, n + 1, dtype=jnp.int32)  # redraw indices 1..n
    draw = jax.vmap(make_hook_step(sst_hook(cfg), graphdef, False), in_axes=(None, 0))
    new, _ = jax.jit(draw)(after, steps)
    (_, drawn), _ = _layers(graphdef, new)
    active = np.asarray(drawn.s[...])[:, : cfg.rank]
    chosen = [tuple(sorted(int(np.argmin(np.abs(s - v))) for v in row)) for row in active]
    subsets, probs = _subset_probs(s / s.sum(), cfg.rank)
    index = {sub: i for i, sub in enumerate(subsets)}
    counts = np.bincount([index[c] for c in chosen], minlength=len(subsets))
    keep = probs * n >= 5  # χ²'s rule of thumb; the rare subsets pooled into one cell
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(probs[keep], probs[~keep].sum()) * n
    assert scipy.stats.chisquare(obs, exp).pvalue > 1e-3
    # Power: uniform draws (every subset equally likely) are rejected by the same counts.
    uniform = np.full(len(subsets), 1 / len(subsets))
    exp_u = np.append(uniform[keep], uniform[~keep].sum()) * n
    assert scipy.stats.chisquare(obs, exp_u).pvalue < 1e-6


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(method="dora"), "sst.method='dora' is not an option"),
        (dict(rank=0), "sst.rank must be >= 1"),
        (dict(sampling="top"), "sst.sampling='top' is not an option"),
        (dict(resample_every=0), "sst.resample_every must be >= 1"),
        (dict(relora_warmup=200), r"sst.relora_warmup=200 must lie in \[1, sst.relora_every=100\]"),
        (
            dict(iteration_warmup=201),
            r"sst.iteration_warmup=201 must lie in \[0, sst.resample_every=200\]",
        ),
    ],
)
def test_bad_config_is_a_one_line_error(kwargs, message):
    with pytest.raises(ConfigError, match=message) as err:
        SSTConfig(**kwargs)
    assert "\n" not in str(err.value)
