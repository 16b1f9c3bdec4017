"""jaxlab's mLSTM cell forms and Pallas chunkwise kernel against the authors' own JAX kernels.

PyPI's ``mlstm-kernels`` (NX-AI) ships pure-JAX forms of the mLSTM beside its Triton kernels. It
declares torch as a dependency, so it is installed with ``--no-deps`` (beside ``einops``; see
``scripts/install_dev.sh``). Of the three modules the oracle needs, only
``mlstm_kernels.jax.parallel.native`` imports as a package: the ``chunkwise`` and ``recurrent``
packages' ``__init__`` also import their Triton kernels, which need ``jax_triton`` and ``triton``.
Their pure-JAX files (``chunkwise/native/fw.py``, ``fwbw.py``; ``recurrent/native_step.py``) import
only jax and einops, so :func:`_authors_forms` loads those files under a private package name whose
search path is the authors' directory, without running the Triton-importing ``__init__``. The tests
skip, with the reason, where the package is absent.

The authors' recurrent step and chunkwise form start from ``(C, n, m) = (0, 0, 0)`` as jaxlab's
forms do and agree with them for any eps; their parallel form has no initial state and leaves the
zero state's term out of the stabiliser, so it agrees with jaxlab's at ``eps = 0`` only (see
:mod:`jaxlab.methods.xlstm.cell`). Tolerances, relative to max|h|: 1e-10 in float64 (summation
order only), 2e-5 in float32 (as ``test_cell``: sums of up to S terms of size max|h| in another
order). The Pallas kernels compute in float32 only, so they are compared in float32.

Layouts: jaxlab's ``mlstm`` takes ``(B, T, H, D)`` sequences and ``(B, T, H)`` gates (the layout of
``jax.nn.dot_product_attention``); the authors' forms, like ``pallas_kernels.mlstm_chunkwise``,
take heads first, ``(B, NH, S, D)`` and ``(B, NH, S)``. :func:`inputs` draws the jaxlab layout and
:func:`heads_first` transposes it for the authors' side, so the tests also pin the transpose.
"""

import importlib
import pathlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_kernels
from jaxlab.methods.xlstm import mlstm

B, NH, S, DK, DV, CHUNK = 2, 2, 16, 8, 4, 4
TOL = {np.float64: 1e-10, np.float32: 2e-5}


def _package_over(directory: pathlib.Path, name: str) -> types.ModuleType:
    """An empty package ``name`` whose modules are the files of ``directory`` (its
    ``__init__.py`` is not run)."""
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(directory)]
        sys.modules[name] = package
    return sys.modules[name]


def _authors_forms():
    """The authors' parallel, chunkwise and recurrent-step functions, or a skip reason."""
    try:
        parallel = importlib.import_module("mlstm_kernels.jax.parallel.native")
    except ImportError as err:
        return f"mlstm-kernels is not installed ({err}); pip install --no-deps mlstm-kernels einops"
    root = pathlib.Path(parallel.__file__).parents[2]
    _package_over(root / "chunkwise" / "native", "_authors_mlstm_chunkwise")
    _package_over(root / "recurrent", "_authors_mlstm_recurrent")
    try:
        chunkwise = importlib.import_module("_authors_mlstm_chunkwise.fwbw")
        step = importlib.import_module("_authors_mlstm_recurrent.native_step")
    except ImportError as err:
        return f"the authors' pure-JAX mLSTM files did not import ({err})"
    return types.SimpleNamespace(
        parallel=parallel.mlstm_parallel__native_autograd,
        chunkwise=chunkwise.mlstm_chunkwise__native_autograd,
        step=step.mlstm_recurrent_step__native,
    )


AUTHORS = _authors_forms()
pytestmark = pytest.mark.skipif(isinstance(AUTHORS, str), reason=str(AUTHORS))
DTYPES = [pytest.param(np.float64, id="float64"), pytest.param(np.float32, id="float32")]


@pytest.fixture
def dtype(request):
    """Runs the test in 64-bit mode for float64 (the x64 fixture, inline)."""
    with jax.enable_x64(request.param == np.float64):
        yield request.param


