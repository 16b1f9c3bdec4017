"""Chunkwise mLSTM in Pallas: inter-chunk state and intra-chunk kernels, forward and backward.

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
gradient), also in Pallas. With the gates held fixed every stabiliser (``m_t``, the chunk-start
``m``) is a constant and ``h`` is a rational function of q, k, v and the initial state, so the
stabiliser cancels in the gradient as it does in the forward (it rescales numerator and
normaliser together; the derivation is ours, in these kernels' stabilised variables). Per token,
``nq_t`` is the signed normaliser sum above (before ``|.|``),
``den_t = max(|nq_t|, exp(-m_t)) + eps`` and ``h_t = num_t / den_t``, so

* ``dnum_t = dh_t / den_t`` and ``dnq_t = -sign(nq_t) (h_t·dnum_t)`` where ``|nq_t| > exp(-m_t)``,
  else 0 (on the ``exp(-m_t)`` branch the normaliser does not depend on q, k, n). These are O(S)
  elementwise terms in jnp, like flash attention's ``delta``.
* Reverse state kernel (one program per batch x head, chunks in reverse, mirroring kernel 1):
  ``dC``, ``dn`` at the end of chunk c (zero after the last chunk) are written out, then carried
  to its start by the transposed recurrence ``dC_c = decay_c dC_{c+1} + sum_t w0_t q~_t dnum_tᵀ``,
  ``dn_c = decay_c dn_{c+1} + sum_t w0_t dnq_t q~_t`` with ``decay_c = exp(g + m_c - m_{c+1})``
  and ``w0_t = exp(b_t + m_c - m_t)``; the carry at the first chunk's start is ``dC0, dn0``.
* Intra-chunk kernel (one program per batch x head x chunk, parallel): with
  ``A_ts = exp(D_ts - m_t)`` (s <= t), ``S_ts = q~_t·k_s``, ``dP_ts = A_ts (dnum_t·v_s + dnq_t)``
  and ``e_s = exp(a_s + i_s - m_{c+1})`` (the weight of token s in the chunk-end state),
  ``dq~_t = sum_s dP_ts k_s + w0_t (C dnum_t + dnq_t n)``,
  ``dk_s = sum_t dP_ts q~_t + e_s (dC_{c+1} v_s + dn_{c+1})`` and
  ``dv_s = sum_t A_ts S_ts dnum_t + e_s dC_{c+1}ᵀ k_s``; ``dq = dq~ / sqrt(Dqk)``. Padding tokens
  get ``e = 0`` and zero cotangents, so they add nothing.

Residuals: the inputs, the float32 output ``h``, the per-token ``m_t`` and ``nq_t`` (two extra
(S, 1) columns of the output kernel) and the chunk-start states ``(C, n, m)`` that kernel 1 writes
for kernel 2 anyway. Keeping the states costs S/L x Dqk x Dv floats per head (for xLSTM 7B at
L = 64 eight times q's size) but saves re-running the sequential state kernel in the backward;
the L x L decay weights are recomputed per chunk, never stored. ``w0``, ``e`` and ``decay`` are
O(S) exponentials of the saved stabilisers, computed in jnp.

Gate gradients then follow from ``dq, dk`` without differentiating through the stabiliser:
``k_s`` only ever appears as ``exp(i_s - F_s) k_s`` and ``q_t`` as ``exp(F_t) q_t`` (``F`` the
cumulative log forget gate from the start, the initial state as ``exp(m_0) (C_0, n_0)``), so
``di_t = k_t·dk_t``, ``dF_t = q_t·dq_t - k_t·dk_t``, ``dlf_t = sum_{u >= t} dF_u``,
``df_t = dlf_t sigmoid(-f_t)`` and ``dm_0 = C_0·dC_0 + n_0·dn_0``. These are exact for ``eps = 0``;
with ``eps > 0`` they drop the eps-sized dependence on the stabiliser (as the authors' kernels do).
:func:`_bwd_reference` is the same backward in XLA: the vjp of the jnp mirror of the forward
kernels (:func:`_chunkwise_jnp`) plus the same gate formulas (the tests compare the two).

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
    """The chunk length ``L`` (a power of two >= 8): all four kernels tile the sequence by it.

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


