"""Towers and the CLIP task: shapes and normalisation, a frozen reference that never changes, every
objective stepping through the loop's own train step, and a short run of the shared loop."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import AxisRules, MeshConfig, global_batch, make_mesh
from jaxlab.core.step import create_state, make_train_step, merge_state, split_state
from jaxlab.data.captions import VOCAB, make_caption_pairs
from jaxlab.methods.drrho_clip.model import CLIPConfig, CLIPModel
from jaxlab.methods.drrho_clip.task import CLIPTask, LossConfig, embed_pairs, restore_model

MLP = CLIPConfig(image_tower="mlp", width=16, depth=1, heads=2, vocab_size=len(VOCAB), embed_dim=8)
VIT = CLIPConfig(image_tower="vit", width=16, depth=1, heads=2, vocab_size=len(VOCAB), embed_dim=8)
B = 8


@pytest.fixture(scope="module")
def data():
    return make_caption_pairs("train", 48, seed=0, noise=0.25), make_caption_pairs(
        "test", 16, seed=1
    )


@pytest.fixture(scope="module")
def reference():
    return CLIPModel(MLP, rngs=nnx.Rngs(params=7))


@pytest.mark.parametrize("cfg", [MLP, VIT], ids=["mlp", "vit"])
def test_towers_give_unit_embeddings(cfg, data):
    model = CLIPModel(cfg, rngs=nnx.Rngs(params=0))
    img, txt = embed_pairs(model, data[0].images[:5], data[0].tokens[:5])
    assert img.shape == txt.shape == (5, 8)
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(txt, axis=1), 1, rtol=1e-5)
    # read at the last real token of a causal tower: the padding after it changes nothing (the
    # caption cut to its own length gives the same embedding)
    t = data[0].tokens[:1]
    n = int((t != 0).sum())
    cut = np.asarray(model.encode_text(jax.numpy.asarray(t[:, :n])))
    np.testing.assert_allclose(cut, txt[:1], rtol=1e-5, atol=1e-6)
    # distinct images start at clearly distinct embeddings (pixels centred on the ink-free
    # canvas made every image embedding nearly the same vector, a long plateau at log B)
    cos = img @ img.T
    assert cos[~np.eye(5, dtype=bool)].mean() < 0.9


def _step(task, objective_batch_size=B):
    # Plain SGD: the parameter change is the gradient, comparable across the sharded step.
    graphdef, state = create_state(task, optax.sgd(1e-2), jax.random.key(0))
    step = make_train_step(task, graphdef)
    batch = next(task.train_iterator(objective_batch_size, 0))
    new_state, metrics = jax.jit(step)(state, batch, jax.random.key(1))
    return merge_state(graphdef, state), merge_state(graphdef, new_state), metrics, batch, step


@pytest.fixture(scope="module")
def stepped(data, reference):
    """One single-device step per objective, computed once and shared by the tests below."""
    cache = {}

    def get(objective):
        if objective not in cache:
            loss = LossConfig(objective=objective, gamma=0.5, jest_chunks=4)
            task = CLIPTask(MLP, loss, *data, reference=reference)
            cache[objective] = (task, *_step(task))
        return cache[objective]

    return get


# gcl is drrho's branch without a reference, kd is clip's plus drrho_kd's distillation term.
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "objective",
    ["clip", pytest.param("gcl", marks=SLOW), "drrho", pytest.param("kd", marks=SLOW), "drrho_kd",
     "jest"],
)  # fmt: skip
def test_every_objective_steps(objective, stepped):
    _, before, after, metrics, batch, _ = stepped(objective)
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
    changed = jax.tree.map(
        lambda a, b: bool(np.any(a != b)),
        nnx.state(before.model, nnx.Param),
        nnx.state(after.model, nnx.Param),
    )
    assert any(jax.tree.leaves(changed))
    seen = np.asarray(after.task_state["tables"].seen)
    if objective in ("gcl", "drrho", "drrho_kd"):
        assert seen.sum() == B and seen[batch["index"]].all()  # tables updated at the batch ids
    elif objective == "jest":  # GCL on the kept pairs: the tables updated at their ids only
        assert seen.sum() == B and set(np.flatnonzero(seen)) < set(np.asarray(batch["index"]))
    else:
        assert seen.sum() == 0


@pytest.mark.parametrize("mode", ["cached", "online"])
def test_reference_is_bit_identical_after_a_step(mode, data, reference, stepped):
    ref_before = jax.tree.map(np.array, nnx.state(reference, nnx.Param))
    if mode == "cached":
        _, before, after, _, _, _ = stepped("drrho_kd")
    else:
        loss = LossConfig(objective="drrho_kd", reference_mode=mode)
        before, after, _, _, _ = _step(CLIPTask(MLP, loss, *data, reference=reference))
    for key in before.task_state:
        if key != "tables":
            jax.tree.map(
                np.testing.assert_array_equal, before.task_state[key], after.task_state[key]
            )
    jax.tree.map(np.testing.assert_array_equal, ref_before, nnx.state(reference, nnx.Param))
    if mode == "cached":
        want = embed_pairs(reference, data[0].images, data[0].tokens)
        np.testing.assert_allclose(after.task_state["ref_img"], want[0], rtol=1e-6)


def test_task_step_on_eight_devices_equals_one(stepped):
    """The Task's train step under the 8-device mesh (the sharded loss of distributed.py) equals
    its single-device step on the same global batch: parameters, u tables and metrics."""
    task, before, after, one, batch, step = stepped("drrho")
    mesh = make_mesh(MeshConfig())
    assert mesh.shape["data"] == 8
    state = split_state(before, stateful=True)
    with jax.set_mesh(mesh):
        gbatch = global_batch(batch, mesh, AxisRules())
        assert "all_gather" in str(jax.make_jaxpr(step)(state, gbatch, jax.random.key(1)))
        eight_state, eight = jax.jit(step)(state, gbatch, jax.random.key(1))
    for k in ("loss", "clip_loss", "grad_norm"):
        np.testing.assert_allclose(eight[k], one[k], rtol=2e-5, err_msg=k)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=5e-5, atol=1e-6),
        eight_state,
        split_state(after, stateful=True),
    )


def _np_own_pair_learnability(model, reference, batch, cfg):
    """Each pair's own score, learner − reference, in float64 numpy (JEST's marginal): the sigmoid
    pair loss, or the authors' negated positive logit (learner at 1/τ, reference at t_ref)."""

    def own(m, scale):
        img, txt = (np.float64(x) for x in m(batch["image"], batch["tokens"]))
        s = np.sum(img * txt, axis=1)
        if cfg.jest_score == "sigmoid":
            return np.logaddexp(0.0, -(s / cfg.tau + cfg.jest_bias))
        return -scale * s

    return own(model, 1 / cfg.tau) - own(reference, cfg.jest_ref_scale)


