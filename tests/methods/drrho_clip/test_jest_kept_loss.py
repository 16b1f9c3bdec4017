"""JEST's kept pairs trained with GCL, against the DRRho authors' ``SogCLRLoss`` in float64 numpy.

Under ``--fastclip`` the authors' ``train.py`` (``Optimization-AI/DRRho-CLIP``) selects the kept
pairs (``jointly_sample_batch_softmax``), cuts the batch *and its dataset indices* to them, and
calls the same ``SogCLRLoss`` (``src/fast_clip/loss.py``) as FastCLIP, without the reference: u is
read at the kept pairs' dataset ids and written back there (``set_params``). The numpy loop below
is written from that forward: the log(ε + (1/N) Σ_{j≠i} e^{d_ij}) estimate through their shifted
logsumexp, the γ moving average in the log domain with their "u = 0, ±inf or NaN is fresh" rule,
the stop-gradient weights e^{d_ij − u_i}, the masked sum over N − 1 negatives, and the division by
the logit scale (``multiply_tau``; its ρ and u terms carry no gradient at a fixed τ). The Task's
embedding gradient is pinned against the analytic gradient of that weighted sum.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy.special import logsumexp

from jaxlab.core.errors import ConfigError
from jaxlab.data.captions import VOCAB, make_caption_pairs
from jaxlab.methods.drrho_clip.losses import ContrastiveTables, clip_loss
from jaxlab.methods.drrho_clip.model import CLIPConfig, CLIPModel
from jaxlab.methods.drrho_clip.pipeline import arm_loss
from jaxlab.methods.drrho_clip.task import CLIPTask, LossConfig

MLP = CLIPConfig(image_tower="mlp", width=16, depth=1, heads=2, vocab_size=len(VOCAB), embed_dim=8)
B, N_DATA, D, Z = 8, 48, 8, 6
TAU, EPS, GAMMA = 0.1, 0.3, 0.5  # ε comparable to the inner mean, γ < 1: both change the result


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class _Lookup:
    """A stand-in learner: the embeddings of pair k are rows k of two tables (k rides in the
    first token), so the loss's gradient with respect to the tables is its embedding gradient."""

    def __init__(self, img_ND, txt_ND):
        self.img_ND, self.txt_ND = img_ND, txt_ND

    def __call__(self, images, tokens):
        del images
        return self.img_ND[tokens[:, 0]], self.txt_ND[tokens[:, 0]]


def _authors_sogclr(img, txt, u_im, u_tt, *, tau, eps, gamma):
    """The authors' ``SogCLRLoss.forward`` without a reference, float64 numpy, one process.

    Returns the loss (its feature-dependent part, divided by the logit scale 1/τ), the new u of the
    image and text anchors, and the analytic gradients of the loss with respect to img and txt.
    """
    n = len(img)
    scale = 1.0 / tau
    diag = np.sum(img * txt, axis=1, keepdims=True)
    diff_im = (img @ txt.T - diag) * scale
    diff_tt = (txt @ img.T - diag) * scale
    eye = np.eye(n)
    mask = 1.0 - eye

    def log_eps_g(diff):  # their shifted logsumexp: log(ε + (1/N) Σ_{j≠i} e^{d_ij})
        shift = np.log(eps * n)
        return logsumexp(diff + eye * shift - shift, axis=1, keepdims=True) + np.log(eps)

    def moving(u, g):
        bad = (u == 0.0) | ~np.isfinite(u)
        u_diff = u + np.log(1 - gamma) - (g + np.log(gamma))
        new = np.where(
            u_diff > 0,
            u + np.log(1 - gamma) + np.log1p(np.exp(-u_diff)),
            g + np.log(gamma) + np.log1p(np.exp(u_diff)),
        )
        return np.where(bad, g, new)

    u_im = moving(u_im[:, None], log_eps_g(diff_im))
    u_tt = moving(u_tt[:, None], log_eps_g(diff_tt))
    a_im = np.exp(diff_im - u_im) * mask / (n - 1)  # the stop-gradient weights over the negatives
    a_tt = np.exp(diff_tt - u_tt) * mask / (n - 1)
    loss = np.mean(np.sum(diff_im * a_im, 1) + np.sum(diff_tt * a_tt, 1)) / scale
    # d(loss)/d features: diff_im_ij = (img_i·txt_j − img_i·txt_i)/τ, diff_tt_ij = (txt_i·img_j −
    # img_i·txt_i)/τ; the factor 1/(n·scale) of the mean and the division cancels the 1/τ.
    c = 1.0 / n
    g_img = c * (a_im @ txt - a_im.sum(1, keepdims=True) * txt)
    g_img += c * (a_tt.T @ txt - a_tt.sum(1, keepdims=True) * txt)
    g_txt = c * (a_im.T @ img - a_im.sum(1, keepdims=True) * img)
    g_txt += c * (a_tt @ img - a_tt.sum(1, keepdims=True) * img)
    return loss, u_im[:, 0], u_tt[:, 0], g_img, g_txt


