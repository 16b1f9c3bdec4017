"""DRRho-CLIP losses against a float64 numpy reference, and the properties the paper relies on.

No-reference reduction to GCL (value and gradient), invariance to per-anchor constants in the
reference, uniform weights when the reference equals the target, the surrogate's gradient relation
B/(B−1)·∇F, the log-domain moving average with its first-visit rule, image/text symmetry, and the
general DRRho risks against numpy.
"""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.methods.drrho_clip import losses as L
from jaxlab.methods.drrho_clip.risk import drrho_risk_cvar, drrho_risk_kl

B, D, E = 6, 5, 4


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    return [_unit(rng.normal(size=(B, k))).astype(np.float32) for k in (D, D, E, E)]


def numpy_drrho(img, txt, rimg, rtxt, tau, eps):
    """Eq. (9) in float64 with explicit loops (independent of the jnp code)."""
    img, txt = np.float64(img), np.float64(txt)
    s = img @ txt.T
    r = np.zeros_like(s) if rimg is None else np.float64(rimg) @ np.float64(rtxt).T
    n = len(s)
    total = 0.0
    for i in range(n):
        row = [
            math.exp(((s[i, j] - s[i, i]) - (r[i, j] - r[i, i])) / tau) for j in range(n) if j != i
        ]
        col = [
            math.exp(((s[j, i] - s[i, i]) - (r[j, i] - r[i, i])) / tau) for j in range(n) if j != i
        ]
        total += tau * math.log(eps + sum(row) / (n - 1)) + tau * math.log(eps + sum(col) / (n - 1))
    return total / n


@pytest.mark.parametrize("tau,eps", [(0.5, 0.0), (0.1, 1e-4), (0.05, 0.3)])
def test_drrho_matches_float64_reference(batch, tau, eps):
    img, txt, rimg, rtxt = batch
    got = L.drrho_loss(img, txt, rimg, rtxt, tau=tau, eps=eps)
    np.testing.assert_allclose(got, numpy_drrho(img, txt, rimg, rtxt, tau, eps), rtol=2e-5)
    got = L.gcl_loss(img, txt, tau=tau, eps=eps)
    np.testing.assert_allclose(got, numpy_drrho(img, txt, None, None, tau, eps), rtol=2e-5)


def test_no_reference_is_gcl_value_and_gradient(batch):
    img, txt, _, _ = batch
    zero = np.zeros((B, E), np.float32)  # r ≡ 0: the reference term vanishes
    f = lambda i, t, ri, rt: L.drrho_loss(i, t, ri, rt, tau=0.1, eps=1e-3)  # noqa: E731
    v0, g0 = jax.value_and_grad(f, argnums=(0, 1))(img, txt, None, None)
    v1, g1 = jax.value_and_grad(f, argnums=(0, 1))(img, txt, zero, zero)
    vg, gg = jax.value_and_grad(lambda i, t: L.gcl_loss(i, t, tau=0.1, eps=1e-3), (0, 1))(img, txt)
    assert v0 == vg
    np.testing.assert_allclose(v0, v1, rtol=1e-6)
    for a, b, c in zip(g0, g1, gg, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_gradient_matches_finite_differences(batch, x64):
    img, txt, rimg, rtxt = (np.float64(x) for x in batch)
    f = lambda i: L.drrho_loss(i, txt, rimg, rtxt, tau=0.3, eps=1e-2)  # noqa: E731
    g = np.asarray(jax.grad(f)(img))
    direction = np.random.default_rng(1).normal(size=img.shape)
    h = 1e-6
    fd = (f(img + h * direction) - f(img - h * direction)) / (2 * h)
    np.testing.assert_allclose(np.sum(g * direction), fd, rtol=1e-6)


def test_invariant_to_per_anchor_constants_in_reference(batch):
    # Adding c_i to every r_ij of image anchor i (and to every r_ji of text anchor i) leaves the
    # margins r_ij − r_ii unchanged. Realised with an extra reference coordinate: ref_img gets c_i,
    # ref_txt gets 1, so r_ij gains c_i for all j.
    img, txt, rimg, rtxt = batch
    c = np.random.default_rng(2).normal(size=(B, 1)).astype(np.float32)
    base_i = L.anchor_log_terms(img, txt, rimg, rtxt, tau=0.1, eps=0.0)
    shifted_i = L.anchor_log_terms(
        img, txt, np.hstack([rimg, c]), np.hstack([rtxt, np.ones_like(c)]), tau=0.1, eps=0.0
    )
    np.testing.assert_allclose(base_i, shifted_i, rtol=1e-5, atol=1e-5)
    assert not np.allclose(
        L.anchor_log_terms(img, txt, np.hstack([rimg, c]), np.hstack([rtxt, c]), tau=0.1, eps=0),
        base_i,
    )  # a constant that is not per-anchor does change it: the test can fail


def test_reference_equal_to_target_gives_uniform_weights(batch):
    img, txt, _, _ = batch
    sg = jax.lax.stop_gradient
    d, neg = L.margins(img, txt, sg(img), sg(txt), tau=0.05)
    np.testing.assert_allclose(d, 0.0, atol=1e-6)
    # The gradient of F is Σ_j w_ij ∇d_ij with w = softmax over the negatives: uniform 1/(B−1).
    lt = lambda i: L.anchor_log_terms(i, txt, sg(img), sg(txt), tau=0.05, eps=0.0)  # noqa: E731
    # F at a copy of the target is log 1 = 0, and its gradient is the mean of ∇d over negatives.
    np.testing.assert_allclose(lt(img), 0.0, atol=1e-6)
    g = jax.grad(lambda i: jnp.sum(lt(i)))(img)
    # ∇_{img_i} (1/τ) mean_{j≠i}(s_ij − s_ii) = (1/τ)(mean_{j≠i} txt_j − txt_i)
    want = np.stack([(np.delete(txt, i, 0).mean(0) - txt[i]) / 0.05 for i in range(B)])
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)


