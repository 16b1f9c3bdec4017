"""The low-rank baselines: LoRA starts at its base model, a ReLoRA* merge keeps the function and
resets the adapter, GaLore's step equals a hand-written projection of Adam, the jagged schedule."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.step import create_state, make_train_step, merge_state
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.sst import (
    LoRA,
    LowRankTask,
    SSTConfig,
    jagged_schedule,
    linear_layers,
    relora_merge,
    scale_by_galore,
    to_lora,
)
from jaxlab.methods.sst.optim import make_method_optimizer
from jaxlab.nn.spectral import Frozen
from jaxlab.testing.toy import ToyTask

T = 8
CFG = TransformerConfig(seq_len=T, num_layers=2, d_model=16, num_heads=2)
TOKENS = (jnp.arange(2 * T).reshape(2, T) * 5) % 256


def test_lora_output_equals_the_base_model_at_init():
    want = Transformer(CFG, rngs=nnx.Rngs(0))(TOKENS)
    model = to_lora(Transformer(CFG, rngs=nnx.Rngs(0)), 4, alpha=8.0, key=jax.random.key(1))
    layers = linear_layers(model, LoRA)
    assert len(layers) == 2 * 6 and all(p[-1] != "unembed" for p, _ in layers)
    np.testing.assert_array_equal(model(TOKENS), want)
    # Only the adapters train: W₀ is not a parameter.
    names = {p[-1] for p, _ in nnx.to_flat_state(nnx.state(layers[0][1], nnx.Param))}
    assert names == {"u", "vt"}


@pytest.fixture(scope="module")
def relora_stepped():
    sst = SSTConfig(method="relora", rank=2, relora_every=2, relora_warmup=1)
    task = LowRankTask(ToyTask(dim=8, hidden=12), sst)
    tx = make_method_optimizer(TrainConfig(), optax.constant_schedule(0.05), sst)
    graphdef, state = create_state(task, tx, jax.random.key(0))
    batch = {k: jnp.asarray(v) for k, v in next(task.train_iterator(8, 0)).items()}
    step = jax.jit(make_train_step(task, graphdef))
    for i in range(2):
        state, _ = step(state, batch, jax.random.key(i))
    return graphdef, state, batch


def test_relora_merge_keeps_the_function_and_resets_the_adapter(relora_stepped):
    graphdef, state, batch = relora_stepped
    ts = merge_state(graphdef, state)
    before = ts.model(batch["x"])
    adam = nnx.as_pure(ts.optimizer.opt_state)[1][0]  # chain: clip, adamw(scale_by_adam, ...)

    def moments(path):
        nodes = [adam.mu, adam.nu]
        for key in path:
            nodes = [n[key] for n in nodes]
        return jax.tree.leaves(nodes)

    layers = linear_layers(ts.model, LoRA)
    assert all(float(jnp.abs(x).max()) > 0 for x in moments(layers[0][0]))
    assert float(jnp.abs(layers[0][1].adapter.vt[...]).max()) > 0
    params, frozen, opt = relora_merge(
        nnx.as_pure(nnx.state(ts.model, nnx.Param)),
        nnx.as_pure(nnx.state(ts.model, Frozen)),
        nnx.as_pure(ts.optimizer.opt_state),
        jax.random.key(7),
        alpha=2.0,  # the config's alpha: rank 2 (lora_alpha = 0)
    )
    nnx.update(ts.model, params, frozen)
    adam = opt[1][0]
    np.testing.assert_allclose(ts.model(batch["x"]), before, rtol=1e-5, atol=1e-6)
    for path, layer in layers:
        assert float(jnp.abs(layer.adapter.vt[...]).max()) == 0.0  # B = 0 again
        assert all(float(jnp.abs(x).max()) == 0 for x in moments(path))


def test_jagged_schedule_rewarms_after_each_merge():
    lr = jagged_schedule(optax.constant_schedule(1.0), every=10, warmup=4)
    got = [float(lr(c)) for c in (0, 9, 10, 11, 13, 14, 19, 20)]
    assert got == [1.0, 1.0, 0.25, 0.5, 1.0, 1.0, 1.0, 0.25]


def test_galore_step_is_adam_in_the_top_r_gradient_subspace():
    g = jax.random.normal(jax.random.key(0), (6, 10))  # m <= n: project from the left
    params = {"w": jnp.zeros((6, 10)), "b": jnp.zeros((10,)), "embed": jnp.zeros((10, 6))}
    grads = {"w": g, "b": jnp.ones((10,)), "embed": jnp.ones((10, 6))}
    tx = scale_by_galore(rank=2, update_every=5, scale=0.25)
    state = tx.init(params)
    assert state.adam.mu["w"].shape == (2, 10)  # moments r x n
    upd, state = tx.update(grads, state, params)
    u, _, _ = np.linalg.svd(np.asarray(g, np.float64))
    p = u[:, :2]
    r = p.T @ np.asarray(g, np.float64)
    adam = optax.scale_by_adam()
    want_r, _ = adam.update(
        {"w": jnp.asarray(r, jnp.float32)}, adam.init({"w": jnp.zeros((2, 10))})
    )
    # P adam(Pᵀ G) does not depend on the signs of P's columns (Adam is odd in its input).
    want = 0.25 * p @ np.asarray(want_r["w"], np.float64)
    np.testing.assert_allclose(upd["w"], want, rtol=1e-4, atol=1e-5)
    full = adam.update(grads, adam.init(params))[0]  # others: plain Adam
    np.testing.assert_allclose(upd["b"], full["b"], rtol=1e-6)
    np.testing.assert_allclose(upd["embed"], full["embed"], rtol=1e-6)
    # Between refreshes the projector is kept.
    proj = np.asarray(state.projectors["w"])
    _, state2 = tx.update({**grads, "w": -g}, state, params)
    np.testing.assert_array_equal(state2.projectors["w"], proj)


def test_lora_scales_its_update_by_alpha_over_rank():
    """``h = x W₀ + (α/r) x A B`` (Hu et al. 2021, Sec. 4.1), written in float64 numpy.

    r = 3 and α = 5 (α ≠ r, r ≠ 1), so a scale of α, or r/α, or 1 would all show; B is set to a
    random matrix (it is zero at init, which hides any scale).
    """
    d_in, d_out, r, alpha = 7, 5, 3, 5.0
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((d_in, d_out))
    b = rng.standard_normal((r, d_out))
    x = rng.standard_normal((4, d_in))
    layer = LoRA(jnp.asarray(w0, jnp.float32), rank=r, alpha=alpha, rngs=nnx.Rngs(0))
    layer.adapter.vt[...] = jnp.asarray(b, jnp.float32)
    a = np.asarray(layer.adapter.u[...], np.float64)  # A as drawn: only its values are read
    w0, b = np.float64(np.float32(w0)), np.float64(np.float32(b))
    want = x @ w0 + (alpha / r) * (x @ a) @ b
    np.testing.assert_allclose(layer(jnp.asarray(x, jnp.float32)), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.dense_matrix(), w0 + (alpha / r) * a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d_in, d_out", [(4, 7), (7, 4), (5, 5)])
def test_galore_projects_the_side_the_authors_project(d_in, d_out, x64):
    """GaLore's projector (Zhao et al. 2024, Algorithm 2; the authors' ``GaLoreProjector.project``,
    ``proj_type="std"``) on a PyTorch gradient ``G`` ``(out, in)``: ``rows >= cols`` (square
    included) takes the top-r right singular vectors ``Q`` and steps ``α adam(G Qᵀ) Q``, otherwise
    the left ones ``P`` and ``α P adam(Pᵀ G)``. jaxlab's kernel is ``(in, out)``, so its gradient is
    ``Gᵀ``; the reference is written in the authors' layout and transposed back. Adam's first step
    is ``R / (|R| + ε)`` (ε = 1: a smooth function of R, so float32 SVDs do not flip signs)."""
    rank, scale, eps = 2, 0.25, 1.0
    g = np.random.default_rng(d_in * 10 + d_out).normal(size=(d_in, d_out))
    tx = scale_by_galore(rank=rank, update_every=5, scale=scale, eps=eps)
    params = {"w": jnp.zeros((d_in, d_out))}
    upd, _ = tx.update({"w": jnp.asarray(g)}, tx.init(params), params)

    g_torch = g.T  # the authors' (out, in) gradient
    u, _, vt = np.linalg.svd(g_torch, full_matrices=False)
    if g_torch.shape[0] >= g_torch.shape[1]:
        q = vt[:rank]  # (r, in)
        r = g_torch @ q.T
        step = scale * (r / (np.abs(r) + eps)) @ q
    else:
        p = u[:, :rank]  # (out, r)
        r = p.T @ g_torch
        step = scale * p @ (r / (np.abs(r) + eps))
    # P and Q come from a float32 SVD: about 1e-6 of the O(0.1) steps
    np.testing.assert_allclose(upd["w"], step.T, rtol=1e-5, atol=2e-6)


def test_galore_refreshes_its_projector_every_t_steps_from_that_steps_gradient():
    """The authors' ``GaLoreProjector`` recomputes ``P`` when ``step % update_proj_gap == 0``,
    with ``step`` counted from 0 (Zhao et al. 2024, Algorithm 2: every ``T`` steps), from the
    gradient of that step. Compared as subspaces, ``P Pᵀ`` against numpy's top-2 left singular
    vectors (an SVD's column signs are arbitrary)."""
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=(4, 6)) for _ in range(5)]
    tx = scale_by_galore(rank=2, update_every=2, scale=1.0)
    params = {"w": jnp.zeros((4, 6))}
    state = tx.init(params)
    source = [0, 0, 2, 2, 4]  # the step whose gradient each step's projector comes from
    update = jax.jit(tx.update)  # one program for the five steps
    for step, g in enumerate(grads):
        _, state = update({"w": jnp.asarray(g, jnp.float32)}, state, params)
        p = np.asarray(state.projectors["w"], np.float64)
        u = np.linalg.svd(grads[source[step]])[0][:, :2]
        np.testing.assert_allclose(p @ p.T, u @ u.T, atol=1e-5, err_msg=f"step {step}")