@pytest.mark.parametrize("score", ["softmax", "sigmoid"])
def test_jest_selects_from_the_super_batch_without_reference_gradients(score, data, reference):
    model = CLIPModel(MLP, rngs=nnx.Rngs(params=0))
    # jest_ref_scale = 1 against the learner's 1/τ = 100: the learner's term decides the order,
    # so a wrong learner scale shows (at 100 against 100 the random-init learner barely matters)
    top = LossConfig(
        objective="jest", jest_score=score, jest_keep=0.5, jest_chunks=1, jest_sampling="top",
        jest_ref_scale=1.0,
    )  # fmt: skip
    task = CLIPTask(MLP, top, *data, reference=reference)
    assert next(task.train_iterator(B, 0))["index"].shape == (2 * B,)
    batch = {k: jax.numpy.asarray(v) for k, v in next(task.train_iterator(B, 0)).items()}
    state = task.init_task_state(None)
    kept = jax.jit(lambda b: task._jest_select(model, b, jax.random.key(0), state))(batch)
    # one deterministic chunk: the independent top-B of the pairs' own learnability
    score_np = _np_own_pair_learnability(model, reference, batch, top)
    want = set(np.asarray(batch["index"])[np.argsort(-score_np)[:B]].tolist())
    assert set(np.asarray(kept["index"]).tolist()) == want
    # the joint sampler (4 chunks, softmax): B distinct pairs of the super-batch, and the
    # objective sends no gradient to the reference's cached embeddings
    loss = LossConfig(objective="jest", jest_score=score, jest_chunks=4)
    task = CLIPTask(MLP, loss, *data, reference=reference)
    state = task.init_task_state(None)
    batch = {k: jax.numpy.asarray(v) for k, v in next(task.train_iterator(B, 0)).items()}
    assert batch["index"].shape == (5 * B,)  # the default keep: 20%

    def objective(ref_img, ref_txt):
        ts = {**state, "ref_img": ref_img, "ref_txt": ref_txt}
        return task.loss(model, batch, jax.random.key(3), ts)[0]

    g_img, g_txt = jax.jit(jax.grad(objective, argnums=(0, 1)))(state["ref_img"], state["ref_txt"])
    np.testing.assert_array_equal(g_img, 0)
    np.testing.assert_array_equal(g_txt, 0)
    kept = task._jest_select(model, batch, jax.random.key(3), state)["index"]
    assert len(set(np.asarray(kept).tolist())) == B
    assert set(np.asarray(kept).tolist()) <= set(np.asarray(batch["index"]).tolist())