def _output_kernel(q_ref, k_ref, v_ref, i_ref, bc_ref, br_ref, C_ref, n_ref, m_ref, h_ref,
                   mt_ref, nq_ref, *, cfg: _Static):  # fmt: skip
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
    mt_ref[...], nq_ref[...] = m_L1, den_L1  # the backward's residuals: stabiliser, signed sum


def _dstate_kernel(q_ref, dnum_ref, dnq_ref, w0_ref, decay_ref, *refs, cfg: _Static):
    """The state cotangents, chunks in reverse (module docstring, reverse state kernel)."""
    dCe_ref, dne_ref, dC0_ref, dn0_ref, *scratch = refs
    L = cfg.chunk

    def step(carry, q_LK, dnum_LV, dnq_L1, w0_L1, decay_11):
        dC_KV, dn_1K = carry
        qw_LK = w0_L1 * q_LK.astype(F32)
        dC_KV = decay_11 * dC_KV + _dot(qw_LK, dnum_LV, (0, 0))
        dn_1K = decay_11 * dn_1K + jnp.sum(dnq_L1 * qw_LK, axis=0, keepdims=True)
        return dC_KV, dn_1K

    if cfg.style == "gpu":  # one program walks its chunks backwards
        nc = q_ref.shape[0] // L

        def body(j, carry):
            c = nc - 1 - j
            dCe_ref[c] = carry[0]
            dne_ref[c] = carry[1]
            rows = pl.ds(pl.multiple_of(c * L, L), L)
            tiles = (q_ref[rows, :], dnum_ref[rows, :], dnq_ref[rows, :], w0_ref[rows, :])
            return step(carry, *tiles, decay_ref[c])

        init = (jnp.zeros(dC0_ref.shape, F32), jnp.zeros(dn0_ref.shape, F32))
        dC, dn = lax.fori_loop(0, nc, body, init)
        dC0_ref[...], dn0_ref[...] = dC, dn
        return
    # TPU: the chunk grid axis is sequential and its index maps run it backwards.
    c = pl.program_id(1)

    @pl.when(c == 0)
    def _init():
        for ref in scratch:
            ref[...] = jnp.zeros(ref.shape, F32)

    carry = tuple(ref[...] for ref in scratch)
    dCe_ref[...], dne_ref[...] = carry
    tiles = (q_ref[...], dnum_ref[...], dnq_ref[...], w0_ref[...], decay_ref[...])
    new = step(carry, *tiles)
    for ref, value in zip(scratch, new, strict=True):
        ref[...] = value

    @pl.when(c == pl.num_programs(1) - 1)
    def _final():
        dC0_ref[...], dn0_ref[...] = new


def _dchunk_kernel(q_ref, k_ref, v_ref, dnum_ref, dnq_ref, i_ref, bc_ref, br_ref, mt_ref, w0_ref,
                   e_ref, C_ref, n_ref, dC_ref, dn_ref, dq_ref, dk_ref, dv_ref, *,
                   cfg: _Static):  # fmt: skip
    """dq~, dk, dv of one chunk (module docstring, intra-chunk kernel)."""
    L = cfg.chunk
    q_LK, k_LK, v_LV = q_ref[...], k_ref[...], v_ref[...]
    lo = v_LV.dtype  # token-token products run in the input dtype, float32 accumulation
    dnum_LV, dnq_L1 = dnum_ref[...], dnq_ref[...]
    w0_L1, e_L1 = w0_ref[...], e_ref[...]
    dC_KV, dn_1K = dC_ref[...], dn_ref[...]
    t = lax.broadcasted_iota(jnp.int32, (L, L), 0)
    s = lax.broadcasted_iota(jnp.int32, (L, L), 1)
    D_LL = jnp.where(t >= s, bc_ref[...] - br_ref[...] + i_ref[...], NEG)
    A_LL = jnp.exp(D_LL - mt_ref[...])  # the forward's decay weights, recomputed
    dP_LL = A_LL * (_dot(dnum_LV.astype(lo), v_LV, (1, 1)) + dnq_L1)
    dPlo_LL = dP_LL.astype(lo)
    dq_LK = _dot(dPlo_LL, k_LK, (1, 0))
    dq_LK += w0_L1 * (_dot(dnum_LV, C_ref[...], (1, 1)) + dnq_L1 * n_ref[...])
    dk_LK = _dot(dPlo_LL, q_LK, (0, 0))
    dk_LK += e_L1 * (_dot(v_LV.astype(F32), dC_KV, (1, 1)) + dn_1K)
    AS_LL = (A_LL * _dot(q_LK, k_LK, (1, 1))).astype(lo)
    dv_LV = _dot(AS_LL, dnum_LV.astype(lo), (0, 0))
    dv_LV += e_L1 * _dot(k_LK.astype(F32), dC_KV, (1, 0))
    dq_ref[...], dk_ref[...], dv_ref[...] = dq_LK, dk_LK, dv_LV


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


