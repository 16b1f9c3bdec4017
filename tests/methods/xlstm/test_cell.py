"""The mLSTM cell: its three forms agree with each other and with a plain numpy float64 loop.

Tolerances are relative to max|h| (h reaches 10-1000 on random inputs, so absolute tolerances would
be meaningless): 1e-10 in float64 (the forms differ only in summation order), 2e-5 in float32 (the
chunkwise and parallel forms sum up to S terms of size max|h| in a different order than the scan).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.methods.xlstm import MLSTMState, mlstm, mlstm_step

B, NH, DK, DV = 2, 2, 8, 4
FORMS = ("recurrent", "parallel", "chunkwise")


def inputs(S, seed=0, dtype=np.float64, f_shift=2.0):
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(B, NH, S, DK)) for _ in range(2))
    v = rng.normal(size=(B, NH, S, DV))
    i = rng.normal(size=(B, NH, S)) * 3
    f = rng.normal(size=(B, NH, S)) + f_shift
    return tuple(x.astype(dtype) for x in (q, k, v, i, f))


def numpy_reference(q, k, v, i, f, eps, state=None):
    """The recurrence written out token by token in float64 (no JAX)."""
    q, k, v, i, f = (np.asarray(x, np.float64) for x in (q, k, v, i, f))
    Bs, H, S, Dk = q.shape
    h = np.zeros((Bs, H, S, v.shape[-1]))
    C_out, n_out, m_out = [], [], []
    for b in range(Bs):
        for hd in range(H):
            if state is None:
                C, n, m = np.zeros((Dk, v.shape[-1])), np.zeros(Dk), 0.0
            else:
                C, n, m = (np.array(x[b, hd], np.float64) for x in state)
            for t in range(S):
                lf = -np.log1p(np.exp(-f[b, hd, t]))
                m_new = max(lf + m, i[b, hd, t])
                fg, ig = np.exp(lf + m - m_new), np.exp(i[b, hd, t] - m_new)
                C = fg * C + ig * np.outer(k[b, hd, t], v[b, hd, t])
                n = fg * n + ig * k[b, hd, t]
                m = m_new
                qs = q[b, hd, t] / np.sqrt(Dk)
                h[b, hd, t] = C.T @ qs / (max(abs(n @ qs), np.exp(-m)) + eps)
            C_out.append(C), n_out.append(n), m_out.append(m)
    shape = (Bs, H)
    return h, (
        np.reshape(C_out, (*shape, *C.shape)),
        np.reshape(n_out, (*shape, Dk)),
        np.reshape(m_out, shape),
    )


def rel_err(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))


@pytest.mark.parametrize(("S", "eps"), [(1, 1e-6), (16, 0.0), (21, 0.0), (21, 1e-6)])
def test_every_form_matches_the_numpy_loop_in_float64(x64, S, eps):
    args = inputs(S)
    h_ref, state_ref = numpy_reference(*args, eps)
    for form in FORMS:
        h, state = mlstm(*args, form=form, chunk_size=8, eps=eps, return_state=True)
        assert h.dtype == jnp.float64
        assert rel_err(h, h_ref) < 1e-10, form
        for got, want in zip(state, state_ref, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * np.max(np.abs(want)))


def test_long_sequence_decay_has_no_cancellation(x64):
    """Strong forgetting over 300 tokens: |L_t| reaches ~700, where ``L_t - L_s`` loses digits."""
    args = inputs(300, seed=3, f_shift=-2.0)
    h_ref, _ = numpy_reference(*args, 0.0)
    for form in ("parallel", "chunkwise"):
        assert rel_err(mlstm(*args, form=form, chunk_size=64, eps=0.0), h_ref) < 1e-10, form


@pytest.mark.parametrize("chunk_size", [4, 64])
def test_forms_agree_in_float32(chunk_size):
    args = inputs(37, seed=1, dtype=np.float32)
    h_rec = mlstm(*args, form="recurrent")
    assert h_rec.dtype == jnp.float32
    for form in ("parallel", "chunkwise"):
        assert rel_err(mlstm(*args, form=form, chunk_size=chunk_size), h_rec) < 2e-5, form


def test_bfloat16_inputs_accumulate_in_float32():
    args = inputs(9, dtype=np.float32)
    h = mlstm(*(jnp.asarray(x, jnp.bfloat16) for x in args), form="chunkwise", chunk_size=4)
    assert h.dtype == jnp.float32


def test_gradients_agree_across_forms(x64):
    args = inputs(11, seed=2)
    w = np.random.default_rng(9).normal(size=(B, NH, 11, DV))

    def loss(form, *a):
        return jnp.sum(mlstm(*a, form=form, chunk_size=4) * w)

    grads = {f: jax.grad(lambda *a, f=f: loss(f, *a), argnums=range(5))(*args) for f in FORMS}
    for form in ("parallel", "chunkwise"):
        for name, g, g_ref in zip("qkvif", grads[form], grads["recurrent"], strict=True):
            assert np.all(np.isfinite(g)), (form, name)
            assert rel_err(g, g_ref) < 1e-9, (form, name)


def test_chunkwise_forward_and_reverse_mode_with_a_state_match_the_other_forms(x64):
    """The chunkwise form runs an in-place chunk loop when evaluated and a scan over the same chunks
    when differentiated (cell.py, ``_chunks``): its value under ``jax.jvp`` equals the plain call,
    and its tangents and gradients (initial and final state included, a length off the chunk grid)
    equal the parallel form's (which the recurrent form's are checked against above)."""
    args = inputs(13, seed=8)
    rng = np.random.default_rng(10)
    state = (
        rng.normal(size=(B, NH, DK, DV)),
        rng.normal(size=(B, NH, DK)),
        rng.normal(size=(B, NH)),
    )
    primals = (*args, *state)
    tangents = tuple(rng.normal(size=np.shape(x)) for x in primals)

    def run(form):
        def f(q, k, v, i, f_, C, n, m):
            h, s = mlstm(q, k, v, i, f_, form=form, chunk_size=4, initial_state=(C, n, m),
                         return_state=True)  # fmt: skip
            return h, tuple(s)

        return f

    plain = jax.jit(run("chunkwise"))(*primals)
    cts = jax.tree.map(lambda x: rng.normal(size=x.shape), plain)

    @jax.jit
    def derivatives(primals, tangents, cts):  # both forms in one compiled function
        jvps = {form: jax.jvp(run(form), primals, tangents) for form in ("chunkwise", "parallel")}
        vjps = {form: jax.vjp(run(form), *primals)[1](cts) for form in ("chunkwise", "parallel")}
        return jvps, vjps

    jvps, vjps = derivatives(primals, tangents, cts)
    for got, want in zip(
        jax.tree.leaves(jvps["chunkwise"][0]), jax.tree.leaves(plain), strict=True
    ):
        assert rel_err(got, want) < 1e-12
    for got, want in zip(*(jax.tree.leaves(jvps[f][1]) for f in ("chunkwise", "parallel")),
                         strict=True):  # fmt: skip
        assert rel_err(got, want) < 1e-9
    for name, got, want in zip("qkvifCnm", vjps["chunkwise"], vjps["parallel"], strict=True):
        assert np.all(np.isfinite(got)), name
        assert rel_err(got, want) < 1e-9, name


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("split", [5, 8])
def test_splitting_and_carrying_the_state_reproduces_one_pass(x64, form, split):
    args = inputs(19, seed=4)
    h_full, s_full = mlstm(*args, form=form, chunk_size=4, return_state=True)
    first = [x[:, :, :split] for x in args]
    rest = [x[:, :, split:] for x in args]
    h1, s1 = mlstm(*first, form=form, chunk_size=4, return_state=True)
    h2, s2 = mlstm(*rest, form=form, chunk_size=4, initial_state=s1, return_state=True)
    assert rel_err(jnp.concatenate([h1, h2], axis=2), h_full) < 1e-10
    for a, b in zip(s2, s_full, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_nonzero_initial_state_matches_the_numpy_loop(x64):
    args = inputs(10, seed=5)
    rng = np.random.default_rng(6)
    state = MLSTMState(
        rng.normal(size=(B, NH, DK, DV)), rng.normal(size=(B, NH, DK)), rng.normal(size=(B, NH))
    )
    h_ref, _ = numpy_reference(*args, 1e-6, state=state)
    for form in FORMS:
        h = mlstm(*args, form=form, chunk_size=4, initial_state=state)
        assert rel_err(h, h_ref) < 1e-10, form


def test_decode_step_is_one_token_of_the_scan(x64):
    args = inputs(3, seed=7)
    h, state = mlstm(*[x[:, :, :2] for x in args], form="chunkwise", return_state=True)
    h_step, _ = mlstm_step(state, *(x[:, :, 2] for x in args))
    h_all = mlstm(*args, form="parallel")
    assert rel_err(h_step, h_all[:, :, 2]) < 1e-10


def test_bad_shapes_and_options_are_config_errors():
    q, k, v, i, f = inputs(4, dtype=np.float32)
    with pytest.raises(ConfigError, match="gates"):
        mlstm(q, k, v, i[..., :3], f)
    with pytest.raises(ConfigError, match="q, k must be"):
        mlstm(q, k[..., :3], v, i, f)
    with pytest.raises(ConfigError, match="unknown form"):
        mlstm(q, k, v, i, f, form="nope")
