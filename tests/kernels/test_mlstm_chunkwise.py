"""The Pallas chunkwise mLSTM against the parallel form: outputs, gradients, state, and dispatch.

Both kernel styles run in interpret mode on CPU (GPU style: one program walks its chunks; TPU
style: the chunk axis is a sequential grid axis with VMEM scratch). Tolerances are relative to
max|h| (or max|grad|): float32 kernels against the float32 parallel form differ by summation order
over at most S terms, measured ~1e-6; 2e-5 leaves room. Gradients are compared at ``eps = 0``,
where the kernel's gate-gradient formulas are exact (module docstring of the kernel).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.methods.xlstm import mlstm
from pallas_kernels import MLSTMBlockSizes, mlstm_chunkwise, mlstm_chunkwise_reference

TOL = 2e-5
#          B  NH  S   Dk  Dv  chunk  style
CASES = {
    "off_grid_gpu": (2, 1, 21, 8, 8, 16, "gpu"),
    "on_grid_gpu": pytest.param((1, 2, 32, 8, 16, 8, "gpu"), marks=pytest.mark.slow),
    "off_grid_tpu": pytest.param((1, 2, 21, 8, 16, 8, "tpu"), marks=pytest.mark.slow),
}  # the interpreter costs seconds per kernel call: one case in the fast suite


def inputs(B, NH, S, Dk, Dv, seed=0):
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(B, NH, S, Dk)) for _ in range(2))
    v = rng.normal(size=(B, NH, S, Dv))
    i, f = rng.normal(size=(B, NH, S)) * 3, rng.normal(size=(B, NH, S)) + 2
    return tuple(jnp.asarray(x, jnp.float32) for x in (q, k, v, i, f))


def rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_outputs_and_gradients_match_the_parallel_form(case):
    B, NH, S, Dk, Dv, chunk, style = case
    args = inputs(B, NH, S, Dk, Dv)
    kw = dict(block_sizes=MLSTMBlockSizes(chunk), backend=style, interpret=True)
    assert rel(mlstm_chunkwise(*args, **kw), mlstm_chunkwise_reference(*args)) < TOL
    w = jax.random.normal(jax.random.key(1), (B, NH, S, Dv))
    grads = jax.grad(lambda *a: jnp.sum(mlstm_chunkwise(*a, eps=0.0, **kw) * w), range(5))(*args)
    refs = jax.grad(lambda *a: jnp.sum(mlstm_chunkwise_reference(*a, eps=0.0) * w), range(5))(*args)
    for name, g, r in zip("qkvif", grads, refs, strict=True):
        assert rel(g, r) < 10 * TOL, name


def test_initial_state_final_state_and_its_gradients():
    args = inputs(1, 2, 13, 8, 8, seed=3)
    first, rest = [x[:, :, :6] for x in args], [x[:, :, 6:] for x in args]
    kw = dict(block_sizes=MLSTMBlockSizes(8), backend="gpu", interpret=True)
    _, state = mlstm_chunkwise(*first, return_state=True, **kw)
    _, ref_state = mlstm(*first, form="parallel", return_state=True)
    for a, b in zip(state, ref_state, strict=True):
        assert rel(a, b) < TOL
    h2 = mlstm_chunkwise(*rest, initial_state=state, **kw)
    assert rel(h2, mlstm_chunkwise_reference(*args)[:, :, 6:]) < TOL
    w = jax.random.normal(jax.random.key(2), h2.shape)

    def loss(fn, C, n, m):
        return jnp.sum(fn(*rest, initial_state=(C, n, m), eps=0.0) * w)

    pallas = lambda *a, **k: mlstm_chunkwise(*a, **k, **kw)  # noqa: E731
    kernel = jax.grad(lambda *s: loss(pallas, *s), (0, 1, 2))
    ref = jax.grad(lambda *s: loss(mlstm_chunkwise_reference, *s), (0, 1, 2))
    for name, g, r in zip("Cnm", kernel(*state), ref(*state), strict=True):
        assert rel(g, r) < 10 * TOL, name


def test_the_reference_is_the_cells_parallel_form():
    """Pins the kernel file's jnp copy of the parallel form to jaxlab's."""
    args = inputs(1, 2, 19, 8, 8, seed=4)
    assert rel(mlstm_chunkwise_reference(*args), mlstm(*args, form="parallel")) < 1e-6


def test_the_cell_dispatches_pallas_and_auto():
    args = inputs(1, 1, 12, 8, 8, seed=5)
    h = mlstm(*args, form="pallas", chunk_size=8)
    assert rel(h, mlstm(*args, form="parallel")) < TOL
    np.testing.assert_array_equal(mlstm(*args, form="auto"), mlstm(*args, form="chunkwise"))
    with pytest.raises(ConfigError, match="power of two"):
        mlstm(*args, form="pallas", chunk_size=12)