def _pad_seq(x, Sp):
    return jnp.pad(x, ((0, 0), (0, Sp - x.shape[1]), (0, 0)))


def _col(x):  # (G, Sp) -> (G, Sp, 1): a column per chunk
    return x[..., None]


def _row(x, L):  # (G, Sp) -> (G, nc, 1, L): a row per chunk
    return x.reshape(x.shape[0], -1, 1, L)


def _compiler_params(cfg: _Static, semantics: tuple[str, str]):
    if cfg.style == "gpu":
        return plgpu.CompilerParams(num_warps=4, num_stages=1)
    return pltpu.CompilerParams(dimension_semantics=semantics)


def _chunk_specs(L: int):
    """BlockSpecs of the per-chunk kernels (grid (G, nc)): a chunk of tokens, a per-chunk array."""
    chunk = lambda d: pl.BlockSpec((None, L, d), lambda g, c: (g, c, 0))  # noqa: E731
    one = lambda *shape: pl.BlockSpec((None, None, *shape), lambda g, c: (g, c, 0, 0))  # noqa: E731
    return chunk, one


def _sequential_specs(cfg: _Static, Sp: int, nc: int, reverse: bool):
    """BlockSpecs of the state kernels: a token array, per-chunk states, one state per program.

    GPU style: grid (G,), each program sees its whole sequence. TPU style: grid (G, nc), the chunk
    axis sequential, visited from the last chunk when ``reverse``.
    """
    per_g = lambda *shape: pl.BlockSpec((None, *shape), lambda g, *c: (g,) + (0,) * len(shape))  # noqa: E731
    if cfg.style == "gpu":
        seq = lambda d: pl.BlockSpec((None, Sp, d), lambda g: (g, 0, 0))  # noqa: E731
        starts = lambda *shape: pl.BlockSpec((None, nc, *shape), lambda g: (g, 0, 0, 0))  # noqa: E731
        return (), seq, starts, per_g
    at = (lambda c: nc - 1 - c) if reverse else (lambda c: c)
    seq = lambda d: pl.BlockSpec((None, cfg.chunk, d), lambda g, c: (g, at(c), 0))  # noqa: E731
    starts = lambda *shape: pl.BlockSpec((None, None, *shape), lambda g, c: (g, at(c), 0, 0))  # noqa: E731
    return (nc,), seq, starts, per_g


def _call(kernel, cfg: _Static, grid, in_specs, out_specs, out_shape, scratch, semantics, name):
    call = pl.pallas_call(
        functools.partial(kernel, cfg=cfg),
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        scratch_shapes=scratch if cfg.style == "tpu" else [],
        compiler_params=_compiler_params(cfg, semantics),
        interpret=cfg.interpret,
        name=name,
    )
    return native_call(call, out_shape, cfg.style, cfg.interpret)