def test_surrogate_gradient_is_scaled_gradient_of_f(batch):
    img, txt, rimg, rtxt = batch
    tables = L.init_tables(B + 3)
    ids = jnp.arange(B) + 2

    def sur(i, t):
        return L.drrho_surrogate(i, t, rimg, rtxt, tables, ids, tau=0.2, eps=0.0, gamma=1.0)[0]

    gs = jax.grad(sur, (0, 1))(img, txt)
    gf = jax.grad(lambda i, t: L.drrho_loss(i, t, rimg, rtxt, tau=0.2, eps=0.0), (0, 1))(img, txt)
    for a, b in zip(gs, gf, strict=True):
        np.testing.assert_allclose(a, B / (B - 1) * b, rtol=1e-4, atol=1e-5)
    # With eps > 0 the relation does not hold: the test distinguishes the two.
    gs_eps = jax.grad(
        lambda i: L.drrho_surrogate(i, txt, rimg, rtxt, tables, ids, tau=0.2, eps=5.0, gamma=1.0)[0]
    )(img)
    assert not np.allclose(gs_eps, B / (B - 1) * gf[0], rtol=1e-2)


def test_moving_average_log_domain_and_first_visit():
    log_u = jnp.array([0.0, 2.0, -1.0, 50.0])
    log_g = jnp.array([1.0, -3.0, 4.0, 60.0])
    seen = jnp.array([False, True, True, True])
    got = L.update_log_u(log_u, log_g, seen, 0.3)
    want = np.log(0.7 * np.exp(np.float64(log_u)) + 0.3 * np.exp(np.float64(log_g)))
    want[0] = 1.0  # first visit: the batch estimate itself
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(L.update_log_u(log_u, log_g, seen, 1.0), log_g)
    with pytest.raises(ConfigError, match="gamma"):
        L.update_log_u(log_u, log_g, seen, 0.0)