@pytest.fixture(scope="module")
def setup():
    data = (
        make_caption_pairs("train", N_DATA, seed=0, noise=0.25),
        make_caption_pairs("test", 16, seed=1),
    )
    reference = CLIPModel(MLP, rngs=nnx.Rngs(params=7))
    cfg = LossConfig(
        objective="jest", jest_loss="gcl", jest_keep=0.5, jest_chunks=1, jest_sampling="top",
        jest_ref_scale=1.0, tau=TAU, eps=EPS, gamma=GAMMA,
    )  # fmt: skip
    task = CLIPTask(MLP, cfg, *data, reference=reference)
    rng = np.random.default_rng(0)
    emb = [_unit(rng.normal(size=(N_DATA, k))).astype(np.float32) for k in (D, D, Z, Z)]
    # Half the pairs seen before (nonzero log u), half fresh (log u = 0, the authors' marker).
    seen = rng.random(N_DATA) < 0.5
    log_u = [np.where(seen, rng.normal(size=N_DATA), 0.0).astype(np.float32) for _ in range(2)]
    state = {
        **task.init_task_state(None),
        "ref_img": jnp.asarray(emb[2]),
        "ref_txt": jnp.asarray(emb[3]),
        "tables": ContrastiveTables(*map(jnp.asarray, log_u), jnp.asarray(seen)),
    }
    batch = {k: jnp.asarray(v) for k, v in next(task.train_iterator(B, 0)).items()}
    assert batch["index"].shape == (2 * B,)  # a super-batch: keep 50%
    batch["tokens"] = batch["index"][:, None]  # the stand-in learner reads the pair id here
    return task, state, batch, emb, log_u, seen


def test_jest_trains_its_kept_pairs_with_the_authors_sogclr(setup):
    task, state, batch, emb, log_u, seen = setup

    def loss(img_ND, txt_ND):
        out = task.loss(_Lookup(img_ND, txt_ND), batch, jax.random.key(0), state)
        return out[0], out[2]["tables"]

    (value, tables), (g_img, g_txt) = jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))(
        jnp.asarray(emb[0]), jnp.asarray(emb[1])
    )
    img, txt, r_img, r_txt = (np.float64(e) for e in emb)
    ids = np.asarray(batch["index"])
    # The authors' selection with one deterministic chunk: the top B of m_k = −t s_kk + t_ref r_kk.
    m = -np.sum(img[ids] * txt[ids], 1) / TAU + 1.0 * np.sum(r_img[ids] * r_txt[ids], 1)
    kept = ids[np.argsort(-m)[:B]]
    assert 0 < seen[kept].sum() < B  # the kept pairs hold seen and fresh entries
    want, u_im, u_tt, w_img, w_txt = _authors_sogclr(
        img[kept], txt[kept], np.float64(log_u[0][kept]), np.float64(log_u[1][kept]),
        tau=TAU, eps=EPS, gamma=GAMMA,
    )  # fmt: skip
    np.testing.assert_allclose(float(value), want, rtol=2e-5)
    # the gradient reaches the kept pairs only (the rest of the super-batch was only scored)
    want_img, want_txt = np.zeros_like(img), np.zeros_like(txt)
    want_img[kept], want_txt[kept] = w_img, w_txt
    np.testing.assert_allclose(g_img, want_img, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g_txt, want_txt, rtol=1e-4, atol=1e-6)
    # u is written at the kept pairs' dataset ids, and nowhere else
    np.testing.assert_allclose(tables.log_u_img[kept], u_im, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tables.log_u_txt[kept], u_tt, rtol=1e-5, atol=1e-6)
    rest = np.setdiff1d(np.arange(N_DATA), kept)
    np.testing.assert_array_equal(tables.log_u_img[rest], log_u[0][rest])
    np.testing.assert_array_equal(tables.log_u_txt[rest], log_u[1][rest])
    np.testing.assert_array_equal(tables.seen, seen | np.isin(np.arange(N_DATA), kept))


def test_jest_infonce_trains_its_kept_pairs_with_clip_and_leaves_u(setup):
    task, state, batch, emb, log_u, _ = setup
    cfg = dataclasses.replace(task.loss_cfg, jest_loss="infonce")
    task = dataclasses.replace(task, loss_cfg=cfg)
    value, _, new_state = task.loss(_Lookup(*emb[:2]), batch, jax.random.key(0), state)
    img, txt, r_img, r_txt = (np.float64(e) for e in emb)
    ids = np.asarray(batch["index"])
    m = -np.sum(img[ids] * txt[ids], 1) / TAU + 1.0 * np.sum(r_img[ids] * r_txt[ids], 1)
    kept = ids[np.argsort(-m)[:B]]
    logits = img[kept] @ txt[kept].T / TAU
    want = np.mean(
        (logsumexp(logits, 1) + logsumexp(logits, 0)) / 2 - np.diagonal(logits)
    )  # CLIP's InfoNCE, both directions halved
    np.testing.assert_allclose(float(value), want, rtol=2e-5)
    assert float(clip_loss(emb[0][kept], emb[1][kept], tau=TAU)) == pytest.approx(want, 2e-5)
    np.testing.assert_array_equal(new_state["tables"].log_u_img, log_u[0])


def test_the_authors_jest_default_is_gcl_and_the_named_arms_keep_infonce():
    base = LossConfig()
    assert base.jest_loss == "gcl"
    assert arm_loss(base, "jest").jest_loss == "gcl"
    assert arm_loss(base, "jest_infonce").jest_loss == "infonce"
    assert arm_loss(base, "jest_sigmoid").jest_loss == "infonce"
    with pytest.raises(ConfigError, match="jest_loss"):
        LossConfig(jest_loss="sigmoid")
