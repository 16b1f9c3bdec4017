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
    f32_precision,
    native_call,
    pow2_at_least,
    resolve_backend,
    round_up,
)
from pallas_kernels.fit import MIN_GPU_TILE, mlstm_bytes, smem_budget

__all__ = ["BlockSizes", "mlstm_chunkwise", "mlstm_chunkwise_reference"]

F32 = jnp.float32
NEG = -1e30  # log weight of padding: finite, so no inf - inf


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """The chunk length ``L`` (a power of two >= 8), by which all kernels tile the sequence, and
    ``block_d``, the tile of the head dims (a power of two >= 8, or None).

    The state kernels split the ``Dk x Dv`` state into ``block_d x block_d`` tiles (one program
    each: the recurrence is separable over both dims), the output and gradient kernels tile the
    dim they write and loop over the one they contract in slices of ``block_d``. ``None`` picks
    it from the shapes and the device: on GPUs the largest tile whose shared-memory estimate
    (:func:`pallas_kernels.fit.mlstm_bytes`) fits the device's budget, on TPUs the whole head
    (VMEM holds it). TPU tiles want the chunk to fill the 128 vector lanes (:meth:`for_backend`).
    """

    chunk: int = 64
    block_d: int | None = None

    def __post_init__(self) -> None:
        check_power_of_two("BlockSizes", "chunk", self.chunk)
        if self.block_d is not None:
            check_power_of_two("BlockSizes", "block_d", self.block_d)

    @classmethod
    def for_backend(cls, backend: Style) -> BlockSizes:
        return cls(64) if backend == "gpu" else cls(128)


@dataclasses.dataclass(frozen=True)
class _Static:
    chunk: int
    tile_k: int  # Dk tile (state kernels, dq/dk) and the slice of the Dk loops
    tile_v: int  # Dv tile (state kernels, outputs, dv) and the slice of the Dv loop
    eps: float
    style: Style
    interpret: bool
    precision: object  # of the float32 dots (_common.f32_precision)


def _dot(a, b, contract, cfg: _Static):
    """float32-accumulated product contracting ``a``'s axis ``contract[0]`` with ``b``'s."""
    full = cfg.precision if a.dtype == F32 and b.dtype == F32 else None
    dims = ((contract[:1], contract[1:]), ((), ()))
    return lax.dot_general(a, b, dims, precision=full, preferred_element_type=F32)


def _slices(ref_width: int, tile: int):
    """``(n, at)``: the number of ``tile``-wide slices of a dim and the index of slice ``j``."""
    n = ref_width // tile
    if n == 1:
        return 1, lambda j: slice(None)
    return n, lambda j: pl.ds(pl.multiple_of(j * tile, tile), tile)


def _loop(n: int, body, init):
    """``body`` over ``j < n`` (no loop for one slice)."""
    return body(0, init) if n == 1 else lax.fori_loop(0, n, body, init)


# ------------------------------------------------------------------------------------ kernels


def _state_kernel(k_ref, v_ref, ks_ref, decay_ref, C0_ref, Cs_ref, Cf_ref, *scratch, cfg: _Static):
    """One ``(tile_k, tile_v)`` tile of ``C`` through the chunks (module docstring, kernel 1)."""
    L = cfg.chunk

    def step(C_ME, k_SM, v_SE, ks_S1, decay_11):
        kw_SM = (ks_S1 * k_SM.astype(F32)).astype(k_SM.dtype)
        return decay_11 * C_ME + _dot(kw_SM, v_SE, (0, 0), cfg)

    if cfg.style == "gpu":  # one program walks its chunks

        def body(c, C_ME):
            Cs_ref[c] = C_ME
            rows = pl.ds(pl.multiple_of(c * L, L), L)
            return step(C_ME, k_ref[rows, :], v_ref[rows, :], ks_ref[rows, :], decay_ref[c])

        nc = k_ref.shape[0] // L
        Cf_ref[...] = lax.fori_loop(0, nc, body, C0_ref[...].astype(F32))
        return
    # TPU: the chunk grid axis is sequential; the carry lives in VMEM scratch.
    (C_ref,) = scratch
    c = pl.program_id(3)

    @pl.when(c == 0)
    def _init():
        C_ref[...] = C0_ref[...].astype(F32)

    Cs_ref[...] = C_ref[...]
    C_ref[...] = step(C_ref[...], k_ref[...], v_ref[...], ks_ref[...], decay_ref[...])

    @pl.when(c == pl.num_programs(3) - 1)
    def _final():
        Cf_ref[...] = C_ref[...]