def test_surrogate_tables_update_and_first_visit(batch):
    img, txt, rimg, rtxt = batch
    tables = L.init_tables(10)
    ids = jnp.array([7, 1, 3, 0, 9, 4])
    kw = dict(tau=0.2, eps=1e-3, gamma=0.25)
    _, t1 = L.drrho_surrogate(img, txt, rimg, rtxt, tables, ids, **kw)
    d, neg = L.margins(img, txt, rimg, rtxt, tau=0.2)
    g = np.log(1e-3 + np.where(neg, np.exp(np.float64(d)), 0).sum(1) / B)  # 1/B: authors' code
    np.testing.assert_allclose(t1.log_u_img[ids], g, rtol=1e-5)
    assert t1.seen[ids].all() and not t1.seen[np.array([2, 5, 6, 8])].any()
    _, t2 = L.drrho_surrogate(img, txt, rimg, rtxt, t1, ids, **kw)  # second visit: mixes
    np.testing.assert_allclose(t2.log_u_img[ids], g, rtol=1e-5)  # same batch: fixed point
    shifted = jnp.roll(txt, 1, axis=0)
    _, t3 = L.drrho_surrogate(img, shifted, rimg, rtxt, t1, ids, **kw)
    d3, _ = L.margins(img, shifted, rimg, rtxt, tau=0.2)
    g3 = np.log(1e-3 + np.where(neg, np.exp(np.float64(d3)), 0).sum(1) / B)
    want = np.log(0.75 * np.exp(g) + 0.25 * np.exp(g3))
    np.testing.assert_allclose(t3.log_u_img[ids], want, rtol=1e-5)


