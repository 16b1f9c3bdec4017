"""The sLSTM cell and layer (Beck et al., "xLSTM: Extended Long Short-Term Memory", NeurIPS 2024).

Scalar memory per unit with exponential gating and recurrent mixing (paper Sec. 2.2, Eqs. 8-17):
with input pre-activations ``W x + b`` for the cell input z, the gates i, f and the output gate o,
block-diagonal recurrent matrices R (one ``E x E`` block per head, so heads do not mix) and
``lf = log sigmoid(f~)``:

    m_t = max(lf_t + m_{t-1}, i~_t)            (stabiliser, Eq. 15)
    c_t = exp(lf_t + m_{t-1} - m_t) c_{t-1} + exp(i~_t - m_t) tanh(z~_t)
    n_t = exp(lf_t + m_{t-1} - m_t) n_{t-1} + exp(i~_t - m_t)
    h_t = sigmoid(o~_t) * c_t / n_t

where every pre-activation ``x~_t = W_x x_t + R_x h_{t-1} + b_x``. The recurrence through h makes
the cell inherently sequential: :func:`slstm` is a ``lax.scan``. It is not part of xLSTM 7B (an
mLSTM-only model); :class:`sLSTMLayer` lets a config place sLSTM blocks among the mLSTM ones
(``xLSTMConfig.slstm_blocks``), as the original xLSTM[a:b] models do. At a document start the
forget gate is closed and the recurrent input ``h_{t-1}`` zeroed, so documents stay independent.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float

from jaxlab.methods.xlstm.cell import NEG
from jaxlab.methods.xlstm.norm import MultiHeadNorm
from jaxlab.nn.init import weight_std

__all__ = ["SLSTMState", "sLSTMLayer", "slstm", "zero_slstm_state"]

F32 = jnp.float32


class SLSTMState(NamedTuple):
    """``c``, ``n``, ``m``, ``h``, each (B, H, E), float32."""

    c: Array
    n: Array
    m: Array
    h: Array


def zero_slstm_state(B: int, H: int, E: int) -> SLSTMState:
    """A fresh zero buffer per field (a donated cache must not hold one buffer twice)."""
    return SLSTMState(*(jnp.zeros((B, H, E), F32) for _ in range(4)))


def slstm(
    pre_BT4HE: Float[Array, "B T 4 H E"],
    R_4HEE: Float[Array, "4 H E E"],
    reset_BT: Array | None = None,
    state: SLSTMState | None = None,
) -> tuple[Float[Array, "B T H E"], SLSTMState]:
    """Runs the sLSTM over T steps; ``pre`` holds ``W x + b`` for (z, i, f, o), in that order."""
    B, T, _, H, E = pre_BT4HE.shape
    if state is None:
        state = zero_slstm_state(B, H, E)
    if reset_BT is None:
        reset_BT = jnp.zeros((B, T), bool)
    R = R_4HEE.astype(F32)

    def step(state, xs):
        pre_B4HE, reset_B = xs
        h_prev = jnp.where(reset_B[:, None, None], 0.0, state.h)
        rec_B4HE = jnp.einsum("bhd,ghde->bghe", h_prev, R)
        z, i, f, o = jnp.moveaxis(pre_B4HE.astype(F32) + rec_B4HE, 1, 0)
        lf = jnp.where(reset_B[:, None, None], NEG, jax.nn.log_sigmoid(f))
        m = jnp.maximum(lf + state.m, i)
        decay, inp = jnp.exp(lf + state.m - m), jnp.exp(i - m)
        c = decay * state.c + inp * jnp.tanh(z)
        n = decay * state.n + inp
        h = jax.nn.sigmoid(o) * c / n
        return SLSTMState(c, n, m, h), h

    state, h_TBHE = jax.lax.scan(step, state, (jnp.moveaxis(pre_BT4HE, 1, 0), reset_BT.T))
    return jnp.moveaxis(h_TBHE, 0, 1), state


class sLSTMLayer(nnx.Module):  # noqa: N801
    """``out(MultiHeadNorm(sLSTM(W x + b)))`` with block-diagonal recurrence, H heads of D/H."""

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        D, H = cfg.d_model, cfg.num_heads
        E = D // H
        linear = cfg.linear_factory()
        self.inp = linear(D, 4 * D, std=weight_std(cfg.init, D), axes=("embed", "mlp"), rngs=rngs)
        std_out = weight_std(cfg.init, D, residual_layers=cfg.num_layers)
        self.out = linear(D, D, std=std_out, axes=("heads", "embed"), rngs=rngs)
        self.R = nnx.Param(jax.random.normal(rngs.params(), (4, H, E, E), F32) * E**-0.5 / 2)
        bias = np.zeros((4, H, E), np.float32)
        bias[2] = np.linspace(*cfg.fgate_bias_range, H)[:, None]  # forget gates start open
        self.bias = nnx.Param(jnp.asarray(bias))
        self.norm = MultiHeadNorm(H, E, cfg.norm_eps, cfg.param_dtype, rngs)
        self.heads, self.dh = H, E

    def __call__(self, x_BTD, reset_BT, state=None):
        B, T, _ = x_BTD.shape
        pre = self.inp(x_BTD).astype(F32).reshape(B, T, 4, self.heads, self.dh) + self.bias[...]
        h_BTHE, state = slstm(pre, self.R[...], reset_BT, state)
        return self.out(self.norm(h_BTHE).astype(x_BTD.dtype)), state