def _decay_weights(i_ref, bc_ref, br_ref, L: int):
    """``D_ts = b_t - b_s + i_s`` for ``s <= t`` (else NEG) of one chunk."""
    t = lax.broadcasted_iota(jnp.int32, (L, L), 0)
    s = lax.broadcasted_iota(jnp.int32, (L, L), 1)
    return jnp.where(t >= s, bc_ref[...] - br_ref[...] + i_ref[...], NEG)


def _output_kernel(q_ref, k_ref, v_ref, i_ref, bc_ref, br_ref, C_ref, n_ref, m_ref, h_ref,
                   mt_ref, nq_ref, *, cfg: _Static):  # fmt: skip
    """One chunk's outputs in one ``tile_v`` slice of the values (module docstring, kernel 2);
    ``q·kᵀ``, ``q·C`` and ``q·n`` contract Dk in ``tile_k`` slices."""
    L = cfg.chunk
    n_k, at = _slices(q_ref.shape[-1], cfg.tile_k)

    def body(j, carry):
        S_TS, qC_TE, qn_T1 = carry
        q_TM, k_SM = q_ref[:, at(j)], k_ref[:, at(j)]
        S_TS += _dot(q_TM, k_SM, (1, 1), cfg)
        qC_TE += _dot(q_TM.astype(F32), C_ref[at(j), :], (1, 0), cfg)
        qn_T1 += jnp.sum(q_TM.astype(F32) * n_ref[:, at(j)], axis=1, keepdims=True)
        return S_TS, qC_TE, qn_T1

    init = (jnp.zeros((L, L), F32), jnp.zeros(h_ref.shape, F32), jnp.zeros((L, 1), F32))
    S_TS, qC_TE, qn_T1 = _loop(n_k, body, init)
    D_TS = _decay_weights(i_ref, bc_ref, br_ref, L)
    init_T1 = bc_ref[...] + m_ref[...]
    m_T1 = jnp.maximum(jnp.max(D_TS, axis=1, keepdims=True), init_T1)
    W_TS = jnp.exp(D_TS - m_T1) * S_TS
    w0_T1 = jnp.exp(init_T1 - m_T1)
    num_TE = _dot(W_TS.astype(v_ref.dtype), v_ref[...], (1, 0), cfg) + w0_T1 * qC_TE
    den_T1 = jnp.sum(W_TS, axis=1, keepdims=True) + w0_T1 * qn_T1
    h_ref[...] = (num_TE / (jnp.maximum(jnp.abs(den_T1), jnp.exp(-m_T1)) + cfg.eps)).astype(
        h_ref.dtype
    )
    # The backward's residuals: stabiliser and signed sum (the same in every value slice).
    mt_ref[...], nq_ref[...] = m_T1, den_T1


def _dstate_kernel(
    q_ref, dnum_ref, w0_ref, decay_ref, dC1_ref, dCe_ref, dC0_ref, *scratch, cfg: _Static
):
    """One ``(tile_k, tile_v)`` tile of the state cotangent ``dC``, chunks in reverse from
    ``dC1`` after the last one (zero: the final state has no cotangent; module docstring,
    reverse state kernel)."""
    L = cfg.chunk

    def step(dC_ME, q_TM, dnum_TE, w0_T1, decay_11):
        return decay_11 * dC_ME + _dot(w0_T1 * q_TM.astype(F32), dnum_TE, (0, 0), cfg)

    if cfg.style == "gpu":  # one program walks its chunks backwards
        nc = q_ref.shape[0] // L

        def body(j, dC_ME):
            c = nc - 1 - j
            dCe_ref[c] = dC_ME
            rows = pl.ds(pl.multiple_of(c * L, L), L)
            return step(dC_ME, q_ref[rows, :], dnum_ref[rows, :], w0_ref[rows, :], decay_ref[c])

        dC0_ref[...] = lax.fori_loop(0, nc, body, dC1_ref[...])
        return
    # TPU: the chunk grid axis is sequential and its index maps run it backwards.
    (dC_ref,) = scratch
    c = pl.program_id(3)

    @pl.when(c == 0)
    def _init():
        dC_ref[...] = dC1_ref[...]

    dCe_ref[...] = dC_ref[...]
    dC_ref[...] = step(dC_ref[...], q_ref[...], dnum_ref[...], w0_ref[...], decay_ref[...])

    @pl.when(c == pl.num_programs(3) - 1)
    def _final():
        dC0_ref[...] = dC_ref[...]


