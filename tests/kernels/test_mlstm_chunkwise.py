"""The Pallas chunkwise mLSTM against the parallel form: outputs, gradients, state, and dispatch.

Both kernel styles run in interpret mode on CPU (GPU style: one program walks its chunks; TPU
style: the chunk axis is a sequential grid axis with VMEM scratch). Tolerances are relative to
max|h| (or max|grad|): float32 kernels against the float32 parallel form differ by summation order
over at most S terms, measured ~1e-6 for h; 2e-5 leaves room, for h and gradients. Gradients
(the Pallas backward kernels) are compared at ``eps = 0``, where the kernel's gate-gradient
formulas are exact (module docstring of the kernel), with jax.grad of the parallel form and with
the kernel file's XLA backward (``_bwd_reference``: the vjp of the jnp mirror); one test takes a
large eps, where only q, k, v and the state's gradients are exact. The kernels compute
in float32 only, so there is no float64 mode here; the cell's forms are checked in float64 in
``tests/methods/xlstm``.
"""

import functools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.methods.xlstm import mlstm
from pallas_kernels import MLSTMBlockSizes, mlstm_chunkwise, mlstm_chunkwise_reference
from pallas_kernels.mlstm_chunkwise import _bwd_reference as xla_backward

TOL = 2e-5
#          B  NH  S   Dk  Dv  chunk  style  initial state  head-dim tile
CASES = {
    "off_grid_gpu": (2, 1, 21, 8, 8, 16, "gpu", False, None),
    # Dk = 16 in two tiles, Dv = 32 in four: the state kernels' tile grid and the output and
    # gradient kernels' loops over head-dim slices (how xLSTM 7B's 256 x 512 head fits a GPU)
    "tiled_gpu_state": (1, 1, 24, 16, 32, 8, "gpu", True, 8),
    "off_grid_tpu_state": pytest.param(
        (1, 2, 21, 8, 16, 8, "tpu", True, None), marks=pytest.mark.slow
    ),
}  # the interpreter costs seconds per kernel call: two cases in the fast suite (with the state
# test below, chunk 8 and an initial state); the eps test runs on the chunk grid with Dv != Dk


def inputs(B, NH, S, Dk, Dv, seed=0):
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(B, NH, S, Dk)) for _ in range(2))
    v = rng.normal(size=(B, NH, S, Dv))
    i, f = rng.normal(size=(B, NH, S)) * 3, rng.normal(size=(B, NH, S)) + 2
    return tuple(jnp.asarray(x, jnp.float32) for x in (q, k, v, i, f))


def random_state(B, NH, Dk, Dv, seed=0):
    rng = np.random.default_rng(seed)
    C, n = rng.normal(size=(B, NH, Dk, Dv)) * 0.3, rng.normal(size=(B, NH, Dk)) * 0.3
    return tuple(jnp.asarray(x, jnp.float32) for x in (C, n, rng.normal(size=(B, NH))))


def rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


def normaliser_branches(q, k, i, f, state):
    """Per token, whether |nq_t| > exp(-m_t) in the parallel form (numpy float64): the backward
    treats the two branches of max(|nq|, exp(-m)) differently, so the data must hit both."""
    q, k, i, f = (np.asarray(x, np.float64) for x in (q, k, i, f))
    n0, m0 = (np.asarray(x, np.float64) for x in state[1:])
    S, Dk = q.shape[-2:]
    F = np.cumsum(-np.logaddexp(0.0, -f), axis=-1)  # cumulative log sigmoid(f)
    D = F[..., :, None] - F[..., None, :] + i[..., None, :]
    D = np.where(np.tri(S, dtype=bool), D, -np.inf)
    init = F + m0[..., None]
    m = np.maximum(D.max(-1), init)
    qk = np.einsum("bhtk,bhsk->bhts", q, k) * Dk**-0.5
    nq = np.sum(np.exp(D - m[..., None]) * qk, -1)
    nq += np.exp(init - m) * np.einsum("bhtk,bhk->bht", q, n0) * Dk**-0.5
    return np.abs(nq) > np.exp(-m)


def mlstm_heads_first(q, k, v, i, f, **kw):
    """jaxlab's cell, whose sequences are ``(B, T, H, D)``, on the kernel's heads-first arrays."""
    out = mlstm(*(jnp.swapaxes(x, 1, 2) for x in (q, k, v, i, f)), **kw)
    if kw.get("return_state"):
        return jnp.swapaxes(out[0], 1, 2), out[1]
    return jnp.swapaxes(out, 1, 2)


def zero_state(B, NH, Dk, Dv):
    return jnp.zeros((B, NH, Dk, Dv)), jnp.zeros((B, NH, Dk)), jnp.zeros((B, NH))


def value_and_vjp(fn, w, *args):
    """``fn(*args)`` and its vjp for the cotangent ``w``, jitted: one compiled program instead of
    op-by-op dispatch, several times faster for the interpreted kernels and the references."""

    def run(w, *args):
        h, vjp = jax.vjp(fn, *args)
        return h, vjp(w)

    return jax.jit(run)(w, *args)