def inputs(dtype, seed=0):
    """q, k, v ``(B, S, NH, D)``, gates ``(B, S, NH)`` (jaxlab's layout) and a state."""
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(B, S, NH, DK)) for _ in range(2))
    v = rng.normal(size=(B, S, NH, DV))
    i, f = rng.normal(size=(B, S, NH)) * 3, rng.normal(size=(B, S, NH)) + 2
    C0, n0 = rng.normal(size=(B, NH, DK, DV)) * 0.3, rng.normal(size=(B, NH, DK)) * 0.3
    m0 = rng.normal(size=(B, NH))
    cast = lambda xs: tuple(jnp.asarray(x, dtype) for x in xs)  # noqa: E731
    return cast((q, k, v, i, f)), cast((C0, n0, m0))


def heads_first(*xs):
    """``(B, S, NH, ...)`` -> ``(B, NH, S, ...)``: the authors' (and the kernel's) layout."""
    return tuple(jnp.swapaxes(x, 1, 2) for x in xs)


def authors_recurrent(q, k, v, i, f, state, eps):
    """The authors' step, token by token (their ``native_sequence`` loop; m is ``(B, NH, 1)``),
    on heads-first inputs."""
    C, n, m = state[0], state[1], state[2][..., None]
    hs = []
    for t in range(q.shape[2]):
        h, (C, n, m) = AUTHORS.step(
            q[:, :, t], k[:, :, t], v[:, :, t], i[:, :, t, None], f[:, :, t, None], C, n, m, eps=eps
        )
        hs.append(h)
    return jnp.stack(hs, axis=2), (C, n, m[..., 0])


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("dtype", DTYPES, indirect=True)
@pytest.mark.parametrize("eps", [1e-6, 0.0])
@pytest.mark.parametrize("form", ["recurrent", "chunkwise", "parallel"])
def test_forms_match_the_authors_recurrent_step(dtype, eps, form):
    """From a random initial state, outputs and final state."""
    (q, k, v, i, f), state = inputs(dtype)
    h_ref, state_ref = authors_recurrent(*heads_first(q, k, v, i, f), state, eps)
    h_ref = jnp.swapaxes(h_ref, 1, 2)
    h, final = mlstm(
        q, k, v, i, f, form=form, chunk_size=CHUNK, initial_state=state, eps=eps,
        return_state=True,
    )  # fmt: skip
    assert h.dtype == dtype
    assert rel(h, h_ref) < TOL[dtype]
    for got, want in zip(final, state_ref, strict=True):
        assert rel(got, want) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, indirect=True)
def test_chunkwise_matches_the_authors_chunkwise(dtype):
    (q, k, v, i, f), state = inputs(dtype, seed=1)
    h_ref, state_ref = AUTHORS.chunkwise(
        *heads_first(q, k, v, i, f), *state, return_last_states=True, eps=1e-6, chunk_size=CHUNK
    )
    h_ref = jnp.swapaxes(h_ref, 1, 2)
    h, final = mlstm(
        q, k, v, i, f, form="chunkwise", chunk_size=CHUNK, initial_state=state, return_state=True
    )
    assert rel(h, h_ref) < TOL[dtype]
    for got, want in zip(final, state_ref, strict=True):
        assert rel(got, want) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, indirect=True)
def test_parallel_matches_the_authors_parallel_at_eps_0(dtype):
    """The authors' parallel form has no initial state: from zeros, at eps = 0 (docstring)."""
    (q, k, v, i, f), _ = inputs(dtype, seed=2)
    h_ref = jnp.swapaxes(AUTHORS.parallel(*heads_first(q, k, v, i, f), eps=0.0), 1, 2)
    assert rel(mlstm(q, k, v, i, f, form="parallel", eps=0.0), h_ref) < TOL[dtype]


@pytest.mark.parametrize("style", ["gpu", pytest.param("tpu", marks=pytest.mark.slow)])
def test_pallas_kernel_matches_the_authors_chunkwise(style):
    """jaxlab's Pallas kernels (interpret mode, float32; heads first, as the authors') against
    the authors' chunkwise form."""
    (q, k, v, i, f), state = inputs(np.float32, seed=3)
    q, k, v, i, f = heads_first(q, k, v, i, f)
    h_ref, state_ref = AUTHORS.chunkwise(
        q, k, v, i, f, *state, return_last_states=True, eps=1e-6, chunk_size=8
    )
    h, final = pallas_kernels.mlstm_chunkwise(
        q, k, v, i, f, initial_state=state, return_state=True, eps=1e-6,
        block_sizes=pallas_kernels.MLSTMBlockSizes(chunk=8), backend=style, interpret=True,
    )  # fmt: skip
    assert rel(h, h_ref) < TOL[np.float32]
    for got, want in zip(final, state_ref, strict=True):
        assert rel(got, want) < TOL[np.float32]