def _dqk_kernel(q_ref, k_ref, v_ref, dnum_ref, dnq_ref, i_ref, bc_ref, br_ref, mt_ref, w0_ref,
                e_ref, C_ref, n_ref, dC_ref, dn_ref, dq_ref, dk_ref, *, cfg: _Static):  # fmt: skip
    """dq~ and dk of one chunk in one ``tile_k`` slice of the keys (module docstring,
    intra-chunk kernel); ``dnum·vᵀ``, ``dnum·Cᵀ`` and ``v·dCᵀ`` contract Dv in slices."""
    L = cfg.chunk
    lo = v_ref.dtype  # token-token products run in the input dtype, float32 accumulation
    n_v, at = _slices(v_ref.shape[-1], cfg.tile_v)

    def body(j, carry):
        dPv_TS, dqC_TM, dkC_SM = carry
        dnum_TE, v_SE = dnum_ref[:, at(j)], v_ref[:, at(j)]
        dPv_TS += _dot(dnum_TE.astype(lo), v_SE, (1, 1), cfg)
        dqC_TM += _dot(dnum_TE, C_ref[:, at(j)], (1, 1), cfg)
        dkC_SM += _dot(v_SE.astype(F32), dC_ref[:, at(j)], (1, 1), cfg)
        return dPv_TS, dqC_TM, dkC_SM

    init = (jnp.zeros((L, L), F32), jnp.zeros(dq_ref.shape, F32), jnp.zeros(dk_ref.shape, F32))
    dPv_TS, dqC_TM, dkC_SM = _loop(n_v, body, init)
    dnq_T1 = dnq_ref[...]
    A_TS = jnp.exp(_decay_weights(i_ref, bc_ref, br_ref, L) - mt_ref[...])  # recomputed weights
    dPlo_TS = (A_TS * (dPv_TS + dnq_T1)).astype(lo)
    dq_ref[...] = _dot(dPlo_TS, k_ref[...], (1, 0), cfg) + w0_ref[...] * (
        dqC_TM + dnq_T1 * n_ref[...]
    )
    dk_ref[...] = _dot(dPlo_TS, q_ref[...], (0, 0), cfg) + e_ref[...] * (dkC_SM + dn_ref[...])


def _dv_kernel(q_ref, k_ref, dnum_ref, i_ref, bc_ref, br_ref, mt_ref, e_ref, dC_ref, dv_ref, *,
               cfg: _Static):  # fmt: skip
    """dv of one chunk in one ``tile_v`` slice of the values; ``q·kᵀ`` and ``k·dC`` contract Dk
    in slices."""
    L = cfg.chunk
    lo = q_ref.dtype
    n_k, at = _slices(q_ref.shape[-1], cfg.tile_k)

    def body(j, carry):
        S_TS, kdC_SE = carry
        k_SM = k_ref[:, at(j)]
        S_TS += _dot(q_ref[:, at(j)], k_SM, (1, 1), cfg)
        kdC_SE += _dot(k_SM.astype(F32), dC_ref[at(j), :], (1, 0), cfg)
        return S_TS, kdC_SE

    S_TS, kdC_SE = _loop(n_k, body, (jnp.zeros((L, L), F32), jnp.zeros(dv_ref.shape, F32)))
    A_TS = jnp.exp(_decay_weights(i_ref, bc_ref, br_ref, L) - mt_ref[...])
    AS_TS = (A_TS * S_TS).astype(lo)
    dv_ref[...] = _dot(AS_TS, dnum_ref[...].astype(lo), (0, 0), cfg) + e_ref[...] * kdC_SE


# --------------------------------------------------------------------------------- plumbing