def check_gradients(args, state, w, chunk, style, eps=0.0, block_d=None):
    """h and the gradients of the Pallas kernels (one vjp) against jax.grad of the parallel form
    and against the XLA backward of the kernel file. ``state=None`` takes the default (zero)
    initial state and compares q, k, v, i, f; else the state's gradients too. For ``eps > 0`` the
    gate and ``m`` gradients drop eps-sized terms (module docstring of the kernel), so only the
    XLA backward, which drops the same ones, is their oracle there."""
    B, NH, _, Dk = args[0].shape
    zeros = zero_state(B, NH, Dk, args[2].shape[-1])
    kw = dict(block_sizes=MLSTMBlockSizes(chunk, block_d), backend=style, interpret=True)

    def both(fn, **kw):  # fn(q, k, v, i, f[, C, n, m])
        return lambda *a: fn(*a[:5], initial_state=a[5:] if state else None, eps=eps, **kw)

    diff = (*args, *(state or ()))
    h, grads = value_and_vjp(both(mlstm_chunkwise, **kw), w, *diff)
    h_ref, refs = value_and_vjp(both(mlstm_chunkwise_reference), w, *diff)
    flat = [x.reshape(-1, *x.shape[2:]) for x in (*args, *(state or zeros), w)]
    xla = jax.jit(functools.partial(xla_backward, chunk=chunk, eps=eps))(*flat)
    assert rel(h, h_ref) < TOL
    assert len(grads) == len(diff)
    for name, g, r, x in zip("qkvifCnm", grads, refs, xla, strict=False):
        if eps == 0 or name in "qkvCn":
            assert rel(g, r) < TOL, (name, "parallel form")
        assert rel(g, x.reshape(g.shape)) < TOL, (name, "XLA backward")
    return h


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_outputs_and_gradients_match_the_parallel_form(case):
    B, NH, S, Dk, Dv, chunk, style, with_state, block_d = case
    args = inputs(B, NH, S, Dk, Dv)
    state = random_state(B, NH, Dk, Dv, seed=1) if with_state else None
    branch = normaliser_branches(*args[:2], *args[3:], state or zero_state(B, NH, Dk, Dv))
    assert branch.any() and not branch.all()
    w = jax.random.normal(jax.random.key(1), (B, NH, S, Dv))
    check_gradients(args, state, w, chunk, style, block_d=block_d)


def test_initial_state_final_state_and_its_gradients():
    args = inputs(1, 2, 13, 8, 8, seed=3)
    first, rest = [x[:, :, :6] for x in args], [x[:, :, 6:] for x in args]
    kw = dict(block_sizes=MLSTMBlockSizes(8), backend="gpu", interpret=True)
    _, state = jax.jit(lambda *a: mlstm_chunkwise(*a, return_state=True, **kw))(*first)
    parallel = functools.partial(mlstm_heads_first, form="parallel", return_state=True)
    _, ref_state = jax.jit(parallel)(*first)
    for a, b in zip(state, ref_state, strict=True):
        assert rel(a, b) < TOL
    w = jax.random.normal(jax.random.key(2), rest[2].shape)
    h2 = check_gradients(rest, state, w, 8, "gpu")  # 7 tokens: a padded chunk
    whole = jax.jit(functools.partial(mlstm_chunkwise_reference, eps=0.0))(*args)
    assert rel(h2, whole[:, :, 6:]) < TOL


def test_eps_enters_the_backward():
    """A large eps (0.5: at 1e-6 its effect would hide below the tolerance) in the normaliser:
    dq, dk, dv, dC, dn stay exact, the gate gradients match the XLA backward. Two whole chunks
    (no padding) and Dv != Dk, which the other cases do not take in the GPU style."""
    args = inputs(1, 1, 16, 8, 16, seed=6)
    state = random_state(1, 1, 8, 16, seed=7)
    w = jax.random.normal(jax.random.key(3), args[2].shape)
    check_gradients(args, state, w, 8, "gpu", eps=0.5)


def _pallas_kernels(jaxpr):
    """Names of the pallas_calls in a jaxpr, nested jaxprs included, in order."""
    names = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            names.append(eqn.params["name"])
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names += _pallas_kernels(sub)
    return names


def test_the_backward_runs_the_pallas_kernels():
    """The vjp traces the two forward and the three backward kernels: no silent XLA fallback."""
    args = inputs(1, 1, 12, 8, 8)
    kw = dict(block_sizes=MLSTMBlockSizes(8), backend="gpu", interpret=True)

    def fwd_bwd(*a):
        h, vjp = jax.vjp(lambda *x: mlstm_chunkwise(*x, **kw), *a)
        return vjp(h)

    kernels = _pallas_kernels(jax.make_jaxpr(fwd_bwd)(*args).jaxpr)
    assert kernels == ["mlstm_states", "mlstm_outputs", "mlstm_dstates", "mlstm_dqk", "mlstm_dv"]


def test_the_reference_is_the_cells_parallel_form():
    """Pins the kernel file's jnp copy of the parallel form to jaxlab's."""
    args = inputs(1, 2, 19, 8, 8, seed=4)
    parallel = functools.partial(mlstm_heads_first, form="parallel")
    assert rel(jax.jit(mlstm_chunkwise_reference)(*args), jax.jit(parallel)(*args)) < 1e-6


def test_the_cell_dispatches_pallas_and_auto():
    args = inputs(1, 1, 12, 8, 8, seed=5)

    def cell(form, **kw):
        return jax.jit(functools.partial(mlstm_heads_first, form=form, **kw))(*args)

    assert rel(cell("pallas", chunk_size=8), cell("parallel")) < TOL
    np.testing.assert_array_equal(cell("auto"), cell("chunkwise"))
    with pytest.raises(ConfigError, match="power of two"):
        mlstm_heads_first(*args, form="pallas", chunk_size=12)
