"""The authors' µP recipe for the structured ICL models: per-layer AdamW learning rates, as optax
parameter groups, and the initial scales the models build with under ``parametrization="mup"``.

Kuang et al. 2025 train every ICL model through ``muPify`` (``src/muP.py``, called by
``train_ICL.py``), which follows Yang et al. 2022 ("Tensor Programs V", Table 3, Adam column):
each parameter gets the learning rate ``lr * base / fan_in`` and is re-initialised:

* input weights — the read-in and the position table (their ``_read_in.weight``, ``wpe``):
  ``fan_in = 1`` and ``base = 1`` (rate ``lr``), N(0, 0.02²) (their ``c_read_in``, ``c_wpe``);
* LayerNorm scales (``ln_1``, ``ln_2``, ``ln_f``, ``ln_q``, ``ln_k``, the bilinear BTT/MLR
  LayerNorms): rate ``lr``, ones;
* hidden matrices — dense q, k, v and the MLP's first map (``c_attn_*``, ``c_fc``), the BTT cores
  (``bilinear_btt_wk`` ``(c, d, H b s)``: fan-in ``d``; ``bilinear_btt_wq`` ``(H b, a, c s)``:
  fan-in ``c s``), the MLR factors (``bilinear_mlr_wq/wk`` ``(p_l, D / p_l, H r_l)``: fan-in
  ``D / p_l``): rate ``lr * 768 / fan_in``, N(0, 1/fan_in);
* output maps — the attention's and the MLP's second map (``c_proj``) and the read-out
  (``_read_out``): rate ``lr * 768 / fan_in``, zeros.

``768`` is their ``base_width_factor`` (:data:`MUP_BASE_WIDTH`), so ``train.learning_rate`` means
what their ``--training_learning_rate`` means. In jaxlab the parameter names map onto these
classes as :func:`mup_fan_in` says; the inits are built by the models themselves
(:class:`~jaxlab.methods.structured_attention.icl_model.ICLConfig`'s ``parametrization``).
Weight decay is 0 in their ICL runs, so the decay mask does not matter there.
"""

from __future__ import annotations

import jax
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.core.optim import LrGroups, lr_groups_from_multipliers, param_path
from jaxlab.nn.linear import btt_blocks

__all__ = [
    "MUP_BASE_WIDTH",
    "MUP_INPUT_STD",
    "mup_fan_in",
    "mup_lr_groups",
    "mup_multipliers",
]

MUP_BASE_WIDTH = 768  # the authors' base_width_factor of every matrix
MUP_INPUT_STD = 0.02  # the authors' c_read_in = c_wpe: read-in and position init scale

_INPUTS = {("read_in", "kernel"), ("positions",)}


def mup_fan_in(path: tuple[str, ...], shape: tuple[int, ...]) -> int | None:
    """The fan-in ``muPify`` gives the parameter at ``path`` (:func:`jaxlab.core.optim.param_path`
    of an ICL or retrieval model), or ``None`` for the ones it trains at the base rate (input
    weights and LayerNorm scales).

    Raises:
      ConfigError: a parameter this recipe does not know (as theirs raises "not compatible").
    """
    name = path[-1]
    if path in _INPUTS or name == "scale":
        return None
    if name == "kernel":  # dense maps store (in, out)
        return shape[0]
    if name == "first":  # BTT first core (d_in, m2 s): n1 blocks of n2 inputs, their W_K's d
        return btt_blocks(shape[0])[1]
    if name == "second":  # BTT second core (n1 s, d_out): their W_Q's c s
        return shape[0]
    if len(path) >= 2 and path[-2] in ("wq", "wk"):  # MLR level l: (D, H r_l), 2^l blocks
        return shape[0] // 2 ** int(name)
    raise ConfigError(f"µP recipe: no rule for parameter {'/'.join(path)} of shape {shape}")


def mup_multipliers(
    model: nnx.Module, base_width: int = MUP_BASE_WIDTH
) -> dict[tuple[str, ...], float]:
    """Learning-rate multiplier of every parameter of ``model`` (concrete or from
    ``nnx.eval_shape``): ``base_width / fan_in``, or 1 where :func:`mup_fan_in` is ``None``."""
    state = nnx.state(model, nnx.Param)
    out = {}
    for p, leaf in jax.tree_util.tree_leaves_with_path(state):
        path = param_path(p)
        fan_in = mup_fan_in(path, tuple(leaf.shape))
        out[path] = 1.0 if fan_in is None else base_width / fan_in
    return out


def mup_lr_groups(model: nnx.Module, base_width: int = MUP_BASE_WIDTH) -> LrGroups:
    """``(labels, multipliers)`` for :func:`jaxlab.core.optim.make_optimizer` (an
    ``optax.multi_transform`` with one AdamW per multiplier) from :func:`mup_multipliers`."""
    return lr_groups_from_multipliers(mup_multipliers(model, base_width))
