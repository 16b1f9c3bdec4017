"""The mLSTM cell (matrix memory, exponential gating) in three forms: recurrent, parallel, chunked.

Beck et al., "xLSTM: Extended Long Short-Term Memory" (NeurIPS 2024), Sec. 2.3 / App. A.3, and
"xLSTM 7B" (ICML 2025), Sec. 2 and App. A. Per head, with ``q~ = q / sqrt(Dqk)``, input-gate
pre-activation ``i_t``, log forget gate ``lf_t = log sigmoid(f_t)`` and state ``(C, n, m)``
(``C``: Dqk x Dv, ``n``: Dqk, ``m`` the max stabiliser, a scalar)::

    m_t = max(lf_t + m_{t-1}, i_t)                                   (7B paper, Sec. 2)
    C_t = exp(lf_t + m_{t-1} - m_t) C_{t-1} + exp(i_t - m_t) k_t v_tᵀ
    n_t = exp(lf_t + m_{t-1} - m_t) n_{t-1} + exp(i_t - m_t) k_t
    h_t = C_tᵀ q~_t / (max(|n_tᵀ q~_t|, exp(-m_t)) + eps)

so the forget gate of token t decays the state carried from t - 1 and the input gate is
exponential. Unrolled, token s reaches token t with the log weight
``D_ts = lf_{s+1} + ... + lf_t + i_s`` and the initial state with ``L_t + m_0`` where
``L_t = lf_1 + ... + lf_t``; ``m_t`` is the largest of these, exactly.

Initial stabiliser. The authors' recurrent and chunkwise kernels (NX-AI/mlstm_kernels) start the
state at ``(C, n, m) = (0, 0, 0)``; their parallel form has no initial state and takes ``m_t`` as
the largest ``D_ts`` only. Because ``exp(-m)`` and ``eps`` enter the normaliser in stabilised
units, the two choices give the same ``h`` only when ``eps = 0``. Here every form takes an initial
state (default ``(0, 0, 0)``, the recurrent kernels' choice) and includes its term ``L_t + m_0`` in
the maximum, so all three forms compute the same ``m_t`` and agree for any ``eps``.

Forms. ``recurrent`` is a ``lax.scan`` of :func:`mlstm_step` (the decode step). ``parallel`` builds
the S x S decay matrix ``D`` from a masked cumulative sum down each column (``D_ts = sum_{j in
(s, t]} lf_j``), never as the difference ``L_t - L_s`` of two long cumulative sums, which cancels
catastrophically once ``|L|`` is large. ``chunkwise`` (the 7B paper's training form, App. A;
Yang et al. 2024's chunked linear attention) splits S into chunks of ``chunk_size`` and loops over
them carrying ``(C, n, m)`` from chunk boundary to chunk boundary; each step computes its chunk's
outputs (the parallel form inside the chunk plus the carried state's term, App. A's second kernel)
and then the state after the chunk (the first kernel), so no step touches more than one chunk and
one state. Evaluated, the loop reads each chunk in place and writes its outputs in place (one pass
over the inputs and one over the outputs, linear in S also once they leave the CPU's caches);
differentiated, the same steps run as a ``lax.scan`` over chunk-major copies, whose reverse pass
is linear too (``_chunks``). Sequences that are not chunk multiples are padded with tokens that
leave the state unchanged (``i = -1e30``, ``lf = 0``).
``pallas`` runs the chunkwise form through :func:`pallas_kernels.mlstm_chunkwise` (two kernels,
``custom_vjp``), asked for ``h`` only: the kernel's own final state has no differentiation rule,
so the final state, when asked for, comes from the one-step state formula of :func:`_final_state`
in jnp (differentiable, as in the other forms); ``auto`` picks ``pallas`` on GPU/TPU under the
repo-wide switch of the other kernels (:func:`jaxlab.nn.pallas_switch.pallas_ready`) and
``chunkwise`` elsewhere.

Layout. The public functions take sequences as ``(B, T, H, D)`` and gates as ``(B, T, H)``, as
:func:`jax.nn.dot_product_attention` and :func:`jaxlab.nn.attention.dot_product_attention` do;
the forms run on a heads-first ``(B, H, T, D)`` copy (one transpose in, one out), the layout of the
authors' kernels and of :func:`pallas_kernels.mlstm_chunkwise`. The state has no time axis:
``C`` ``(B, H, Dk, Dv)``, ``n`` ``(B, H, Dk)``, ``m`` ``(B, H)``.
"""

