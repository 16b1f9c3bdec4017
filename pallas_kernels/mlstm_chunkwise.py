"""Chunkwise mLSTM in Pallas: an inter-chunk state kernel and an intra-chunk output kernel.

The mLSTM of xLSTM 7B (Beck et al., ICML 2025, Sec. 2 and App. A; the recurrence is written out in
``jaxlab.methods.xlstm.cell``), per head with ``q~ = q / sqrt(Dqk)``, ``lf = log sigmoid(f)`` and
the state ``(C, n, m)``. The sequence is cut into chunks of ``L`` tokens; ``b_t`` is the inclusive
cumulative sum of ``lf`` inside t's chunk, ``g`` the chunk's total and ``a_t = g - b_t`` (as a
reverse cumulative sum) the log decay from t to the chunk's end.

1. State kernel (one program per batch x head, chunks in sequence; float32 accumulation): from the
   state before chunk c, ``m' = max(g + m, max_t (a_t + i_t))``,
   ``C' = exp(g + m - m') C + sum_t exp(a_t + i_t - m') k_t v_tᵀ`` and ``n'`` alike. It writes the
   state at the start of every chunk and the final state.
2. Output kernel (one program per batch x head x chunk, all parallel): with the chunk's start state,
   ``D_ts = b_t - b_s + i_s`` (s <= t; a difference of sums over at most L terms),
   ``m_t = max(b_t + m, max_s D_ts)`` and
   ``h_t = [exp(b_t + m - m_t) q~_tᵀ C + sum_s exp(D_ts - m_t) (q~_t·k_s) v_s] /
   (max(|exp(b_t + m - m_t) q~_t·n + sum_s exp(D_ts - m_t) q~_t·k_s|, exp(-m_t)) + eps)``.

Lengths that are not chunk multiples are padded with tokens that leave the state unchanged
(``i = -1e30``, ``lf = 0``). The gate cumulative sums (O(S) work) are computed in jnp before the
kernels.

Backward (``custom_vjp``; differentiable output ``h``, the returned final state carries no
gradient). ``dq, dk, dv`` and the initial state's ``dC0, dn0`` come from the vjp of the jnp
chunkwise mirror of the two kernels (:func:`_chunkwise_jnp`) with the gates held fixed. The gate
gradients then follow without differentiating through the stabiliser: ``k_s`` only ever appears as
``exp(i_s - F_s) k_s`` and ``q_t`` as ``exp(F_t) q_t`` (``F`` the cumulative log forget gate from
the start, the initial state as ``exp(m_0) (C_0, n_0)``), so
``di_t = k_t·dk_t``, ``dF_t = q_t·dq_t - k_t·dk_t``, ``dlf_t = sum_{u >= t} dF_u``,
``df_t = dlf_t sigmoid(-f_t)`` and ``dm_0 = C_0·dC_0 + n_0·dn_0``. These are exact for ``eps = 0``;
with ``eps > 0`` they drop the eps-sized dependence on the stabiliser (as the authors' kernels do).

:func:`mlstm_chunkwise_reference` is the quadratic parallel form in jnp (the oracle of the tests).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu
from jaxtyping import Array, Float

from pallas_kernels._common import (
    KernelConfigError,
    Style,
    check_power_of_two,
    native_call,
    resolve_backend,
)

__all__ = ["BlockSizes", "mlstm_chunkwise", "mlstm_chunkwise_reference"]

F32 = jnp.float32
NEG = -1e30  # log weight of padding: finite, so no inf - inf


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """The chunk length ``L`` (a power of two >= 8): both kernels tile the sequence by it.

    TPU tiles want the chunk to fill the 128 vector lanes (:meth:`for_backend`).
    """

    chunk: int = 64

    def __post_init__(self) -> None:
        check_power_of_two("BlockSizes", "chunk", self.chunk)

    @classmethod
    def for_backend(cls, backend: Style) -> BlockSizes:
        return cls(64) if backend == "gpu" else cls(128)


@dataclasses.dataclass(frozen=True)
class _Static:
    chunk: int
    eps: float
    style: Style
    interpret: bool


def _dot(a, b, contract):
    """float32-accumulated product contracting ``a``'s axis ``contract[0]`` with ``b``'s."""
    full = lax.Precision.HIGHEST if a.dtype == F32 else None
    dims = ((contract[:1], contract[1:]), ((), ()))
    return lax.dot_general(a, b, dims, precision=full, preferred_element_type=F32)


# ------------------------------------------------------------------------------------ kernels


def _state_update(k_LK, v_LV, w_L1, g_11, C_KV, n_1K, m_11):
    """The state after one chunk (module docstring, kernel 1); ``w`` = a + i, ``g`` the decay."""
    m_new = jnp.maximum(g_11 + m_11, jnp.max(w_L1, axis=0, keepdims=True))
    decay = jnp.exp(g_11 + m_11 - m_new)
    kw_LK = (jnp.exp(w_L1 - m_new) * k_LK.astype(F32)).astype(k_LK.dtype)
    C_KV = decay * C_KV + _dot(kw_LK, v_LV, (0, 0))
    n_1K = decay * n_1K + jnp.sum(kw_LK.astype(F32), axis=0, keepdims=True)
    return C_KV, n_1K, m_new


def _state_kernel(k_ref, v_ref, w_ref, b_ref, C0_ref, n0_ref, m0_ref, *refs, cfg: _Static):
    Cs_ref, ns_ref, ms_ref, Cf_ref, nf_ref, mf_ref, *scratch = refs
    L = cfg.chunk

    def step(c, carry, k_LK, v_LV, w_L1, b_L1):
        # The chunk's total log decay is b at its last token, which is also b's minimum (lf <= 0,
        # so b never increases): a reduction instead of a slice, which Triton cannot lower.
        return _state_update(k_LK, v_LV, w_L1, jnp.min(b_L1, axis=0, keepdims=True), *carry)

    if cfg.style == "gpu":  # one program walks its chunks
        nc = k_ref.shape[0] // L

        def body(c, carry):
            Cs_ref[c] = carry[0]
            ns_ref[c] = carry[1]
            ms_ref[c] = carry[2]
            rows = pl.ds(pl.multiple_of(c * L, L), L)
            tiles = (k_ref[rows, :], v_ref[rows, :], w_ref[rows, :], b_ref[rows, :])
            return step(c, carry, *tiles)

        init = (C0_ref[...].astype(F32), n0_ref[...].astype(F32), m0_ref[...].astype(F32))
        C, n, m = lax.fori_loop(0, nc, body, init)
        Cf_ref[...], nf_ref[...], mf_ref[...] = C, n, m
        return
    # TPU: the chunk grid axis is sequential; the carry lives in VMEM scratch.
    c = pl.program_id(1)

    @pl.when(c == 0)
    def _init():
        for ref, src in zip(scratch, (C0_ref, n0_ref, m0_ref), strict=True):
            ref[...] = src[...].astype(F32)

    carry = tuple(ref[...] for ref in scratch)
    Cs_ref[...], ns_ref[...], ms_ref[...] = carry
    new = step(c, carry, k_ref[...], v_ref[...], w_ref[...], b_ref[...])
    for ref, value in zip(scratch, new, strict=True):
        ref[...] = value

    @pl.when(c == pl.num_programs(1) - 1)
    def _final():
        Cf_ref[...], nf_ref[...], mf_ref[...] = new


def _output_kernel(q_ref, k_ref, v_ref, i_ref, bc_ref, br_ref, C_ref, n_ref, m_ref, h_ref, *,
                   cfg: _Static):  # fmt: skip
    L = cfg.chunk
    q_LK = q_ref[...]
    b_L1, b_1L, i_1L = bc_ref[...], br_ref[...], i_ref[...]
    C_KV, n_1K, m_11 = C_ref[...], n_ref[...], m_ref[...]
    t = lax.broadcasted_iota(jnp.int32, (L, L), 0)
    s = lax.broadcasted_iota(jnp.int32, (L, L), 1)
    D_LL = jnp.where(t >= s, b_L1 - b_1L + i_1L, NEG)
    init_L1 = b_L1 + m_11
    m_L1 = jnp.maximum(jnp.max(D_LL, axis=1, keepdims=True), init_L1)
    W_LL = jnp.exp(D_LL - m_L1) * _dot(q_LK, k_ref[...], (1, 1))
    w0_L1 = jnp.exp(init_L1 - m_L1)
    num_LV = _dot(W_LL.astype(v_ref.dtype), v_ref[...], (1, 0))
    num_LV += w0_L1 * _dot(q_LK.astype(F32), C_KV, (1, 0))
    den_L1 = jnp.sum(W_LL, axis=1, keepdims=True)
    den_L1 += w0_L1 * jnp.sum(q_LK.astype(F32) * n_1K, axis=1, keepdims=True)
    h_ref[...] = (num_LV / (jnp.maximum(jnp.abs(den_L1), jnp.exp(-m_L1)) + cfg.eps)).astype(
        h_ref.dtype
    )


# --------------------------------------------------------------------------------- plumbing


def _gates(i_GS, f_GS, L):
    """Padded gates and their within-chunk sums: ``i``, ``b`` (inclusive), ``w = a + i``."""
    G, S = i_GS.shape
    pad = -S % L
    lf = jax.nn.log_sigmoid(f_GS.astype(F32))
    i = jnp.pad(i_GS.astype(F32), ((0, 0), (0, pad)), constant_values=NEG)
    lf = jnp.pad(lf, ((0, 0), (0, pad)))
    lf_c = lf.reshape(G, -1, L)
    b = jnp.cumsum(lf_c, axis=-1)
    rev = jnp.flip(jnp.cumsum(jnp.flip(lf_c, -1), axis=-1), -1)
    a = jnp.concatenate([rev[..., 1:], jnp.zeros_like(rev[..., :1])], axis=-1)
    return i, b.reshape(G, -1), a.reshape(G, -1) + i


def _forward(q, k, v, i, f, C0, n0, m0, cfg: _Static):
    """Both kernels on ``(G, S, .)`` operands (G = batch x heads): ``h`` and the final state."""
    G, S, Dk = q.shape
    Dv = v.shape[-1]
    L = cfg.chunk
    Sp = -(-S // L) * L
    nc = Sp // L
    q = q * Dk**-0.5
    pad = ((0, 0), (0, Sp - S), (0, 0))
    q, k, v = (jnp.pad(x, pad) for x in (q, k, v))
    i_p, b, w = _gates(i, f, L)
    col = lambda x: x[..., None]  # noqa: E731  (G, Sp, 1): a column per chunk
    row = lambda x: x.reshape(G, nc, 1, L)  # noqa: E731  (G, nc, 1, L): a row per chunk
    C0, n0, m0 = C0.astype(F32), n0.astype(F32)[:, None], m0.astype(F32)[:, None, None]
    state_shapes = [
        jax.ShapeDtypeStruct((G, nc, Dk, Dv), F32),
        jax.ShapeDtypeStruct((G, nc, 1, Dk), F32),
        jax.ShapeDtypeStruct((G, nc, 1, 1), F32),
        jax.ShapeDtypeStruct((G, Dk, Dv), F32),
        jax.ShapeDtypeStruct((G, 1, Dk), F32),
        jax.ShapeDtypeStruct((G, 1, 1), F32),
    ]
    per_g = lambda *shape: pl.BlockSpec((None, *shape), lambda g, *c: (g,) + (0,) * len(shape))  # noqa: E731
    if cfg.style == "gpu":
        grid = (G,)
        seq = lambda d: pl.BlockSpec((None, Sp, d), lambda g: (g, 0, 0))  # noqa: E731
        starts = lambda *shape: pl.BlockSpec((None, nc, *shape), lambda g: (g, 0, 0, 0))  # noqa: E731
        scratch, params = [], plgpu.CompilerParams(num_warps=4, num_stages=1)
    else:
        grid = (G, nc)
        seq = lambda d: pl.BlockSpec((None, L, d), lambda g, c: (g, c, 0))  # noqa: E731
        starts = lambda *shape: pl.BlockSpec((None, None, *shape), lambda g, c: (g, c, 0, 0))  # noqa: E731
        scratch = [pltpu.VMEM((Dk, Dv), F32), pltpu.VMEM((1, Dk), F32), pltpu.VMEM((1, 1), F32)]
        params = pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"))
    state_call = pl.pallas_call(
        functools.partial(_state_kernel, cfg=cfg),
        grid=grid,
        in_specs=[seq(Dk), seq(Dv), seq(1), seq(1), per_g(Dk, Dv), per_g(1, Dk), per_g(1, 1)],
        out_specs=[
            starts(Dk, Dv),
            starts(1, Dk),
            starts(1, 1),
            per_g(Dk, Dv),
            per_g(1, Dk),
            per_g(1, 1),
        ],  # fmt: skip
        out_shape=state_shapes,
        scratch_shapes=scratch,
        compiler_params=params,
        interpret=cfg.interpret,
    )
    state_call = native_call(state_call, state_shapes, cfg.style, cfg.interpret)
    Cs, ns, ms, Cf, nf, mf = state_call(k, v, col(w), col(b), C0, n0, m0)

    chunk = lambda d: pl.BlockSpec((None, L, d), lambda g, c: (g, c, 0))  # noqa: E731
    one = lambda *shape: pl.BlockSpec((None, None, *shape), lambda g, c: (g, c, 0, 0))  # noqa: E731
    h_shape = [jax.ShapeDtypeStruct((G, Sp, Dv), F32)]
    out_params = (
        plgpu.CompilerParams(num_warps=4, num_stages=1)
        if cfg.style == "gpu"
        else pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"))
    )
    out_call = pl.pallas_call(
        functools.partial(_output_kernel, cfg=cfg),
        grid=(G, nc),
        in_specs=[
            chunk(Dk),
            chunk(Dk),
            chunk(Dv),
            one(1, L),
            chunk(1),
            one(1, L),
            one(Dk, Dv),
            one(1, Dk),
            one(1, 1),
        ],  # fmt: skip
        out_specs=[chunk(Dv)],
        out_shape=h_shape,
        compiler_params=out_params,
        interpret=cfg.interpret,
    )
    out_call = native_call(out_call, h_shape, cfg.style, cfg.interpret)
    (h,) = out_call(q, k, v, row(i_p), col(b), row(b), Cs, ns, ms)
    return h[:, :S], (Cf, nf[:, 0], mf[:, 0, 0])


def _chunkwise_jnp(q, k, v, i, f, C0, n0, m0, chunk, eps):
    """The two kernels' arithmetic in jnp on ``(G, S, .)`` operands (the backward's mirror)."""
    G, S, Dk = q.shape
    L = chunk
    Sp = -(-S // L) * L
    nc = Sp // L
    pad = ((0, 0), (0, Sp - S), (0, 0))
    q, k, v = (jnp.pad(x.astype(F32), pad) for x in (q * Dk**-0.5, k, v))
    i_p, b, w = _gates(i, f, L)
    split = lambda x: jnp.moveaxis(x.reshape(G, nc, L, *x.shape[2:]), 1, 0)  # noqa: E731
    qc, kc, vc, ic, bc, wc = (split(x) for x in (q, k, v, i_p, b, w))

    def body(state, xs):
        k_, v_, w_, b_ = xs
        up = jax.vmap(_state_update)(k_, v_, w_[..., None], b_[:, L - 1 :, None], *state)
        return up, state

    init = (C0.astype(F32), n0.astype(F32)[:, None], m0.astype(F32)[:, None, None])
    _, (Cs, ns, ms) = lax.scan(body, init, (kc, vc, wc, bc))

    def chunk_out(q_, k_, v_, i_, b_, C, n, m):  # one (G,) slice of one chunk
        D = jnp.where(jnp.tri(L, dtype=bool), b_[:, None] - b_[None, :] + i_[None, :], NEG)
        m_t = jnp.maximum(jnp.max(D, axis=1), b_ + m[0, 0])
        W = jnp.exp(D - m_t[:, None]) * (q_ @ k_.T)
        w0 = jnp.exp(b_ + m[0, 0] - m_t)
        num = W @ v_ + w0[:, None] * (q_ @ C)
        den = jnp.sum(W, axis=1) + w0 * (q_ @ n[0])
        return num / (jnp.maximum(jnp.abs(den), jnp.exp(-m_t)) + eps)[:, None]

    h = jax.vmap(jax.vmap(chunk_out))(qc, kc, vc, ic, bc, Cs, ns, ms)
    return jnp.moveaxis(h, 0, 1).reshape(G, Sp, -1)[:, :S]


@functools.partial(jax.custom_vjp, nondiff_argnums=(8,))
def _mlstm(q, k, v, i, f, C0, n0, m0, cfg: _Static):
    return _forward(q, k, v, i, f, C0, n0, m0, cfg)[0]


def _mlstm_fwd(q, k, v, i, f, C0, n0, m0, cfg):
    return _forward(q, k, v, i, f, C0, n0, m0, cfg)[0], (q, k, v, i, f, C0, n0, m0)


def _mlstm_bwd(cfg, res, dh):
    q, k, v, i, f, C0, n0, m0 = res
    fixed = lambda q, k, v, C0, n0: _chunkwise_jnp(q, k, v, i, f, C0, n0, m0, cfg.chunk, cfg.eps)  # noqa: E731
    _, vjp = jax.vjp(fixed, q, k, v, C0, n0)
    dq, dk, dv, dC0, dn0 = vjp(dh.astype(F32))
    qf, kf = q.astype(F32), k.astype(F32)
    di = jnp.sum(kf * dk, axis=-1)
    dF = jnp.sum(qf * dq, axis=-1) - di
    dlf = jnp.flip(jnp.cumsum(jnp.flip(dF, -1), axis=-1), -1)
    df = dlf * jax.nn.sigmoid(-f.astype(F32))
    dm0 = jnp.sum(C0 * dC0, axis=(1, 2)) + jnp.sum(n0 * dn0, axis=1)
    grads = (dq, dk, dv, di, df, dC0, dn0, dm0)
    return tuple(g.astype(x.dtype) for g, x in zip(grads, res, strict=True))


_mlstm.defvjp(_mlstm_fwd, _mlstm_bwd)


def mlstm_chunkwise(
    q: Float[Array, "B NH S Dk"],
    k: Float[Array, "B NH S Dk"],
    v: Float[Array, "B NH S Dv"],
    i: Float[Array, "B NH S"],
    f: Float[Array, "B NH S"],
    *,
    initial_state: tuple | None = None,
    return_state: bool = False,
    eps: float = 1e-6,
    block_sizes: BlockSizes | None = None,
    backend: str | None = None,
    interpret: bool | None = None,
):
    """The mLSTM cell (module docstring) through the two Pallas kernels.

    Args:
      q, k, v, i, f: as ``jaxlab.methods.xlstm.mlstm`` (q scaled by 1/sqrt(Dqk) here).
      initial_state: ``(C, n, m)`` of shapes (B, NH, Dk, Dv), (B, NH, Dk), (B, NH); default zeros.
      return_state: also return the final state (without gradient).
      eps: added to the normaliser.
      block_sizes: the chunk length; default :meth:`BlockSizes.for_backend`.
      backend, interpret: kernel style and interpretation (:func:`resolve_backend`).

    Returns:
      ``h`` (B, NH, S, Dv) in float32, and with ``return_state`` the final ``(C, n, m)``.
    """
    if q.ndim != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise KernelConfigError(
            f"mlstm_chunkwise: q, k (B, NH, S, Dk) and v (B, NH, S, Dv) expected; got {q.shape}, "
            f"{k.shape}, {v.shape}"
        )
    if i.shape != q.shape[:3] or f.shape != q.shape[:3]:
        raise KernelConfigError(f"mlstm_chunkwise: gates must be {q.shape[:3]}")
    style, interpret = resolve_backend(backend, interpret)
    blocks = block_sizes or BlockSizes.for_backend(style)
    cfg = _Static(blocks.chunk, float(eps), style, interpret)
    B, NH, S, Dk = q.shape
    Dv, G = v.shape[-1], B * NH
    if initial_state is None:
        initial_state = (jnp.zeros((B, NH, Dk, Dv), F32), jnp.zeros((B, NH, Dk), F32),
                         jnp.zeros((B, NH), F32))  # fmt: skip
    C0, n0, m0 = (jnp.asarray(x, F32).reshape(G, *x.shape[2:]) for x in initial_state)
    flat = [x.reshape(G, S, *x.shape[3:]) for x in (q, k, v, i, f)]
    h = _mlstm(*flat, C0, n0, m0, cfg).reshape(B, NH, S, Dv)
    if not return_state:
        return h
    _, (C, n, m) = _forward(*flat, C0, n0, m0, cfg)
    state = (C.reshape(B, NH, Dk, Dv), n.reshape(B, NH, Dk), m.reshape(B, NH))
    return h, tuple(lax.stop_gradient(x) for x in state)


def mlstm_chunkwise_reference(q, k, v, i, f, *, initial_state=None, eps: float = 1e-6):
    """The quadratic parallel form in jnp (float32 at least), with the initial state's term."""
    dt = jnp.promote_types(jnp.result_type(q, k, v, i, f), F32)
    q, k, v, i = (x.astype(dt) for x in (q, k, v, i))
    lf = jax.nn.log_sigmoid(f.astype(dt))
    B, NH, S, Dk = q.shape
    if initial_state is None:
        initial_state = (jnp.zeros((B, NH, Dk, v.shape[-1]), dt), jnp.zeros((B, NH, Dk), dt),
                         jnp.zeros((B, NH), dt))  # fmt: skip
    C0, n0, m0 = (jnp.asarray(x, dt) for x in initial_state)
    t, s = jnp.arange(S)[:, None], jnp.arange(S)[None, :]
    # Masked cumulative sums down each column: D_ts = sum_{j in (s, t]} lf_j, no cancellation.
    D = jnp.where(t >= s, jnp.cumsum(jnp.where(t > s, lf[..., :, None], 0.0), axis=-2), NEG)
    D = D + i[..., None, :]
    init = jnp.cumsum(lf, axis=-1) + m0[..., None]
    m = jnp.maximum(jnp.max(D, axis=-1), init)
    q = q * Dk**-0.5
    W = jnp.exp(D - m[..., None]) * jnp.einsum("bhtk,bhsk->bhts", q, k)
    w0 = jnp.exp(init - m)
    num = jnp.einsum("bhts,bhsv->bhtv", W, v) + w0[..., None] * jnp.einsum("bhtk,bhkv->bhtv", q, C0)
    den = jnp.sum(W, axis=-1) + w0 * jnp.einsum("bhtk,bhk->bht", q, n0)
    return num / (jnp.maximum(jnp.abs(den), jnp.exp(-m)) + eps)[..., None]