def test_image_text_symmetry(batch):
    img, txt, rimg, rtxt = batch
    a = L.drrho_loss(img, txt, rimg, rtxt, tau=0.1, eps=1e-4)
    b = L.drrho_loss(txt, img, rtxt, rimg, tau=0.1, eps=1e-4)
    np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(L.clip_loss(img, txt, tau=0.1), L.clip_loss(txt, img, tau=0.1))
    ga = jax.grad(lambda i, t: L.drrho_loss(i, t, rimg, rtxt, tau=0.1, eps=1e-4), (0, 1))(img, txt)
    gb = jax.grad(lambda t, i: L.drrho_loss(t, i, rtxt, rimg, tau=0.1, eps=1e-4), (1, 0))(txt, img)
    for x, y in zip(ga, gb, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_clip_loss_matches_numpy(batch):
    img, txt, _, _ = batch
    logits = np.float64(img) @ np.float64(txt).T / 0.07

    def ce(m):
        return np.mean(np.log(np.exp(m).sum(1)) - np.diag(m))

    np.testing.assert_allclose(
        L.clip_loss(img, txt, tau=0.07), (ce(logits) + ce(logits.T)) / 2, rtol=1e-5
    )


def test_distill_is_minimised_by_matching_the_teacher(batch):
    img, txt, _, _ = batch
    same = L.distill_loss(img, txt, img, txt, tau=0.1, ref_tau=0.1)
    other = L.distill_loss(img, txt, jnp.roll(img, 1, 0), txt, tau=0.1, ref_tau=0.1)
    assert same < other
    # At the teacher the cross-entropy equals the teacher's entropy.
    p = jax.nn.softmax(np.float64(img) @ np.float64(txt).T / 0.1, 1)
    q = jax.nn.softmax(np.float64(txt) @ np.float64(img).T / 0.1, 1)
    ent = (-np.sum(p * np.log(p), 1).mean() - np.sum(q * np.log(q), 1).mean()) / 2
    np.testing.assert_allclose(same, ent, rtol=1e-4)


def test_bad_inputs_are_config_errors(batch):
    img, txt, rimg, rtxt = batch
    with pytest.raises(ConfigError, match="tau"):
        L.drrho_loss(img, txt, rimg, rtxt, tau=0.0, eps=0.0)
    with pytest.raises(ConfigError, match="eps"):
        L.drrho_loss(img, txt, rimg, rtxt, tau=0.1, eps=-1.0)
    with pytest.raises(ConfigError, match="both"):
        L.drrho_loss(img, txt, rimg, None, tau=0.1, eps=0.0)
    with pytest.raises(ConfigError, match="B >= 2"):
        L.drrho_loss(img[:3], txt, None, None, tau=0.1, eps=0.0)


def test_drrho_risks_against_numpy():
    rng = np.random.default_rng(3)
    loss, ref = (
        rng.exponential(size=17).astype(np.float32),
        rng.exponential(size=17).astype(np.float32),
    )
    x = np.float64(loss) - np.float64(ref)
    for tau in (0.1, 1.0, 1e4):
        want = tau * np.log(np.mean(np.exp(x / tau)))
        np.testing.assert_allclose(drrho_risk_kl(loss, ref, tau=tau), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(drrho_risk_kl(loss, ref, tau=1e4), x.mean(), atol=1e-3)
    for alpha in (0.1, 0.5, 1.0):
        k = math.ceil(alpha * 17)
        np.testing.assert_allclose(
            drrho_risk_cvar(loss, ref, alpha=alpha), np.sort(x)[-k:].mean(), rtol=1e-5
        )
    g = jax.grad(lambda lo: drrho_risk_kl(lo, ref, tau=0.5))(loss)
    np.testing.assert_allclose(g, jax.nn.softmax(x / 0.5), rtol=1e-4, atol=1e-6)  # softmax
    assert np.all(jax.grad(lambda r: drrho_risk_kl(loss, r, tau=0.5))(ref) == 0)
    with pytest.raises(ConfigError, match="alpha"):
        drrho_risk_cvar(loss, ref, alpha=0.0)


def test_gate_off_against_a_numpy_count(x64):
    # The ε gate of Eq. (9): anchor i is off when m_i = (1/(B−1)) Σ_{j≠i} exp(d_ij) < ε, with d the
    # reference-adjusted margins over τ; ε is put between the anchors' m values so both kinds occur.
    from jaxlab.methods.drrho_clip.losses import gate_off

    rng = np.random.default_rng(11)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    img, txt, rimg, rtxt = (unit(rng.standard_normal((6, 4))) for _ in range(4))
    tau = 0.5

    def m(a, c, ra, rc):
        s, r = a @ c.T, ra @ rc.T
        d = ((s - np.diag(s)[:, None]) - (r - np.diag(r)[:, None])) / tau
        off_diag = ~np.eye(len(a), dtype=bool)
        return np.array([np.exp(d[i][off_diag[i]]).mean() for i in range(len(a))])

    m_img, m_txt = m(img, txt, rimg, rtxt), m(txt, img, rtxt, rimg)
    eps = float(np.median(np.concatenate([m_img, m_txt])))
    want = np.stack([m_img < eps, m_txt < eps])
    assert 0 < want.sum() < want.size
    got = gate_off(*map(jnp.asarray, (img, txt, rimg, rtxt)), tau=tau, eps=eps)
    np.testing.assert_array_equal(got, want)
    assert not np.asarray(
        gate_off(*map(jnp.asarray, (img, txt, rimg, rtxt)), tau=tau, eps=0.0)
    ).any()


# ------------------------------------------------ bad inputs, references of another shape, jit


def _one_line(call, match):
    with pytest.raises(ConfigError, match=match) as err:
        call()
    assert len(str(err.value).splitlines()) == 1


def test_zero_temperature_and_empty_batches_are_one_line_errors(batch):
    # clip_loss returned NaN for τ = 0 and for an empty batch; distill_loss NaN for τ = 0.
    img, txt, rimg, rtxt = batch
    for tau in (0.0, jnp.float32(0.0), np.float64(-1.0), float("inf")):
        _one_line(lambda t=tau: L.clip_loss(img, txt, tau=t), "tau must be a positive")
        _one_line(lambda t=tau: L.per_pair_clip_loss(img, txt, tau=t), "tau must be a positive")
        _one_line(lambda t=tau: L.distill_loss(img, txt, rimg, rtxt, tau=t, ref_tau=0.1), "tau")
        _one_line(lambda t=tau: drrho_risk_kl(img[:, 0], txt[:, 0], tau=t), "tau")
    _one_line(lambda: L.distill_loss(img, txt, rimg, rtxt, tau=0.1, ref_tau=0), "ref_tau")
    _one_line(lambda: L.clip_loss(img[:0], txt[:0], tau=0.1), r"B >= 1 .*img \(0, 5\)")
    _one_line(lambda: L.distill_loss(img[:0], txt[:0], rimg[:0], rtxt[:0], tau=1, ref_tau=1), "B")
    _one_line(lambda: L.clip_loss(img, txt[:4], tau=0.1), r"txt \(4, 5\)")
    _one_line(lambda: drrho_risk_kl(img[:0, 0], txt[:0, 0], tau=0.1), "at least one example")
    _one_line(lambda: L.gcl_loss(img, txt, tau=0.1, eps=jnp.asarray([0.1, 0.2])), "scalar")
    assert L.per_pair_clip_loss(img[:0], txt[:0], tau=0.1).shape == (0,)  # empty is not NaN


@pytest.mark.parametrize(
    ("ref_img_shape", "ref_txt_shape"), [((4, E), (4, E)), ((B, E), (B, E + 1)), ((B, E), (4, E))]
)
def test_a_reference_of_another_batch_or_width_is_one_line(batch, ref_img_shape, ref_txt_shape):
    # These raised broadcasting / dot_general tracebacks from inside margins.
    img, txt, _, _ = batch
    rng = np.random.default_rng(5)
    rimg, rtxt = (
        _unit(rng.normal(size=s)).astype(np.float32) for s in (ref_img_shape, ref_txt_shape)
    )
    match = re.escape(f"ref_img {ref_img_shape} and ref_txt {ref_txt_shape} for img (6, 5)")
    kw = dict(tau=0.1, eps=1e-3)
    tables, ids = L.init_tables(B), jnp.arange(B)
    _one_line(lambda: L.drrho_loss(img, txt, rimg, rtxt, **kw), match)
    _one_line(lambda: L.gate_off(img, txt, rimg, rtxt, **kw), match)
    _one_line(lambda: L.drrho_surrogate(img, txt, rimg, rtxt, tables, ids, gamma=0.5, **kw), match)
    _one_line(lambda: L.distill_loss(img, txt, rimg, rtxt, tau=0.1, ref_tau=0.1), match)


def test_surrogate_ids_must_match_the_anchors(batch):
    img, txt, rimg, rtxt = batch
    tables = L.init_tables(B)
    kw = dict(tau=0.1, eps=1e-3, gamma=0.5)
    _one_line(
        lambda: L.drrho_surrogate(img, txt, rimg, rtxt, tables, jnp.arange(B - 1), **kw),
        r"6 anchors, got ids_B of shape \(5,\)",
    )
    got = L.drrho_surrogate(img, txt, rimg, rtxt, tables, jnp.arange(2), anchors=slice(2, 4), **kw)
    assert got[0].shape == ()


def _m(a, c, ra, rc, tau):
    """m_i = (1/(B−1)) Σ_{j≠i} exp(d_ij) in float64 numpy."""
    s, r = np.float64(a) @ np.float64(c).T, np.float64(ra) @ np.float64(rc).T
    d = ((s - np.diag(s)[:, None]) - (r - np.diag(r)[:, None])) / tau
    return np.array([np.delete(np.exp(d[i]), i).mean() for i in range(len(a))])


def test_traced_eps_under_jit_and_its_gradient(batch):
    # A traced ε raised TracerBoolConversionError (``eps == 0``). Under jit it must give the eager
    # value, and ∂F/∂ε = τ mean_i [1/(ε + m_i) + 1/(ε + m'_i)] (float64 numpy), also at ε = 0
    # (the one-sided derivative of log(ε + m) is 1/m there; through log ε it would be NaN).
    img, txt, rimg, rtxt = batch
    tau = 0.2
    m_img, m_txt = _m(img, txt, rimg, rtxt, tau), _m(txt, img, rtxt, rimg, tau)
    loss = jax.jit(lambda e: L.drrho_loss(img, txt, rimg, rtxt, tau=tau, eps=e))
    grad = jax.jit(jax.grad(lambda e: L.drrho_loss(img, txt, rimg, rtxt, tau=tau, eps=e)))
    for eps in (0.0, 1e-2, 0.3):
        eager = L.drrho_loss(img, txt, rimg, rtxt, tau=tau, eps=eps)
        np.testing.assert_allclose(loss(eps), eager, rtol=1e-6)
        want = tau * np.mean(1 / (eps + m_img) + 1 / (eps + m_txt))
        np.testing.assert_allclose(grad(eps), want, rtol=1e-5)
    # The other users of ε: the surrogate's table update, the gate, and GCL.
    tables, ids = L.init_tables(B), jnp.arange(B)

    def surrogate(e, g):
        return L.drrho_surrogate(img, txt, rimg, rtxt, tables, ids, tau=tau, eps=e, gamma=g)

    for eps, gamma in ((0.0, 1.0), (0.05, 0.3)):
        for a, b in zip(
            jax.tree.leaves(jax.jit(surrogate)(eps, gamma)),
            jax.tree.leaves(surrogate(eps, gamma)),
            strict=True,
        ):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        gate = jax.jit(lambda e: L.gate_off(img, txt, rimg, rtxt, tau=tau, eps=e))
        np.testing.assert_array_equal(gate(eps), L.gate_off(img, txt, rimg, rtxt, tau=tau, eps=eps))
    gcl = jax.jit(lambda e: L.gcl_loss(img, txt, tau=tau, eps=e))
    np.testing.assert_allclose(gcl(0.1), L.gcl_loss(img, txt, tau=tau, eps=0.1), rtol=1e-6)


def test_gradients_in_eps_and_tau_match_finite_differences(batch, x64):
    img, txt, rimg, rtxt = (np.float64(x) for x in batch)

    def f(tau, eps):
        return L.drrho_loss(img, txt, rimg, rtxt, tau=tau, eps=eps)

    g_tau, g_eps = jax.grad(f, argnums=(0, 1))(0.3, 0.05)
    h = 1e-6
    np.testing.assert_allclose(g_tau, (f(0.3 + h, 0.05) - f(0.3 - h, 0.05)) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(g_eps, (f(0.3, 0.05 + h) - f(0.3, 0.05 - h)) / (2 * h), rtol=1e-6)
    g = jax.grad(lambda t: drrho_risk_kl(img[:, 0], txt[:, 0], tau=t))(0.5)
    fd = (
        drrho_risk_kl(img[:, 0], txt[:, 0], tau=0.5 + h)
        - drrho_risk_kl(img[:, 0], txt[:, 0], tau=0.5 - h)
    ) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_under_jit_a_zero_temperature_is_caught_by_checkify(batch):
    # Traced values are not inspected (documented); checkify's float checks report the inf/NaN a
    # τ = 0 produces, which the eager call refuses.
    from jax.experimental import checkify

    img, txt, rimg, rtxt = batch
    checked = checkify.checkify(
        jax.jit(lambda t: L.drrho_loss(img, txt, rimg, rtxt, tau=t, eps=0.0)),
        errors=checkify.float_checks,
    )
    assert checked(0.0)[0].get() is not None
    assert checked(0.1)[0].get() is None


def test_risks_keep_float64_and_refuse_a_traced_alpha(x64):
    loss = np.linspace(0.0, 1.0, 7)
    ref = loss[::-1].copy()
    assert drrho_risk_kl(loss, ref, tau=0.5).dtype == jnp.float64
    assert drrho_risk_cvar(loss, ref, alpha=0.5).dtype == jnp.float64
    assert (
        drrho_risk_kl(loss.astype(np.float32), ref.astype(np.float32), tau=0.5).dtype == jnp.float32
    )
    _one_line(lambda: jax.jit(lambda a: drrho_risk_cvar(loss, ref, alpha=a))(0.5), "static")


def test_distill_takes_the_teacher_at_its_own_temperature(batch):
    """The authors' ``FastCLIPLoss.distill_loss`` (``src/fast_clip/loss.py``) in float64 numpy: the
    student's logits at its logit scale 1/τ, the teacher's at ``--distill_logit_scale`` (1/ref_tau),
    ``-(softmax(teacher) * log_softmax(student)).sum(1).mean()`` per direction, the two averaged.

    ref_tau ≠ tau, so a teacher taken at the student's temperature shows.
    """
    img, txt, rimg, rtxt = (np.float64(a) for a in batch)
    tau, ref_tau = 0.1, 0.03

    def log_softmax(z):
        z = z - z.max(1, keepdims=True)
        return z - np.log(np.exp(z).sum(1, keepdims=True))

    def ce(student, teacher):
        return -np.mean(np.sum(np.exp(log_softmax(teacher)) * log_softmax(student), 1))

    want_img = ce(img @ txt.T / tau, rimg @ rtxt.T / ref_tau)
    want_txt = ce(txt @ img.T / tau, rtxt @ rimg.T / ref_tau)
    got = L.distill_loss(*batch, tau=tau, ref_tau=ref_tau)
    np.testing.assert_allclose(got, (want_img + want_txt) / 2, rtol=1e-5)


def test_surrogate_with_a_reference_is_the_authors_sogclr_forward(batch, x64):
    """``drrho_surrogate`` with a reference, γ < 1 and ε > 0 against the authors' ``SogCLRLoss``
    (``src/fast_clip/loss.py`` of Optimization-AI/DRRho-CLIP, one process, ``multiply_tau``) in
    float64 numpy: ``pairwise_loss`` subtracts ``(ref_sim − ref_diag)`` at the learner's logit
    scale (paper Eq. (9)); u ← the γ-average of log(ε + (1/N) Σ_{j≠i} e^{d_ij}) in the log domain,
    a fresh sample (their u = 0) taking the estimate; loss = τ mean_i Σ_dir Σ_{j≠i} sg(e^{d_ij −
    u_i}) d_ij / (N − 1); its image gradient from the same weights."""
    from scipy.special import logsumexp

    img, txt, rimg, rtxt = (np.float64(x) for x in batch)
    tau, eps, gamma = 0.2, 0.05, 0.4
    n = len(img)
    rng = np.random.default_rng(4)
    seen = np.array([True, False, True, True, False, True])
    u_im0, u_tt0 = (np.where(seen, rng.normal(size=n), 0.0) for _ in range(2))
    eye, mask = np.eye(n), 1.0 - np.eye(n)
    diag, rdiag = np.sum(img * txt, 1, keepdims=True), np.sum(rimg * rtxt, 1, keepdims=True)
    diff_im = (img @ txt.T - diag) / tau - (rimg @ rtxt.T - rdiag) / tau
    diff_tt = (txt @ img.T - diag) / tau - (rtxt @ rimg.T - rdiag) / tau

    def moving(u, diff):
        shift = np.log(eps * n)
        g = logsumexp(diff + eye * shift - shift, axis=1) + np.log(eps)
        u_diff = u + np.log(1 - gamma) - (g + np.log(gamma))
        new = np.where(u_diff > 0, u + np.log(1 - gamma) + np.log1p(np.exp(-u_diff)),
                       g + np.log(gamma) + np.log1p(np.exp(u_diff)))  # fmt: skip
        return np.where(u == 0.0, g, new)

    u_im, u_tt = moving(u_im0, diff_im), moving(u_tt0, diff_tt)
    a_im = np.exp(diff_im - u_im[:, None]) * mask / (n - 1)
    a_tt = np.exp(diff_tt - u_tt[:, None]) * mask / (n - 1)
    want = tau * np.mean(np.sum(diff_im * a_im, 1) + np.sum(diff_tt * a_tt, 1))
    want_g_img = (a_im @ txt - a_im.sum(1, keepdims=True) * txt) / n
    want_g_img += (a_tt.T @ txt - a_tt.sum(1, keepdims=True) * txt) / n

    tables = L.ContrastiveTables(jnp.asarray(u_im0), jnp.asarray(u_tt0), jnp.asarray(seen))
    ids = jnp.arange(n)

    def sur(i):
        return L.drrho_surrogate(i, txt, rimg, rtxt, tables, ids, tau=tau, eps=eps, gamma=gamma)

    (value, new_tables), g_img = jax.jit(jax.value_and_grad(sur, has_aux=True))(jnp.asarray(img))
    np.testing.assert_allclose(value, want, rtol=1e-10)
    np.testing.assert_allclose(new_tables.log_u_img, u_im, rtol=1e-10)
    np.testing.assert_allclose(new_tables.log_u_txt, u_tt, rtol=1e-10)
    np.testing.assert_allclose(g_img, want_g_img, rtol=1e-9, atol=1e-12)