def _forward(q, k, v, i, f, C0, n0, m0, cfg: _Static):
    """Both kernels on ``(G, S, .)`` operands (G = batch x heads): ``h``, the final state and the
    backward's residuals (padded ``h``, per-token ``m_t`` and ``nq_t``, the chunk-start states)."""
    G, S, Dk = q.shape
    Dv = v.shape[-1]
    L = cfg.chunk
    Sp = -(-S // L) * L
    nc = Sp // L
    q, k, v = (_pad_seq(x, Sp) for x in (q * Dk**-0.5, k, v))
    i_p, b, w = _gates(i, f, L)
    C0, n0, m0 = C0.astype(F32), n0.astype(F32)[:, None], m0.astype(F32)[:, None, None]
    state_shapes = [
        jax.ShapeDtypeStruct((G, nc, Dk, Dv), F32),
        jax.ShapeDtypeStruct((G, nc, 1, Dk), F32),
        jax.ShapeDtypeStruct((G, nc, 1, 1), F32),
        jax.ShapeDtypeStruct((G, Dk, Dv), F32),
        jax.ShapeDtypeStruct((G, 1, Dk), F32),
        jax.ShapeDtypeStruct((G, 1, 1), F32),
    ]
    chunks, seq, starts, per_g = _sequential_specs(cfg, Sp, nc, reverse=False)
    state_call = _call(
        _state_kernel, cfg, (G, *chunks),
        [seq(Dk), seq(Dv), seq(1), seq(1), per_g(Dk, Dv), per_g(1, Dk), per_g(1, 1)],
        [starts(Dk, Dv), starts(1, Dk), starts(1, 1), per_g(Dk, Dv), per_g(1, Dk), per_g(1, 1)],
        state_shapes,
        [pltpu.VMEM((Dk, Dv), F32), pltpu.VMEM((1, Dk), F32), pltpu.VMEM((1, 1), F32)],
        ("parallel", "arbitrary"), "mlstm_states",
    )  # fmt: skip
    Cs, ns, ms, Cf, nf, mf = state_call(k, v, _col(w), _col(b), C0, n0, m0)

    chunk, one = _chunk_specs(L)
    out_shapes = [jax.ShapeDtypeStruct((G, Sp, d), F32) for d in (Dv, 1, 1)]
    out_call = _call(
        _output_kernel, cfg, (G, nc),
        [chunk(Dk), chunk(Dk), chunk(Dv), one(1, L), chunk(1), one(1, L), one(Dk, Dv),
         one(1, Dk), one(1, 1)],
        [chunk(Dv), chunk(1), chunk(1)], out_shapes, [], ("parallel", "parallel"), "mlstm_outputs",
    )  # fmt: skip
    h, m_t, nq = out_call(q, k, v, _row(i_p, L), _col(b), _row(b, L), Cs, ns, ms)
    return h[:, :S], (Cf, nf[:, 0], mf[:, 0, 0]), (h, m_t, nq, Cs, ns, ms, mf)


def _backward(cfg: _Static, q, k, v, i, f, C0, n0, m0, h, m_t, nq, Cs, ns, ms, mf, dh):
    """The two backward kernels and the gate formulas (module docstring): the gradients of
    ``(q, k, v, i, f, C0, n0, m0)`` for the cotangent ``dh`` of ``h``."""
    G, S, Dk = q.shape
    Dv = v.shape[-1]
    L = cfg.chunk
    Sp = -(-S // L) * L
    nc = Sp // L
    qs, kp, vp = (_pad_seq(x, Sp) for x in (q * Dk**-0.5, k, v))
    i_p, b, w = _gates(i, f, L)
    # Per-token cotangents of the numerator and of the signed normaliser sum nq (padded rows: 0).
    floor = jnp.exp(-m_t)
    dnum = _pad_seq(dh.astype(F32), Sp) / (jnp.maximum(jnp.abs(nq), floor) + cfg.eps)
    hdnum = jnp.sum(h * dnum, axis=-1, keepdims=True)
    dnq = jnp.where(jnp.abs(nq) > floor, -jnp.sign(nq) * hdnum, 0.0)
    # O(S) weights from the saved stabilisers: w0 (chunk-start state in h_t), e (token s in the
    # chunk-end state), decay (chunk start to chunk end).
    m_start = ms[:, :, 0, 0]
    m_end = jnp.concatenate([m_start[:, 1:], mf[:, 0]], axis=1)  # (G, nc)
    b_c, w_c = b.reshape(G, nc, L), w.reshape(G, nc, L)
    w0 = jnp.exp(b_c + m_start[..., None] - m_t.reshape(G, nc, L)).reshape(G, Sp, 1)
    e = jnp.exp(w_c - m_end[..., None]).reshape(G, Sp, 1)
    decay = jnp.exp(b_c[..., -1] + m_start - m_end)[..., None, None]

    chunks, seq, starts, per_g = _sequential_specs(cfg, Sp, nc, reverse=True)
    dstate_shapes = [
        jax.ShapeDtypeStruct((G, nc, Dk, Dv), F32),
        jax.ShapeDtypeStruct((G, nc, 1, Dk), F32),
        jax.ShapeDtypeStruct((G, Dk, Dv), F32),
        jax.ShapeDtypeStruct((G, 1, Dk), F32),
    ]
    dstate_call = _call(
        _dstate_kernel, cfg, (G, *chunks),
        [seq(Dk), seq(Dv), seq(1), seq(1), starts(1, 1)],
        [starts(Dk, Dv), starts(1, Dk), per_g(Dk, Dv), per_g(1, Dk)],
        dstate_shapes, [pltpu.VMEM((Dk, Dv), F32), pltpu.VMEM((1, Dk), F32)],
        ("parallel", "arbitrary"), "mlstm_dstates",
    )  # fmt: skip
    dCe, dne, dC0, dn0 = dstate_call(qs, dnum, dnq, w0, decay)

    chunk, one = _chunk_specs(L)
    grad_shapes = [jax.ShapeDtypeStruct((G, Sp, d), F32) for d in (Dk, Dk, Dv)]
    dchunk_call = _call(
        _dchunk_kernel, cfg, (G, nc),
        [chunk(Dk), chunk(Dk), chunk(Dv), chunk(Dv), chunk(1), one(1, L), chunk(1), one(1, L),
         chunk(1), chunk(1), chunk(1), one(Dk, Dv), one(1, Dk), one(Dk, Dv), one(1, Dk)],
        [chunk(Dk), chunk(Dk), chunk(Dv)], grad_shapes, [], ("parallel", "parallel"),
        "mlstm_dchunks",
    )  # fmt: skip
    dq, dk, dv = dchunk_call(
        qs, kp, vp, dnum, dnq, _row(i_p, L), _col(b), _row(b, L), m_t, w0, e, Cs, ns, dCe, dne
    )
    dq = dq[:, :S] * Dk**-0.5
    return _gate_grads(q, k, f, C0, n0, dq, dk[:, :S], dv[:, :S], dC0, dn0[:, 0])


def _gate_grads(q, k, f, C0, n0, dq, dk, dv, dC0, dn0):
    """``(dq, dk, dv, dC0, dn0)`` and the gate and ``m0`` gradients (module docstring)."""
    qf, kf = q.astype(F32), k.astype(F32)
    di = jnp.sum(kf * dk, axis=-1)
    dF = jnp.sum(qf * dq, axis=-1) - di
    dlf = jnp.flip(jnp.cumsum(jnp.flip(dF, -1), axis=-1), -1)
    df = dlf * jax.nn.sigmoid(-f.astype(F32))
    dm0 = jnp.sum(C0 * dC0, axis=(1, 2)) + jnp.sum(n0 * dn0, axis=1)
    return dq, dk, dv, di, df, dC0, dn0, dm0


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


def _bwd_reference(q, k, v, i, f, C0, n0, m0, dh, *, chunk: int, eps: float):
    """The backward in XLA (the reference of the Pallas one): the vjp of :func:`_chunkwise_jnp`
    in ``(q, k, v, C0, n0)`` with the gates held fixed, then the same gate formulas."""
    fixed = lambda q, k, v, C0, n0: _chunkwise_jnp(q, k, v, i, f, C0, n0, m0, chunk, eps)  # noqa: E731
    _, vjp = jax.vjp(fixed, q, k, v, C0, n0)
    dq, dk, dv, dC0, dn0 = vjp(dh.astype(F32))
    return _gate_grads(q, k, f, C0, n0, dq, dk, dv, dC0, dn0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(8,))
def _mlstm(q, k, v, i, f, C0, n0, m0, cfg: _Static):
    return _forward(q, k, v, i, f, C0, n0, m0, cfg)[0]


def _mlstm_fwd(q, k, v, i, f, C0, n0, m0, cfg):
    h, _, saved = _forward(q, k, v, i, f, C0, n0, m0, cfg)
    return h, (q, k, v, i, f, C0, n0, m0, *saved)


def _mlstm_bwd(cfg, res, dh):
    grads = _backward(cfg, *res, dh)
    return tuple(g.astype(x.dtype) for g, x in zip(grads, res[:8], strict=True))


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
    _, (C, n, m), _ = _forward(*flat, C0, n0, m0, cfg)
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