from __future__ import annotations

import functools
from typing import Literal, NamedTuple, get_args

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import pallas_kernels
from jaxlab.core.errors import ConfigError
from jaxlab.nn.pallas_switch import pallas_ready

__all__ = ["CellForm", "MLSTMState", "mlstm", "mlstm_parallel", "mlstm_step", "zero_state"]

# The forms of the cell (module docstring): :func:`mlstm`'s ``form`` and the config's ``cell_form``.
CellForm = Literal["auto", "chunkwise", "parallel", "recurrent", "pallas"]
# Log-weight of a token that must not enter the state (padding); finite so no inf - inf arises.
NEG = -1e30


class MLSTMState(NamedTuple):
    """Recurrent state of one mLSTM layer: ``C`` (B, H, Dk, Dv), ``n`` (B, H, Dk), ``m`` (B, H),
    all in the cell's accumulation dtype (float32 at least)."""

    C: Float[Array, "B H M E"]
    n: Float[Array, "B H M"]
    m: Float[Array, "B H"]


def _acc_dtype(*xs) -> jnp.dtype:
    """float32 unless some input is float64 (x64 tests): the state never drops below float32."""
    return jnp.promote_types(jnp.result_type(*xs), jnp.float32)


def zero_state(B: int, H: int, Dk: int, Dv: int, dtype=jnp.float32) -> MLSTMState:
    """The state before the first token, ``(0, 0, 0)`` (the reference kernels' choice)."""
    return MLSTMState(
        jnp.zeros((B, H, Dk, Dv), dtype),
        jnp.zeros((B, H, Dk), dtype),
        jnp.zeros((B, H), dtype),
    )


def _check_state(owner: str, state, B: int, H: int, Dk: int, Dv: int) -> None:
    want = ((B, H, Dk, Dv), (B, H, Dk), (B, H))
    got = tuple(tuple(jnp.shape(x)) for x in state)
    if len(got) != 3 or got != want:
        raise ConfigError(
            f"{owner}: the state (C, n, m) must have shapes (B, H, Dk, Dv), (B, H, Dk), (B, H) = "
            f"{want}; got {got}"
        )


def _stabiliser(log_w: Array, floor: Array) -> Array:
    """``max(max(log_w, axis=-1), floor)``, the stabiliser ``m`` of the parallel and state
    forms, with a gradient that goes to one maximal entry, as ``torch.max``'s does in the authors'
    parallel form. ``jnp.max``'s gradient instead goes to every entry equal to the maximum and
    divides by their count, and XLA may recompute ``log_w`` for the backward pass with other
    rounding than the forward's maximum had: no entry then equals it, and the gate gradients are
    0 / 0 (NaN; seen with XLA CPU's loop emitters). Here the maximum is the entry at its
    ``argmax`` and the larger of it and ``floor`` is a select, so whatever rounding the backward
    sees, the gradient has one place to go."""
    top = jnp.take_along_axis(log_w, jnp.argmax(log_w, axis=-1, keepdims=True), axis=-1)[..., 0]
    return jnp.where(top >= floor, top, floor)


def _normalise(num, den, m, eps):
    """``num / (max(|den|, exp(-m)) + eps)``; ``den`` and ``m`` broadcast over num's last axis."""
    return num / (jnp.maximum(jnp.abs(den), jnp.exp(-m)) + eps)[..., None]


