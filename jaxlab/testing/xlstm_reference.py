"""A float64 numpy reference of the xLSTM 7B language model, independent of jaxlab's model code.

Written from the xLSTM 7B paper (Beck et al., ICML 2025, Sec. 2-3 and App. A) and the authors'
released model (NX-AI/xlstm, ``xlstm/xlstm_large/model.py`` and ``components.py``), not from
:mod:`jaxlab.methods.xlstm`: it imports nothing from jaxlab, takes its weights as a dict of numpy
arrays named and laid out as the authors' PyTorch modules name them (``"backbone.blocks.0.
mlstm_layer.q.weight"``, a ``(out, in)`` matrix; the ``"single"`` weight mode of their checkpoints)
and its shapes from a dict with the field names of their ``xLSTMLargeConfig``. So a test can feed
it the same weights as jaxlab's model (or the same file as a checkpoint loader) and compare logits.
Everything is float64; the mLSTM cell is the stabilised recurrence run token by token from the
state ``(C, n, m) = (0, 0, 0)`` (the authors' step and chunkwise kernels; paper Sec. 2), so a
decode step with a carried state is the same loop continued.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

__all__ = [
    "ReferenceConfig",
    "block_forward",
    "mlstm_recurrence",
    "model_forward",
    "random_weights",
    "weight_shapes",
]

State = tuple[np.ndarray, np.ndarray, np.ndarray]  # C (B, NH, Dqk, Dv), n (B, NH, Dqk), m (B, NH)


@dataclasses.dataclass(frozen=True)
class ReferenceConfig:
    """The shape fields of the authors' ``xLSTMLargeConfig`` (same names, same defaults), the
    ones that change the forward pass at float64. :meth:`from_dict` ignores the kernel and
    dtype fields of their ``config.json``."""

    embedding_dim: int
    num_heads: int
    num_blocks: int
    vocab_size: int
    qk_dim_factor: float = 0.5
    v_dim_factor: float = 1.0
    ffn_proj_factor: float = 2.6667
    ffn_round_up_to_multiple_of: int = 64
    gate_soft_cap: float = 15.0
    output_logit_soft_cap: float = 30.0
    norm_eps: float = 1e-6
    eps: float = 1e-6  # the cell's normaliser

    @classmethod
    def from_dict(cls, fields: Mapping) -> ReferenceConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in fields.items() if k in names})

    @property
    def qk_dim(self) -> int:
        return int(self.embedding_dim * self.qk_dim_factor)

    @property
    def v_dim(self) -> int:
        return int(self.embedding_dim * self.v_dim_factor)

    @property
    def ffn_dim(self) -> int:
        """``round_up(E * ffn_proj_factor, multiple)``, the authors' SwiGLU width rule."""
        m = self.ffn_round_up_to_multiple_of
        return int((self.embedding_dim * self.ffn_proj_factor + m - 1) // m * m)


def weight_shapes(cfg: ReferenceConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the authors' model (``weight_mode="single"``, no biases but the two
    gates'), by name, with its shape (PyTorch ``nn.Linear`` weights are ``(out, in)``)."""
    E, NH, qk, v, ff, V = (
        cfg.embedding_dim, cfg.num_heads, cfg.qk_dim, cfg.v_dim, cfg.ffn_dim, cfg.vocab_size
    )  # fmt: skip
    shapes = {"embedding.weight": (V, E)}
    for n in range(cfg.num_blocks):
        b = f"backbone.blocks.{n}."
        shapes |= {
            b + "norm_mlstm.weight": (E,),
            b + "mlstm_layer.q.weight": (qk, E),
            b + "mlstm_layer.k.weight": (qk, E),
            b + "mlstm_layer.v.weight": (v, E),
            b + "mlstm_layer.ogate_preact.weight": (v, E),
            b + "mlstm_layer.igate_preact.weight": (NH, E),
            b + "mlstm_layer.igate_preact.bias": (NH,),
            b + "mlstm_layer.fgate_preact.weight": (NH, E),
            b + "mlstm_layer.fgate_preact.bias": (NH,),
            b + "mlstm_layer.multihead_norm.weight": (v,),
            b + "mlstm_layer.out_proj.weight": (E, v),
            b + "norm_ffn.weight": (E,),
            b + "ffn.proj_up_gate.weight": (ff, E),
            b + "ffn.proj_up.weight": (ff, E),
            b + "ffn.proj_down.weight": (E, ff),
        }
    return shapes | {"backbone.out_norm.weight": (E,), "lm_head.weight": (V, E)}


def random_weights(cfg: ReferenceConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float64 weights under which every part of the model matters: matrices of scale
    ``1/sqrt(fan_in)``, norm weights around 1, gate pre-activations spread over about +-20 (so the
    soft-cap at 15 bends some) with the input-gate biases around the released model's -10 and
    the forget-gate biases around its 3..6, and an unembedding large enough that the logit cap at
    30 bends the largest logits."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in weight_shapes(cfg).items():
        if "norm" in name:
            w = 1.0 + 0.3 * rng.standard_normal(shape)
        elif name.endswith("igate_preact.bias"):
            w = -10.0 + 3.0 * rng.standard_normal(shape)
        elif name.endswith("fgate_preact.bias"):
            w = np.linspace(3.0, 6.0, shape[0]) + rng.standard_normal(shape)
        elif "gate_preact.weight" in name and "ogate" not in name:
            w = 8.0 * rng.standard_normal(shape) / np.sqrt(shape[1])
        elif name == "embedding.weight":
            w = rng.standard_normal(shape)
        elif name == "lm_head.weight":
            w = 15.0 * rng.standard_normal(shape) / np.sqrt(shape[1])
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[1])
        weights[name] = w.astype(np.float64)
    return weights


def _soft_cap(x: np.ndarray, cap: float | None) -> np.ndarray:
    """``cap * tanh(x / cap)`` (the authors' ``soft_cap``; paper Sec. 3.2); None or 0: none."""
    return cap * np.tanh(x / cap) if cap else x


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis (their ``RMSNorm``)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _multihead_layer_norm(h_BTHE: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Each head's channels centred and scaled by their biased variance, heads concatenated, then
    the weight (their ``MultiHeadLayerNorm``, no bias; paper Sec. 3.1)."""
    centred = h_BTHE - h_BTHE.mean(axis=-1, keepdims=True)
    normed = centred / np.sqrt(np.mean(centred**2, axis=-1, keepdims=True) + eps)
    B, T = h_BTHE.shape[:2]
    return normed.reshape(B, T, -1) * weight


def _linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """PyTorch's ``nn.Linear``: ``x W^T (+ b)``."""
    y = x @ weight.T
    return y if bias is None else y + bias


def mlstm_recurrence(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, i: np.ndarray, f: np.ndarray,
    state: State | None = None, eps: float = 1e-6,
) -> tuple[np.ndarray, State]:  # fmt: skip
    """The mLSTM cell, one token at a time (7B paper Sec. 2; the authors' recurrent step)::

        m_t = max(log sigmoid(f_t) + m_{t-1}, i_t)
        C_t = exp(log sigmoid(f_t) + m_{t-1} - m_t) C_{t-1} + exp(i_t - m_t) k_t v_t^T
        n_t = exp(log sigmoid(f_t) + m_{t-1} - m_t) n_{t-1} + exp(i_t - m_t) k_t
        h_t = C_t^T q_t' / (max(|n_t^T q_t'|, exp(-m_t)) + eps),    q_t' = q_t / sqrt(Dqk)

    Args:
      q, k: ``(B, NH, S, Dqk)``; v: ``(B, NH, S, Dv)``; i, f: gate pre-activations ``(B, NH, S)``
        (after the soft-cap).
      state: ``(C, n, m)`` before the first token; default zeros.

    Returns:
      ``h`` ``(B, NH, S, Dv)`` and the state after the last token.
    """
    B, NH, S, Dqk = q.shape
    Dv = v.shape[-1]
    if state is None:
        state = (np.zeros((B, NH, Dqk, Dv)), np.zeros((B, NH, Dqk)), np.zeros((B, NH)))
    C, n, m = (np.array(x, np.float64) for x in state)
    h = np.zeros((B, NH, S, Dv))
    for t in range(S):
        log_f = -np.logaddexp(0.0, -f[:, :, t])  # log sigmoid, stable for both signs
        m_new = np.maximum(log_f + m, i[:, :, t])
        decay, gain = np.exp(log_f + m - m_new), np.exp(i[:, :, t] - m_new)
        C = decay[..., None, None] * C + gain[..., None, None] * np.einsum(
            "bhk,bhv->bhkv", k[:, :, t], v[:, :, t]
        )
        n = decay[..., None] * n + gain[..., None] * k[:, :, t]
        m = m_new
        q_t = q[:, :, t] / np.sqrt(Dqk)
        num = np.einsum("bhkv,bhk->bhv", C, q_t)
        den = np.maximum(np.abs(np.einsum("bhk,bhk->bh", n, q_t)), np.exp(-m)) + eps
        h[:, :, t] = num / den[..., None]
    return h, (C, n, m)


def _mlstm_layer(w, prefix, x_BTD, cfg: ReferenceConfig, state):
    """The authors' ``mLSTMLayer.forward`` (``weight_mode="single"``; paper Sec. 3.1)."""
    B, T, _ = x_BTD.shape
    NH = cfg.num_heads

    def heads(y):  # (B, T, NH*E) -> (B, NH, T, E)
        return y.reshape(B, T, NH, -1).transpose(0, 2, 1, 3)

    q, k, v = (heads(_linear(x_BTD, w[prefix + name + ".weight"])) for name in "qkv")
    o_pre = _linear(x_BTD, w[prefix + "ogate_preact.weight"])
    # Per-head scalar gates with biases, soft-capped at 15 (paper Sec. 3.2), as (B, NH, S).
    i_pre, f_pre = (
        _soft_cap(_linear(x_BTD, w[f"{prefix}{g}gate_preact.weight"],
                          w[f"{prefix}{g}gate_preact.bias"]), cfg.gate_soft_cap).transpose(0, 2, 1)
        for g in "if"
    )  # fmt: skip
    h_BHTE, state = mlstm_recurrence(q, k, v, i_pre, f_pre, state, cfg.eps)
    h = _multihead_layer_norm(
        h_BHTE.transpose(0, 2, 1, 3), w[prefix + "multihead_norm.weight"], cfg.norm_eps
    )
    sigmoid_o = 1.0 / (1.0 + np.exp(-o_pre))
    return _linear(sigmoid_o * h, w[prefix + "out_proj.weight"]), state


def block_forward(
    weights: Mapping[str, np.ndarray], n: int, x_BTD: np.ndarray, cfg: ReferenceConfig,
    state: State | None = None,
) -> tuple[np.ndarray, State]:  # fmt: skip
    """Block ``n`` (the authors' ``mLSTMBlock``; paper Sec. 3, Fig. 1): the pre-RMSNorm, the
    mLSTM layer and the residual, then the pre-RMSNorm, the SwiGLU ``proj_down(silu(proj_up_gate
    x) * proj_up x)`` and the residual. Returns the block's output and its cell state."""
    b = f"backbone.blocks.{n}."
    y, state = _mlstm_layer(
        weights, b + "mlstm_layer.", _rms_norm(x_BTD, weights[b + "norm_mlstm.weight"],
                                               cfg.norm_eps), cfg, state,
    )  # fmt: skip
    x_BTD = x_BTD + y
    z = _rms_norm(x_BTD, weights[b + "norm_ffn.weight"], cfg.norm_eps)
    gate = _linear(z, weights[b + "ffn.proj_up_gate.weight"])
    silu = gate / (1.0 + np.exp(-gate))
    up = _linear(z, weights[b + "ffn.proj_up.weight"])
    return x_BTD + _linear(silu * up, weights[b + "ffn.proj_down.weight"]), state


def model_forward(
    weights: Mapping[str, np.ndarray], tokens_BT: np.ndarray, cfg: ReferenceConfig,
    states: list[State] | None = None,
) -> tuple[np.ndarray, list[State]]:  # fmt: skip
    """The authors' ``xLSTMLarge.forward``: embedding, the blocks, the output RMSNorm, the untied
    ``lm_head`` and the logit soft-cap at 30. ``states`` (one per block) continues a sequence, so
    one token with the states of a prefix is a decode step. Returns float64 logits ``(B, T, V)``
    and the blocks' states after the last token."""
    w = {name: np.asarray(x, np.float64) for name, x in weights.items()}
    x = w["embedding.weight"][np.asarray(tokens_BT)]
    states = list(states) if states is not None else [None] * cfg.num_blocks
    for n in range(cfg.num_blocks):
        x, states[n] = block_forward(w, n, x, cfg, states[n])
    x = _rms_norm(x, w["backbone.out_norm.weight"], cfg.norm_eps)
    return _soft_cap(_linear(x, w["lm_head.weight"]), cfg.output_logit_soft_cap), states