def test_objectives_needing_a_reference_refuse_without_one(data):
    with pytest.raises(ConfigError, match="needs a reference"):
        CLIPTask(MLP, LossConfig(objective="drrho"), *data)
    with pytest.raises(ConfigError, match="objective"):
        LossConfig(objective="siglip")


def test_shared_loop_runs_and_restores_the_model(data, reference, tmp_path):
    task = CLIPTask(MLP, LossConfig(objective="drrho", gamma=0.8), *data, reference=reference)
    cfg = TrainConfig(
        steps=2, batch_size=B, learning_rate=1e-2, warmup_steps=0, log_every=1, eval_every=2,
        eval_batches=1, checkpoint_every=2, tensorboard=False,
    )  # fmt: skip
    # One device: the sharded step has its own test above; this one is about the loop's plumbing.
    summary = run_training(task, cfg, tmp_path, verbose=False, mesh_cfg=MeshConfig(data=1))
    assert 0 <= summary["eval"]["eval_zero_shot_acc"] <= 1
    model = restore_model(task, cfg, tmp_path)
    assert isinstance(model, CLIPModel)
    fresh = CLIPModel(MLP, rngs=nnx.Rngs(params=0))
    assert not np.array_equal(model.image_proj.kernel[...], fresh.image_proj.kernel[...])


