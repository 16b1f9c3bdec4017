"""The mLSTM cell: its forms agree with each other and with a plain numpy float64 loop.

Sequences are ``(B, T, H, D)`` and gates ``(B, T, H)``, the layout of
``jax.nn.dot_product_attention``; the numpy loop indexes them that way.

Tolerances are relative to max|h| (h reaches 10-1000 on random inputs, so absolute tolerances would
be meaningless): 1e-10 in float64 (the forms differ only in summation order), 2e-5 in float32 (the
chunkwise and parallel forms sum up to S terms of size max|h| in a different order than the scan).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxlab.methods.xlstm.cell as cell
from jaxlab.core.errors import ConfigError
from jaxlab.methods.xlstm import MLSTMState, mlstm, mlstm_step
from jaxlab.testing.compiles import backend_compiles

B, NH, DK, DV = 2, 2, 8, 4
FORMS = ("recurrent", "parallel", "chunkwise")


def inputs(S, seed=0, dtype=np.float64, f_shift=2.0):
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(B, S, NH, DK)) for _ in range(2))
    v = rng.normal(size=(B, S, NH, DV))
    i = rng.normal(size=(B, S, NH)) * 3
    f = rng.normal(size=(B, S, NH)) + f_shift
    return tuple(x.astype(dtype) for x in (q, k, v, i, f))


def numpy_reference(q, k, v, i, f, eps, state=None):
    """The recurrence written out token by token in float64 (no JAX), on ``(B, T, H, D)``."""
    q, k, v, i, f = (np.asarray(x, np.float64) for x in (q, k, v, i, f))
    Bs, S, H, Dk = q.shape
    h = np.zeros((Bs, S, H, v.shape[-1]))
    C_out, n_out, m_out = [], [], []
    for b in range(Bs):
        for hd in range(H):
            if state is None:
                C, n, m = np.zeros((Dk, v.shape[-1])), np.zeros(Dk), 0.0
            else:
                C, n, m = (np.array(x[b, hd], np.float64) for x in state)
            for t in range(S):
                lf = -np.log1p(np.exp(-f[b, t, hd]))
                m_new = max(lf + m, i[b, t, hd])
                fg, ig = np.exp(lf + m - m_new), np.exp(i[b, t, hd] - m_new)
                C = fg * C + ig * np.outer(k[b, t, hd], v[b, t, hd])
                n = fg * n + ig * k[b, t, hd]
                m = m_new
                qs = q[b, t, hd] / np.sqrt(Dk)
                h[b, t, hd] = C.T @ qs / (max(abs(n @ qs), np.exp(-m)) + eps)
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
    w = np.random.default_rng(9).normal(size=(B, 11, NH, DV))

    def loss(form, *a):
        return jnp.sum(mlstm(*a, form=form, chunk_size=4) * w)

    grads = {
        f: jax.jit(jax.grad(lambda *a, f=f: loss(f, *a), argnums=range(5)))(*args) for f in FORMS
    }
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
    first = [x[:, :split] for x in args]
    rest = [x[:, split:] for x in args]
    h1, s1 = mlstm(*first, form=form, chunk_size=4, return_state=True)
    h2, s2 = mlstm(*rest, form=form, chunk_size=4, initial_state=s1, return_state=True)
    assert rel_err(jnp.concatenate([h1, h2], axis=1), h_full) < 1e-10
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
    h, state = mlstm(*[x[:, :2] for x in args], form="chunkwise", return_state=True)
    h_step, _ = mlstm_step(state, *(x[:, 2] for x in args))
    h_all = mlstm(*args, form="parallel")
    assert rel_err(h_step, h_all[:, 2]) < 1e-10


def test_bad_shapes_and_options_are_config_errors():
    q, k, v, i, f = inputs(4, dtype=np.float32)
    with pytest.raises(ConfigError, match="gates"):
        mlstm(q, k, v, i[:, :3], f)
    with pytest.raises(ConfigError, match="q, k must be"):
        mlstm(q, k[..., :3], v, i, f)
    with pytest.raises(ConfigError, match="unknown form"):
        mlstm(q, k, v, i, f, form="nope")
    state = (np.zeros((B, NH, DK, DV)), np.zeros((B, NH, DK)), np.zeros((B, NH)))
    with pytest.raises(ConfigError, match=r"state \(C, n, m\) must have shapes"):
        mlstm(q, k, v, i, f, initial_state=(state[0][..., :2], *state[1:]))
    with pytest.raises(ConfigError, match=r"gates i, f must be \(B, H\)"):
        mlstm_step(MLSTMState(*state), q[:, 0], k[:, 0], v[:, 0], i[:, :1], f[:, 0])


def test_heads_first_gates_are_a_one_line_error():
    """Gates laid out heads-first ``(B, H, T)`` (the layout before ``(B, T, H, D)``) are refused
    with the expected shape, not broadcast or reinterpreted."""
    q, k, v, i, f = inputs(5, dtype=np.float32)
    with pytest.raises(ConfigError, match=r"gates i, f must be \(B, T, H\) = \(2, 5, 2\)"):
        mlstm(q, k, v, i.transpose(0, 2, 1), f.transpose(0, 2, 1))


def test_time_and_head_axes_are_not_swapped(x64):
    """With T != H the ``(B, T, H, D)`` call equals the numpy loop over t for each head, and the
    same arrays read heads-first (T and H swapped) give another answer: the layout matters."""
    args = inputs(6, seed=11)
    h_ref, _ = numpy_reference(*args, 1e-6)
    h = mlstm(*args, form="chunkwise", chunk_size=4)
    assert h.shape == (B, 6, NH, DV)
    assert rel_err(h, h_ref) < 1e-10
    swapped = [np.swapaxes(x, 1, 2) for x in args]
    h_swapped = np.swapaxes(mlstm(*swapped, form="chunkwise", chunk_size=4), 1, 2)
    assert rel_err(h_swapped, h_ref) > 1e-2


# ------------------------------------------------------------------ gradients of every form

GRAD_T = 13  # off the Pallas chunk grid of 8: two chunks, the second padded


@pytest.fixture(scope="module")
def grad_problem():
    """float32 inputs, a random initial state and cotangent weights for ``h`` and the final state,
    and the gradients of the weighted sum by the parallel form in float64 (the reference)."""
    rng = np.random.default_rng(12)
    args = inputs(GRAD_T, seed=13, dtype=np.float32)
    state = (rng.normal(size=(B, NH, DK, DV)) * 0.3, rng.normal(size=(B, NH, DK)) * 0.3,
             rng.normal(size=(B, NH)))  # fmt: skip
    state = tuple(x.astype(np.float32) for x in state)
    w = (rng.normal(size=(B, GRAD_T, NH, DV)), rng.normal(size=(B, NH, DK, DV)),
         rng.normal(size=(B, NH, DK)), rng.normal(size=(B, NH)))  # fmt: skip
    with jax.enable_x64(True):
        ref = jax.jit(jax.grad(_weighted("parallel", w), argnums=range(8)))(
            *(np.asarray(x, np.float64) for x in (*args, *state))
        )
        ref = [np.asarray(g) for g in ref]
    return (*args, *state), w, ref


def _weighted(form, w):
    """A scalar of ``h`` and the final state, so every output gets a cotangent."""

    def loss(q, k, v, i, f, C, n, m):
        h, s = mlstm(q, k, v, i, f, form=form, chunk_size=8, initial_state=(C, n, m),
                     return_state=True)  # fmt: skip
        return sum(jnp.sum(x * jnp.asarray(wx, x.dtype)) for x, wx in zip((h, *s), w, strict=True))

    return loss


@pytest.mark.parametrize("form", ["recurrent", "parallel", "chunkwise", "pallas", "auto"])
def test_grad_through_every_form_matches_the_float64_parallel_form(grad_problem, form, monkeypatch):
    """``jax.grad`` of every form (``pallas`` in interpret mode; ``auto`` as on a GPU with the
    switch on, where it picks the kernels) in ``q, k, v, i, f`` and the initial state, through
    ``h`` and the final state. Before the fix ``pallas`` raised "Linearization failed": the cell
    asked the kernel for its final state, which has no differentiation rule. Tolerance 5e-5 of
    max|grad|: float32 sums of up to T terms (and the kernel's gate formulas drop the eps-sized
    stabiliser dependence, pallas_kernels.mlstm_chunkwise)."""
    if form == "auto":
        monkeypatch.setattr(cell, "pallas_ready", lambda platform=None, kernel=None: True)
    primals, w, ref = grad_problem
    loss = _weighted(form, w)
    if form in ("pallas", "auto"):
        assert "pallas_call" in str(jax.make_jaxpr(loss)(*primals))
    grads = jax.jit(jax.grad(loss, argnums=range(8)))(*primals)
    for name, g, g_ref in zip("qkvifCnm", grads, ref, strict=True):
        assert g.dtype == jnp.float32, name
        assert rel_err(g, g_ref) < 5e-5, (form, name)


def test_auto_asks_the_switch_about_the_mlstm_kernel_alone(monkeypatch):
    """``form="auto"`` asks :func:`pallas_ready` about the mLSTM kernel: the switch's table turns
    kernels on one at a time, as measured (a question about every kernel would say no on GPUs)."""
    asked = []

    def ready(platform=None, kernel=None):
        asked.append(kernel)
        return kernel == "mlstm"

    monkeypatch.setattr(cell, "pallas_ready", ready)
    q = jnp.ones((1, 16, 2, 8))
    i = f = jnp.ones((1, 16, 2))
    jaxpr = jax.make_jaxpr(lambda q: mlstm(q, q, q, i, f, form="auto", chunk_size=8))(q)
    assert "pallas_call" in str(jaxpr)
    assert asked == ["mlstm"]


@pytest.mark.parametrize("form", ["recurrent", "parallel", "chunkwise"])
def test_a_repeated_eager_call_compiles_nothing(form):
    """Called outside jit, each XLA form is one program: the second call with the same shapes
    compiles nothing (a scanned form traced and compiled its scan again on every call)."""
    keys = jax.random.split(jax.random.key(3), 5)
    q, k, v = (jax.random.normal(key, (1, 24, 2, 8)) for key in keys[:3])
    i, f = (jax.random.normal(key, (1, 24, 2)) for key in keys[3:])
    call = lambda: mlstm(q, k, v, i, f, form=form, chunk_size=8)  # noqa: E731
    call()
    with backend_compiles() as names:
        call()
    assert names == []