def _gates(i_XT, f_XT, L):
    """Padded gates and their within-chunk sums: ``i``, ``b`` (inclusive), ``w = a + i``."""
    X, T = i_XT.shape
    pad = -T % L
    lf = jax.nn.log_sigmoid(f_XT.astype(F32))
    i = jnp.pad(i_XT.astype(F32), ((0, 0), (0, pad)), constant_values=NEG)
    lf = jnp.pad(lf, ((0, 0), (0, pad)))
    lf_c = lf.reshape(X, -1, L)
    b = jnp.cumsum(lf_c, axis=-1)
    rev = jnp.flip(jnp.cumsum(jnp.flip(lf_c, -1), axis=-1), -1)
    a = jnp.concatenate([rev[..., 1:], jnp.zeros_like(rev[..., :1])], axis=-1)
    return i, b.reshape(X, -1), a.reshape(X, -1) + i


def _stabilisers(b, w, m0, L):
    """The chunk-boundary stabilisers from the gates alone (O(S), in jnp): ``m_{c+1} =
    max(g_c + m_c, max_t w_t)`` with ``g_c`` chunk c's total log decay. The max-plus recurrence
    is associative, so it runs as a scan of depth log(chunks). Returns the ``m`` at every chunk
    start ``(G, nc)`` and the final one ``(G,)``."""
    G = b.shape[0]
    g = b.reshape(G, -1, L)[..., -1]
    top = jnp.max(w.reshape(G, -1, L), axis=-1)

    def combine(x, y):  # x then y: m -> max(g_y + max(g_x + m, W_x), W_y)
        return x[0] + y[0], jnp.maximum(x[1] + y[0], y[1])

    total, best = lax.associative_scan(combine, (g, top), axis=1)
    after = jnp.maximum(total + m0[:, None], best)  # m at every chunk end
    return jnp.concatenate([m0[:, None], after[:, :-1]], axis=1), after[:, -1]


def _linear_scan(decay, add, x0, reverse=False):
    """``x_{c+1} = decay_c x_c + add_c`` along axis 1 from ``x0`` (``reverse``: from the last
    chunk down, ``x_c = decay_c x_{c+1} + add_c`` from ``x_nc = x0``), as an associative scan.
    Returns the value before each step ``(G, nc, D)`` and after the last one ``(G, D)``."""

    def combine(x, y):  # x then y (in scan order)
        return x[0] * y[0], y[0] * x[1] + y[1]

    a, b = lax.associative_scan(combine, (decay[..., None], add), axis=1, reverse=reverse)
    after = a * x0[:, None] + b  # the value after each step
    if reverse:
        before = jnp.concatenate([after[:, 1:], x0[:, None]], axis=1)
        return before, after[:, 0]
    return jnp.concatenate([x0[:, None], after[:, :-1]], axis=1), after[:, -1]


def _pad(x, Sp, D):
    """``(G, S, d)`` zero-padded to ``(G, Sp, D)``."""
    return jnp.pad(x, ((0, 0), (0, Sp - x.shape[1]), (0, D - x.shape[2])))


def _col(x):  # (G, Sp) -> (G, Sp, 1): a column per chunk
    return x[..., None]


def _row(x, L):  # (G, Sp) -> (G, nc, 1, L): a row per chunk
    return x.reshape(x.shape[0], -1, 1, L)


def _call(kernel, cfg: _Static, grid, in_specs, out_specs, out_shape, scratch, semantics, name):
    if cfg.style == "gpu":
        params = plgpu.CompilerParams(num_warps=4, num_stages=1)
    else:
        params = pltpu.CompilerParams(dimension_semantics=semantics)
    call = pl.pallas_call(
        functools.partial(kernel, cfg=cfg),
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        scratch_shapes=scratch if cfg.style == "tpu" else [],
        compiler_params=params,
        interpret=cfg.interpret,
        name=name,
    )
    return native_call(call, out_shape, cfg.style, cfg.interpret)