@pytest.mark.parametrize("objective", ["drrho", "drrho_kd"])
def test_each_pair_is_scored_against_its_own_reference_rows(objective, data, reference):
    # The cached reference is indexed by the batch's pair ids: replace the cache by distinct
    # random unit rows and check the Task's loss against losses.drrho_loss (and the distillation
    # term) on exactly those rows; the same rows rolled by one position must give another value.
    from jaxlab.methods.drrho_clip import losses as L

    cfg = LossConfig(objective=objective, gamma=1.0)
    task = CLIPTask(MLP, cfg, *data, reference=reference)
    state = task.init_task_state(jax.random.key(0))
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((2, len(data[0].images), MLP.embed_dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=-1, keepdims=True)
    # A reference that knows the noise: a clean pair's text row is near its image row, a noisy
    # pair's opposite it, so the ε gate switches the noisy anchors off.
    sign = np.where(data[0].matched, 1.0, -1.0).astype(np.float32)[:, None]
    rows[1] = sign * rows[0] + 0.3 * rows[1]
    rows[1] /= np.linalg.norm(rows[1], axis=-1, keepdims=True)
    state = {**state, "ref_img": jax.numpy.asarray(rows[0]), "ref_txt": jax.numpy.asarray(rows[1])}
    batch = {k: jax.numpy.asarray(v) for k, v in next(task.train_iterator(B, 3)).items()}
    ids = np.asarray(batch["index"])
    assert not np.array_equal(ids, np.arange(B))  # shuffled ids: position != pair id
    model = CLIPModel(MLP, rngs=nnx.Rngs(params=1))
    _, metrics, _ = task.loss(model, batch, jax.random.key(2), state)
    img, txt = model(batch["image"], batch["tokens"])

    def expected(r_img, r_txt):
        value = L.drrho_loss(img, txt, r_img, r_txt, tau=cfg.tau, eps=cfg.eps)
        if objective == "drrho_kd":
            kd = L.distill_loss(img, txt, r_img, r_txt, tau=cfg.tau, ref_tau=cfg.ref_tau)
            value = value + cfg.kd_weight * kd
        return float(value)

    right = expected(rows[0][ids], rows[1][ids])
    rolled = expected(rows[0][np.roll(ids, 1)], rows[1][np.roll(ids, 1)])
    np.testing.assert_allclose(float(metrics["loss"]), right, rtol=1e-5)
    assert abs(rolled - right) > 1e-3 * abs(right)
    # The ε-gate statistics on the same rows: the share of anchors off, and the share of anchors
    # that are off and belong to a pair the renderer made noisy.
    off = np.asarray(L.gate_off(img, txt, rows[0][ids], rows[1][ids], tau=cfg.tau, eps=cfg.eps))
    noisy = np.broadcast_to(~np.asarray(batch["matched"]), off.shape)
    np.testing.assert_allclose(float(metrics["gate_off"]), off.mean())
    np.testing.assert_allclose(float(metrics["gate_off_and_noisy"]), (off & noisy).mean())
    assert 0 < off.mean() < 1 and (off & noisy).sum() > 0


def _np_clip_pair_gradient_norms(img, txt, tau):
    """Per-pair tangential gradient norms of CLIP's InfoNCE, float64 numpy, from the formula:
    L = (1/2B) Σ_i [lse_j S_ij − S_ii + lse_j S_ji − S_ii], S = img·txtᵀ/τ, so
    ∂L/∂S = (P − I + Q − I)/(2B) with P the row softmax and Q the column softmax of S."""
    img, txt = np.float64(img), np.float64(txt)
    b = len(img)
    s = img @ txt.T / tau
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    q = np.exp(s - s.max(0, keepdims=True))
    q /= q.sum(0, keepdims=True)
    g = (p + q - 2 * np.eye(b)) / (2 * b)
    g_img, g_txt = g @ txt / tau, g.T @ img / tau

    def tangent(e, v):
        return np.linalg.norm(v - np.sum(v * e, 1, keepdims=True) * e, axis=1)

    return tangent(img, g_img) + tangent(txt, g_txt)


# iterator seeds whose batch (JEST: whose kept pairs) holds both noisy and clean pairs, and (JEST)
# whose kept pairs hold another noisy share than the super-batch
@pytest.mark.parametrize("objective, seed", [("clip", 0), ("jest", 4)])
def test_noise_statistics_against_numpy(objective, seed, data, reference):
    """``noisy_share`` counts the noisy pairs the step trains on (JEST: the kept ones, here the
    deterministic top-B of a numpy score), ``grad_share_noisy`` their share of CLIP's per-pair
    gradient norm, both against numpy."""
    cfg = LossConfig(
        objective=objective, jest_keep=0.5, jest_chunks=1, jest_sampling="top", jest_ref_scale=1.0,
        jest_loss="infonce",  # the numpy weights below are InfoNCE's
    )  # fmt: skip
    task = CLIPTask(MLP, cfg, *data, reference=reference)
    model = CLIPModel(MLP, rngs=nnx.Rngs(params=0))
    state = task.init_task_state(None)
    batch = {k: jax.numpy.asarray(v) for k, v in next(task.train_iterator(B, seed)).items()}
    _, metrics, _ = jax.jit(lambda b: task.loss(model, b, jax.random.key(0), state))(batch)
    kept = np.arange(len(batch["index"]))
    if objective == "jest":
        kept = np.argsort(-_np_own_pair_learnability(model, reference, batch, cfg))[:B]
    noisy = ~np.asarray(batch["matched"])[kept]
    img, txt = (np.asarray(x)[kept] for x in model(batch["image"], batch["tokens"]))
    w = _np_clip_pair_gradient_norms(img, txt, cfg.tau)
    assert 0 < noisy.sum() < len(kept)
    assert objective == "clip" or noisy.mean() != np.mean(~np.asarray(batch["matched"]))
    np.testing.assert_allclose(float(metrics["noisy_share"]), noisy.mean())
    np.testing.assert_allclose(float(metrics["grad_share_noisy"]), w[noisy].sum() / w.sum(), 2e-4)