def mlstm_step(
    state: MLSTMState,
    q: Float[Array, "B H M"],
    k: Float[Array, "B H M"],
    v: Float[Array, "B H E"],
    i: Float[Array, "B H"],
    f: Float[Array, "B H"],
    *,
    eps: float = 1e-6,
) -> tuple[Float[Array, "B H E"], MLSTMState]:
    """One token of the recurrence (module docstring; 7B paper Sec. 2): ``(h_t, state_t)``.

    The inputs are one time step of :func:`mlstm`'s ``(B, T, H, D)`` sequences (``x[:, t]``). This
    is the decode step of generation; ``mlstm(form="recurrent")`` scans it.

    Raises:
      ConfigError: shapes that do not fit together or the state.
    """
    if q.ndim != 3 or k.shape != q.shape or v.ndim != 3 or v.shape[:2] != q.shape[:2]:
        raise ConfigError(
            f"mlstm_step: q, k must be (B, H, Dk) and v (B, H, Dv) (one step of (B, T, H, D)); "
            f"got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if i.shape != q.shape[:2] or f.shape != q.shape[:2]:
        raise ConfigError(f"mlstm_step: gates i, f must be (B, H) = {q.shape[:2]}; got "
                          f"{i.shape}, {f.shape}")  # fmt: skip
    _check_state("mlstm_step", state, *q.shape, v.shape[-1])
    return _step(state, q, k, v, i, f, eps)


def _step(state, q, k, v, i, f, eps):
    dt = state.C.dtype
    q, k, v = (x.astype(dt) for x in (q, k, v))
    lf = jax.nn.log_sigmoid(f.astype(dt))
    i = i.astype(dt)
    m = jnp.maximum(lf + state.m, i)
    decay, inp = jnp.exp(lf + state.m - m), jnp.exp(i - m)
    C = decay[..., None, None] * state.C + inp[..., None, None] * (
        k[..., :, None] * v[..., None, :]
    )
    n = decay[..., None] * state.n + inp[..., None] * k
    q = q * q.shape[-1] ** -0.5
    h = _normalise(jnp.einsum("bhme,bhm->bhe", C, q), jnp.einsum("bhm,bhm->bh", n, q), m, eps)
    return h, MLSTMState(C, n, m)


def _recurrent(q, k, v, i, f, state, eps):
    def body(state, xs):
        h, state = _step(state, *xs, eps)
        return state, h

    xs = tuple(jnp.moveaxis(x, 2, 0) for x in (q, k, v, i, f))
    state, h_TBHE = jax.lax.scan(body, state, xs)
    return jnp.moveaxis(h_TBHE, 0, 2), state


def _decay_matrix(lf_BHT: Array) -> Array:
    """``out[..., t, s] = sum_{j in (s, t]} lf_j`` for ``s <= t`` (0 on the diagonal), ``NEG``
    above it: a cumulative sum down each column of the strictly-lower-masked ``lf``, so each entry
    sums only its own terms (no cancellation between two long prefix sums)."""
    T = lf_BHT.shape[-1]
    t, s = jnp.arange(T)[:, None], jnp.arange(T)[None, :]
    masked_BHTS = jnp.where(t > s, lf_BHT[..., :, None], 0.0)
    return jnp.where(t >= s, jnp.cumsum(masked_BHTS, axis=-2), NEG)


def _parallel_with_state(q, k, v, i, lf, state, eps):
    """Outputs of one (sub)sequence given the state before it: the parallel form plus the initial
    state's term, with log weight ``L_t + m_0`` (module docstring). Returns ``h`` and ``m_t``."""
    dt = state.C.dtype
    q = q * q.shape[-1] ** -0.5
    D_BHTS = _decay_matrix(lf) + i[..., None, :]
    L_BHT = jnp.cumsum(lf, axis=-1)  # within a chunk or a test sequence: short sums
    init_BHT = L_BHT + state.m[..., None]
    m_BHT = _stabiliser(D_BHTS, init_BHT)
    W_BHTS = jnp.exp(D_BHTS - m_BHT[..., None]) * jnp.einsum("bhtm,bhsm->bhts", q, k)
    w0_BHT = jnp.exp(init_BHT - m_BHT)
    num = jnp.einsum("bhts,bhse->bhte", W_BHTS, v) + w0_BHT[..., None] * jnp.einsum(
        "bhtm,bhme->bhte", q, state.C
    )
    den = jnp.sum(W_BHTS, axis=-1) + w0_BHT * jnp.einsum("bhtm,bhm->bht", q, state.n)
    return _normalise(num, den, m_BHT, eps).astype(dt), m_BHT


def _final_state(k, v, i, lf, state):
    """The state after a (sub)sequence from the state before it, in one step per (sub)sequence:
    token s enters with log weight ``lf_{s+1} + ... + lf_S + i_s`` (a reverse exclusive cumsum)."""
    rev_BHS = jnp.flip(jnp.cumsum(jnp.flip(lf, -1), axis=-1), -1)
    after_BHS = jnp.concatenate([rev_BHS[..., 1:], jnp.zeros_like(rev_BHS[..., :1])], axis=-1)
    logw_BHS = after_BHS + i
    g_BH = rev_BHS[..., 0]  # the whole (sub)sequence's log decay
    m = _stabiliser(logw_BHS, g_BH + state.m)
    w_BHS = jnp.exp(logw_BHS - m[..., None])
    decay = jnp.exp(g_BH + state.m - m)
    C = decay[..., None, None] * state.C + jnp.einsum("bhs,bhsm,bhse->bhme", w_BHS, k, v)
    n = decay[..., None] * state.n + jnp.einsum("bhs,bhsm->bhm", w_BHS, k)
    return MLSTMState(C, n, m)


def _parallel(q, k, v, i, f, state, eps):
    """The quadratic (parallel) form over the whole (heads-first) sequence: ``(h, final state)``."""
    dt = state.C.dtype
    q, k, v, i = (x.astype(dt) for x in (q, k, v, i))
    lf = jax.nn.log_sigmoid(f.astype(dt))
    h, _ = _parallel_with_state(q, k, v, i, lf, state, eps)
    return h, _final_state(k, v, i, lf, state)


def mlstm_parallel(
    q: Float[Array, "B T H M"],
    k: Float[Array, "B T H M"],
    v: Float[Array, "B T H E"],
    i: Float[Array, "B T H"],
    f: Float[Array, "B T H"],
    state: MLSTMState | tuple | None = None,
    eps: float = 1e-6,
) -> tuple[Float[Array, "B T H E"], MLSTMState]:
    """The quadratic (parallel) form: ``mlstm(..., form="parallel", return_state=True)``."""
    return mlstm(q, k, v, i, f, form="parallel", initial_state=state, return_state=True, eps=eps)


def _chunk(state, q, k, v, i, lf, eps):
    """One chunk of the chunkwise form from the state before it: its outputs (the intra-chunk
    parallel form plus the carried state's term, App. A's second kernel) and the state after it
    (the inter-chunk recurrence, the first kernel)."""
    h, _ = _parallel_with_state(q, k, v, i, lf, state, eps)
    return h, _final_state(k, v, i, lf, state)


def _chunks_scanned(xs, state, eps):
    """The chunk loop as a ``lax.scan`` over chunk-major copies of the inputs: the form that is
    differentiated (its reverse pass returns the inputs' cotangents as the scan's stacked outputs,
    linear in S). ``xs``: q, k, v, i, lf as ``(B, NH, Nc, L, ...)``; returns h ``(B, NH, Nc, L,
    Dv)`` and the final state."""

    def body(state, chunk):
        h, state = _chunk(state, *chunk, eps)
        return state, h

    final, h_c = jax.lax.scan(body, state, tuple(jnp.moveaxis(x, 2, 0) for x in xs))
    return jnp.moveaxis(h_c, 0, 2), final


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _chunks(xs, state, eps):
    """The chunk loop (same arguments and result as :func:`_chunks_scanned`). Evaluated (prefill,
    evaluation), it is a ``fori_loop`` that slices chunk ``c`` out of the inputs in place and
    writes its outputs into the result in place: one pass over the inputs and one over the outputs,
    a working set of one chunk and one state. Emitting every chunk-start state and then processing
    all chunks at once (Nc x Dqk x Dv floats and several Nc x L x L arrays), or scanning over
    chunk-major copies, adds passes over S-sized arrays, which cost more per byte once they no
    longer fit in the cache, so prefill time grows faster than S. Derivatives of any order come
    from the scanned form (the jvp rule below), which runs the same :func:`_chunk` in the same
    order."""
    B, NH, Nc, L = xs[0].shape[:4]

    def body(c, carry):
        state, h_buf = carry
        chunk = (jax.lax.dynamic_index_in_dim(x, c, axis=2, keepdims=False) for x in xs)
        h, state = _chunk(state, *chunk, eps)
        return state, jax.lax.dynamic_update_index_in_dim(h_buf, h, c, axis=2)

    h_buf = jnp.zeros((B, NH, Nc, L, xs[2].shape[-1]), state.C.dtype)
    final, h = jax.lax.fori_loop(0, Nc, body, (state, h_buf))
    return h, final


@_chunks.defjvp
def _chunks_jvp(eps, primals, tangents):
    # A dynamic slice of a closed-over input in a loop transposes to a full-size accumulation per
    # chunk (quadratic in S); the scanned form's reverse pass is linear.
    return jax.jvp(lambda xs, state: _chunks_scanned(xs, state, eps), primals, tangents)


def _chunkwise(q, k, v, i, f, state, chunk_size, eps):
    dt = state.C.dtype
    B, NH, S, Dk = q.shape
    Dv = v.shape[-1]
    L = min(chunk_size, S)
    pad = -S % L
    q, k, v, i = (x.astype(dt) for x in (q, k, v, i))
    lf = jax.nn.log_sigmoid(f.astype(dt))
    if pad:  # padded tokens neither enter the state (i = NEG) nor decay it (lf = 0)
        widths = ((0, 0), (0, 0), (0, pad))
        q, k, v = (jnp.pad(x, (*widths, (0, 0))) for x in (q, k, v))
        i = jnp.pad(i, widths, constant_values=NEG)
        lf = jnp.pad(lf, widths)
    Nc = (S + pad) // L
    # (B, NH, Nc*L, ...) -> (B, NH, Nc, L, ...): a reshape, no copy.
    xs = tuple(x.reshape(B, NH, Nc, L, *x.shape[3:]) for x in (q, k, v, i, lf))
    h, final = _chunks(xs, state, eps)
    return h.reshape(B, NH, Nc * L, Dv)[:, :, :S], final


def _check_inputs(q, k, v, i, f) -> None:
    if q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ConfigError(
            f"mlstm: q, k must be (B, T, H, Dk) and v (B, T, H, Dv), as in "
            f"jax.nn.dot_product_attention; got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if i.shape != q.shape[:3] or f.shape != q.shape[:3]:
        raise ConfigError(
            f"mlstm: gates i, f must be (B, T, H) = {q.shape[:3]}; got {i.shape}, {f.shape}"
        )


def mlstm(
    q: Float[Array, "B T H M"],
    k: Float[Array, "B T H M"],
    v: Float[Array, "B T H E"],
    i: Float[Array, "B T H"],
    f: Float[Array, "B T H"],
    *,
    form: CellForm = "chunkwise",
    chunk_size: int = 64,
    initial_state: MLSTMState | tuple | None = None,
    return_state: bool = False,
    eps: float = 1e-6,
) -> Float[Array, "B T H E"] | tuple[Float[Array, "B T H E"], MLSTMState]:
    """The mLSTM cell over a sequence (module docstring for the equations and forms).

    Sequences are ``(B, T, H, D)`` (batch, time, heads, features), as in
    :func:`jax.nn.dot_product_attention`; every form is differentiable in every input, the initial
    state included, and (with ``return_state``) through the final state.

    Args:
      q, k: queries and keys ``(B, T, H, Dk)``; q is scaled by ``1/sqrt(Dk)`` here.
      v: values ``(B, T, H, Dv)``.
      i, f: input- and forget-gate pre-activations ``(B, T, H)``.
      form: ``"chunkwise"`` (default), ``"parallel"`` (quadratic in T), ``"recurrent"``,
        ``"pallas"`` (the kernels) or ``"auto"`` (``pallas`` where :func:`pallas_ready`, else
        ``chunkwise``).
      chunk_size: chunk length of the chunkwise form (any T works; the last chunk is padded); for
        ``pallas`` a power of two >= 8.
      initial_state: ``(C, n, m)`` before the first token, shapes ``(B, H, Dk, Dv)``,
        ``(B, H, Dk)``, ``(B, H)``; default ``(0, 0, 0)``.
      return_state: also return the state after the last token.
      eps: added to the normaliser ``max(|nᵀq|, exp(-m))``.

    Returns:
      ``h`` ``(B, T, H, Dv)`` in the accumulation dtype (float32, or float64 for float64 inputs;
      ``pallas`` computes in float32 only), and with ``return_state`` the final
      :class:`MLSTMState`.

    Raises:
      ConfigError: shapes that do not fit together (one line, naming the expected ones), a
        non-positive ``chunk_size``, an unknown ``form``, or a ``pallas`` chunk the kernel refuses.
    """
    _check_inputs(q, k, v, i, f)
    if chunk_size <= 0:
        raise ConfigError(f"mlstm: chunk_size must be positive, got {chunk_size}")
    if form not in get_args(CellForm):
        raise ConfigError(f"mlstm: unknown form {form!r}; choose {', '.join(get_args(CellForm))}")
    dt = _acc_dtype(q, k, v, i, f)
    B, _, H, Dk = q.shape
    if initial_state is None:
        state = zero_state(B, H, Dk, v.shape[-1], dt)
    else:
        _check_state("mlstm", initial_state, B, H, Dk, v.shape[-1])
        state = MLSTMState(*(jnp.asarray(x, dt) for x in initial_state))
    if form == "auto":
        form = "pallas" if pallas_ready(kernel="mlstm") else "chunkwise"
    if form == "pallas":
        # The forms run heads-first, (B, H, T, D) and (B, H, T) (module docstring, Layout).
        q, k, v, i, f = (jnp.swapaxes(x, 1, 2) for x in (q, k, v, i, f))
        h, final = _pallas(q, k, v, i, f, state, chunk_size, eps, return_state)
        h = jnp.swapaxes(h, 1, 2)
    else:
        # A Python eps (the usual case) is a static argument of one jitted program; a traced one
        # (the parallel and recurrent forms take it) runs the forms as they are.
        run = _xla_form if isinstance(eps, int | float) else _xla_form_unjitted
        h, final = run(q, k, v, i, f, state, eps, form, chunk_size, return_state)
    return (h, final) if return_state else h


def _xla_form_unjitted(q, k, v, i, f, state, eps, form, chunk_size, return_state):
    """An XLA form on ``(B, T, H, .)`` inputs; :data:`_xla_form` is this as one program."""
    # The forms run heads-first, (B, H, T, D) and (B, H, T) (module docstring, Layout).
    q, k, v, i, f = (jnp.swapaxes(x, 1, 2) for x in (q, k, v, i, f))
    if form == "recurrent":
        h, final = _recurrent(q, k, v, i, f, state, eps)
    elif form == "parallel":
        h, final = _parallel(q, k, v, i, f, state, eps)
    else:
        h, final = _chunkwise(q, k, v, i, f, state, chunk_size, eps)
    return jnp.swapaxes(h, 1, 2), (final if return_state else None)


# Called outside jit, a scanned form would otherwise trace and compile its scan again on every call;
# inside a caller's jit this is an inner call that XLA inlines.
_xla_form = jax.jit(_xla_form_unjitted, static_argnums=(6, 7, 8, 9))


def _pallas(q, k, v, i, f, state, chunk_size, eps, return_state):
    """The kernels for ``h`` (their ``custom_vjp``), asked for no state: the kernel's final state
    has no differentiation rule, so ``jax.grad`` through it fails ("Linearization failed"). The
    final state, when asked for, is :func:`_final_state` in jnp (differentiable)."""
    try:
        blocks = pallas_kernels.MLSTMBlockSizes(chunk=chunk_size)
        h = pallas_kernels.mlstm_chunkwise(
            q, k, v, i, f, initial_state=tuple(state), eps=eps, block_sizes=blocks
        )
    except pallas_kernels.KernelConfigError as err:
        raise ConfigError(f"mlstm(form='pallas'): {err}") from None
    if not return_state:
        return h, None
    dt = state.C.dtype
    k, v, i = (x.astype(dt) for x in (k, v, i))
    return h, _final_state(k, v, i, jax.nn.log_sigmoid(f.astype(dt)), state)