def _state_call(kernel, cfg: _Static, tiled, per_chunk, state0, reverse: bool, name: str):
    """A state kernel: grid ``(G, Dk tiles, Dv tiles)`` (GPU; each program walks the chunks) or
    ``(G, Dk tiles, Dv tiles, chunks)`` (TPU; the chunk axis sequential, reversed for the
    backward). ``tiled``: ``(G, Sp, Dk)`` and ``(G, Sp, Dv)`` token arrays; ``per_chunk``: the
    ``(G, Sp, 1)`` token column and ``(G, nc, 1, 1)`` chunk decays; ``state0``: ``(G, Dk, Dv)``.
    Returns the tile at every chunk boundary ``(G, nc, Dk, Dv)`` and the last one."""
    (a, b), (col, decay) = tiled, per_chunk
    G, Sp, Dk = a.shape
    Dv, L, tk, tv = b.shape[-1], cfg.chunk, cfg.tile_k, cfg.tile_v
    nc = Sp // L
    tiles = (G, Dk // tk, Dv // tv)
    shapes = [jax.ShapeDtypeStruct((G, nc, Dk, Dv), F32), jax.ShapeDtypeStruct((G, Dk, Dv), F32)]
    state = pl.BlockSpec((None, tk, tv), lambda g, x, y, *c: (g, x, y))
    if cfg.style == "gpu":
        grid = tiles
        seq = lambda w, ix: pl.BlockSpec((None, Sp, w), lambda g, x, y: (g, 0, ix(x, y)))  # noqa: E731
        decays = pl.BlockSpec((None, nc, 1, 1), lambda g, x, y: (g, 0, 0, 0))
        starts = pl.BlockSpec((None, nc, tk, tv), lambda g, x, y: (g, 0, x, y))
    else:
        grid = (*tiles, nc)
        at = (lambda c: nc - 1 - c) if reverse else (lambda c: c)
        seq = lambda w, ix: pl.BlockSpec(  # noqa: E731
            (None, L, w), lambda g, x, y, c: (g, at(c), ix(x, y))
        )
        decays = pl.BlockSpec((None, None, 1, 1), lambda g, x, y, c: (g, at(c), 0, 0))
        starts = pl.BlockSpec((None, None, tk, tv), lambda g, x, y, c: (g, at(c), x, y))
    in_specs = [seq(tk, lambda x, y: x), seq(tv, lambda x, y: y), seq(1, lambda x, y: 0), decays,
                state]  # fmt: skip
    call = _call(
        kernel, cfg, grid, in_specs, [starts, state], shapes, [pltpu.VMEM((tk, tv), F32)],
        ("parallel", "parallel", "parallel", "arbitrary"), name,
    )  # fmt: skip
    return call(a, b, col, decay, state0)


def _chunk_specs(cfg: _Static, tile: int):
    """BlockSpecs of the per-chunk kernels, grid ``(G, nc, tiles)``: a chunk of tokens in full
    width or in the program's tile, a per-chunk row, a per-chunk state block (full or tiled)."""
    L = cfg.chunk
    full = lambda d: pl.BlockSpec((None, L, d), lambda g, c, x: (g, c, 0))  # noqa: E731
    mine = pl.BlockSpec((None, L, tile), lambda g, c, x: (g, c, x))
    row = pl.BlockSpec((None, None, 1, L), lambda g, c, x: (g, c, 0, 0))

    def state(rows, cols, tiled_axis):  # (G, nc, rows, cols), tiled along axis 2 or 3 (or none)
        block = [None, None, rows, cols]
        if tiled_axis is not None:
            block[tiled_axis] = tile
        return pl.BlockSpec(
            tuple(block),
            lambda g, c, x: (g, c) + tuple(x if a == tiled_axis else 0 for a in (2, 3)),
        )

    return full, mine, row, state


def _fit_tiles(Dk: int, Dv: int, chunk: int, dtype, block_d, style: Style, native: bool):
    """The head-dim tile (``block_d``, or from the shared-memory estimate on GPUs) and the
    padded ``(Dk, Dv)``: each dim a multiple of its tile, and on native GPUs a power of two
    >= 16 (Triton's tiles)."""
    if block_d is None and style == "tpu":
        block_d = max(Dk, Dv)
    if block_d is None:
        budget, block_d = smem_budget(), MIN_GPU_TILE
        for d in (128, 64, 32, 16):
            if max(mlstm_bytes(chunk, d, dtype).values()) <= budget:
                block_d = d
                break

    def fit(D):
        if D > block_d:
            return round_up(D, block_d), block_d
        Dp = max(MIN_GPU_TILE, pow2_at_least(D)) if native else D
        return Dp, Dp

    (Dkp, tk), (Dvp, tv) = fit(Dk), fit(Dv)
    return Dkp, Dvp, tk, tv


def _forward(q, k, v, i, f, C0, n0, m0, cfg: _Static):
    """The kernels on ``(G, S, .)`` operands (G = batch x heads; head dims padded to the tiles):
    ``h``, the final state and the backward's residuals (padded ``h``, per-token ``m_t`` and
    ``nq_t``, the chunk-start states and stabilisers)."""
    G, S, Dk = q.shape
    Dv = v.shape[-1]
    Dkp, Dvp = _padded_dims(cfg, Dk, Dv)
    L = cfg.chunk
    Sp = round_up(S, L)
    nc = Sp // L
    qs, kp, vp = _pad(q * Dk**-0.5, Sp, Dkp), _pad(k, Sp, Dkp), _pad(v, Sp, Dvp)
    i_p, b, w = _gates(i, f, L)
    C0p = jnp.pad(C0.astype(F32), ((0, 0), (0, Dkp - Dk), (0, Dvp - Dv)))
    n0p = jnp.pad(n0.astype(F32), ((0, 0), (0, Dkp - Dk)))
    m_start, m_final = _stabilisers(b, w, m0.astype(F32), L)
    m_end = jnp.concatenate([m_start[:, 1:], m_final[:, None]], axis=1)
    decay = jnp.exp(b.reshape(G, nc, L)[..., -1] + m_start - m_end)  # (G, nc)
    ks = jnp.exp(w.reshape(G, nc, L) - m_end[..., None])  # token weights in the chunk-end state
    Cs, Cf = _state_call(
        _state_kernel, cfg, (kp, vp), (ks.reshape(G, Sp, 1), decay[..., None, None]), C0p,
        reverse=False, name="mlstm_states",
    )  # fmt: skip
    # n is C with one value column: its recurrence is O(S Dk), in jnp (the same rounding of the
    # weighted keys as the state kernel's).
    kw = (ks[..., None] * kp.reshape(G, nc, L, Dkp).astype(F32)).astype(k.dtype).astype(F32)
    ns, nf = _linear_scan(decay, jnp.sum(kw, axis=2), n0p)

    full, mine, row, state = _chunk_specs(cfg, cfg.tile_v)
    out_shapes = [jax.ShapeDtypeStruct((G, Sp, d), F32) for d in (Dvp, 1, 1)]
    out_call = _call(
        _output_kernel, cfg, (G, nc, Dvp // cfg.tile_v),
        [full(Dkp), full(Dkp), mine, row, full(1), row, state(Dkp, Dvp, 3), state(1, Dkp, None),
         state(1, 1, None)],
        [mine, full(1), full(1)], out_shapes, [], ("parallel", "parallel", "arbitrary"),
        "mlstm_outputs",
    )  # fmt: skip
    ms = m_start[..., None, None]
    h, m_t, nq = out_call(qs, kp, vp, _row(i_p, L), _col(b), _row(b, L), Cs, ns[:, :, None], ms)
    final = (Cf[:, :Dk, :Dv], nf[:, :Dk], m_final)
    return h[:, :S, :Dv], final, (h, m_t, nq, Cs, ns, m_start, m_final)


def _padded_dims(cfg: _Static, Dk: int, Dv: int) -> tuple[int, int]:
    return round_up(Dk, cfg.tile_k), round_up(Dv, cfg.tile_v)


def _backward(cfg: _Static, q, k, v, i, f, C0, n0, m0, h, m_t, nq, Cs, ns, m_start, m_final, dh):
    """The backward kernels and the gate formulas (module docstring): the gradients of
    ``(q, k, v, i, f, C0, n0, m0)`` for the cotangent ``dh`` of ``h``."""
    G, S, Dk = q.shape
    Dv = v.shape[-1]
    Dkp, Dvp = _padded_dims(cfg, Dk, Dv)
    L = cfg.chunk
    Sp = round_up(S, L)
    nc = Sp // L
    qs, kp, vp = _pad(q * Dk**-0.5, Sp, Dkp), _pad(k, Sp, Dkp), _pad(v, Sp, Dvp)
    i_p, b, w = _gates(i, f, L)
    # Per-token cotangents of the numerator and of the signed normaliser sum nq (padded rows: 0).
    floor = jnp.exp(-m_t)
    dnum = _pad(dh.astype(F32), Sp, Dvp) / (jnp.maximum(jnp.abs(nq), floor) + cfg.eps)
    hdnum = jnp.sum(h * dnum, axis=-1, keepdims=True)
    dnq = jnp.where(jnp.abs(nq) > floor, -jnp.sign(nq) * hdnum, 0.0)
    # O(S) weights from the saved stabilisers: w0 (chunk-start state in h_t), e (token s in the
    # chunk-end state), decay (chunk start to chunk end).
    m_end = jnp.concatenate([m_start[:, 1:], m_final[:, None]], axis=1)  # (G, nc)
    b_c, w_c = b.reshape(G, nc, L), w.reshape(G, nc, L)
    w0 = jnp.exp(b_c + m_start[..., None] - m_t.reshape(G, nc, L)).reshape(G, Sp, 1)
    e = jnp.exp(w_c - m_end[..., None]).reshape(G, Sp, 1)
    decay = jnp.exp(b_c[..., -1] + m_start - m_end)  # (G, nc)

    dCe, dC0 = _state_call(
        _dstate_kernel, cfg, (qs, dnum), (w0, decay[..., None, None]), jnp.zeros((G, Dkp, Dvp)),
        reverse=True, name="mlstm_dstates",
    )  # fmt: skip
    # dn is dC's one-column twin: dn at a chunk's start = decay · dn at its end + sum_t dnq w0 q.
    qw = (dnq * w0).reshape(G, nc, L, 1) * qs.reshape(G, nc, L, Dkp).astype(F32)
    dne, dn0 = _linear_scan(decay, jnp.sum(qw, axis=2), jnp.zeros((G, Dkp)), reverse=True)

    rows = (_row(i_p, L), _col(b), _row(b, L), m_t)
    full, mine, row, state = _chunk_specs(cfg, cfg.tile_k)
    dqk_call = _call(
        _dqk_kernel, cfg, (G, nc, Dkp // cfg.tile_k),
        [mine, mine, full(Dvp), full(Dvp), full(1), row, full(1), row, full(1), full(1), full(1),
         state(Dkp, Dvp, 2), state(1, Dkp, 3), state(Dkp, Dvp, 2), state(1, Dkp, 3)],
        [mine, mine], [jax.ShapeDtypeStruct((G, Sp, Dkp), F32)] * 2,
        [], ("parallel", "parallel", "parallel"), "mlstm_dqk",
    )  # fmt: skip
    dq, dk = dqk_call(qs, kp, vp, dnum, dnq, *rows, w0, e, Cs, ns[:, :, None], dCe, dne[:, :, None])
    full, mine, row, state = _chunk_specs(cfg, cfg.tile_v)
    dv_call = _call(
        _dv_kernel, cfg, (G, nc, Dvp // cfg.tile_v),
        [full(Dkp), full(Dkp), mine, row, full(1), row, full(1), full(1), state(Dkp, Dvp, 3)],
        [mine], [jax.ShapeDtypeStruct((G, Sp, Dvp), F32)], [],
        ("parallel", "parallel", "parallel"), "mlstm_dv",
    )  # fmt: skip
    (dv,) = dv_call(qs, kp, dnum, *rows, e, dCe)
    dq = dq[:, :S, :Dk] * Dk**-0.5
    return _gate_grads(
        q, k, f, C0, n0, dq, dk[:, :S, :Dk], dv[:, :S, :Dv], dC0[:, :Dk, :Dv], dn0[:, :Dk]
    )


def _gate_grads(q, k, f, C0, n0, dq, dk, dv, dC0, dn0):
    """``(dq, dk, dv, dC0, dn0)`` and the gate and ``m0`` gradients (module docstring)."""
    qf, kf = q.astype(F32), k.astype(F32)
    di = jnp.sum(kf * dk, axis=-1)
    dF = jnp.sum(qf * dq, axis=-1) - di
    dlf = jnp.flip(jnp.cumsum(jnp.flip(dF, -1), axis=-1), -1)
    df = dlf * jax.nn.sigmoid(-f.astype(F32))
    dm0 = jnp.sum(C0 * dC0, axis=(1, 2)) + jnp.sum(n0 * dn0, axis=1)
    return dq, dk, dv, di, df, dC0, dn0, dm0


def _state_update(k_SM, v_SE, w_S1, g_11, C_ME, n_1M, m_11):
    """The state after one chunk in jnp (module docstring, kernel 1); ``w`` = a + i, ``g`` the
    chunk's decay."""
    m_new = jnp.maximum(g_11 + m_11, jnp.max(w_S1, axis=0, keepdims=True))
    decay = jnp.exp(g_11 + m_11 - m_new)
    kw_SM = (jnp.exp(w_S1 - m_new) * k_SM.astype(F32)).astype(k_SM.dtype)
    full = lax.Precision.HIGHEST
    C_ME = decay * C_ME + jnp.einsum("sm,se->me", kw_SM, v_SE, precision=full)
    n_1M = decay * n_1M + jnp.sum(kw_SM.astype(F32), axis=0, keepdims=True)
    return C_ME, n_1M, m_new


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
    q: Float[Array, "B H T M"],
    k: Float[Array, "B H T M"],
    v: Float[Array, "B H T E"],
    i: Float[Array, "B H T"],
    f: Float[Array, "B H T"],
    *,
    initial_state: tuple | None = None,
    return_state: bool = False,
    eps: float = 1e-6,
    block_sizes: BlockSizes | None = None,
    backend: str | None = None,
    interpret: bool | None = None,
):
    """The mLSTM cell (module docstring) through the Pallas kernels.

    Args:
      q, k, v, i, f: as ``jaxlab.methods.xlstm.mlstm`` (q scaled by 1/sqrt(Dqk) here).
      initial_state: ``(C, n, m)`` of shapes (B, H, M, E), (B, H, M), (B, H); default zeros.
      return_state: also return the final state (without gradient).
      eps: added to the normaliser.
      block_sizes: the chunk length and head-dim tile; default :meth:`BlockSizes.for_backend`
        (its ``block_d=None`` fits the tile to the device).
      backend, interpret: kernel style and interpretation (:func:`resolve_backend`).

    Returns:
      ``h`` (B, H, T, E) in float32, and with ``return_state`` the final ``(C, n, m)``.
    """
    if q.ndim != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise KernelConfigError(
            f"mlstm_chunkwise: q, k (B, H, T, M) and v (B, H, T, E) expected; got {q.shape}, "
            f"{k.shape}, {v.shape}"
        )
    if i.shape != q.shape[:3] or f.shape != q.shape[:3]:
        raise KernelConfigError(f"mlstm_chunkwise: gates must be {q.shape[:3]}")
    style, interpret = resolve_backend(backend, interpret)
    blocks = block_sizes or BlockSizes.for_backend(style)
    if not isinstance(blocks, BlockSizes):
        raise KernelConfigError(f"block_sizes must be an mLSTM BlockSizes, got {blocks!r}")
    native_gpu = style == "gpu" and not interpret
    if native_gpu and min(blocks.chunk, blocks.block_d or MIN_GPU_TILE) < MIN_GPU_TILE:
        raise KernelConfigError(
            f"native GPU mLSTM needs chunk and block_d >= 16 (tl.dot); got {blocks}"
        )
    B, NH, S, Dk = q.shape
    Dv, G = v.shape[-1], B * NH
    dtype = jnp.promote_types(q.dtype, v.dtype)
    _, _, tk, tv = _fit_tiles(Dk, Dv, blocks.chunk, dtype, blocks.block_d, style, native_gpu)
    cfg = _Static(blocks.chunk, tk, tv, float(eps), style, interpret,
                  f32_precision(style, interpret))  # fmt: skip
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
    # The stabiliser's maximum is the entry at its argmax, so its gradient has one place to go:
    # jnp.max's divides by the count of entries equal to it, which is 0 (a NaN gradient) where XLA
    # recomputes D for the backward pass with other rounding (jaxlab.methods.xlstm.cell).
    top = jnp.take_along_axis(D, jnp.argmax(D, axis=-1, keepdims=True), axis=-1)[..., 0]
    m = jnp.where(top >= init, top, init)
    q = q * Dk**-0.5
    W = jnp.exp(D - m[..., None]) * jnp.einsum("bhtk,bhsk->bhts", q, k)
    w0 = jnp.exp(init - m)
    num = jnp.einsum("bhts,bhsv->bhtv", W, v) + w0[..., None] * jnp.einsum("bhtk,bhkv->bhtv", q, C0)
    den = jnp.sum(W, axis=-1) + w0 * jnp.einsum("bhtk,bhk->bht", q, n0)
    return num / (jnp.maximum(jnp.abs(den), jnp.exp(-m)) + eps)[..., None]
