"""Kuang et al.'s ``muPify`` (``src/muP.py``) for their ICL model, written from their code: the
parameter names and torch shapes of ``GPTforICLRegression`` (``src/models/icl_models.py``,
``bias=False`` as in ``train_ICL.py``), and their name-matching rules, in their order, giving each
parameter an init and a learning-rate multiplier ``base_width_factor / fan_in``. Nothing here
calls jaxlab."""

import math


def factorize(x):
    """Their ``BilinearBTTAttention.factorize(x, 2)``."""
    bigger = next(f for f in range(1, x + 1) if x % f == 0 and f > math.sqrt(x))
    return x // bigger, bigger


def param_shapes(n_dims, d_model, n_layer, n_head, struct, ranks=(), btt_rank=1):
    """``{name: torch shape}`` of their ICL model; Linear weights are ``(out, in)``."""
    D, H, s = d_model, n_head, btt_rank
    shapes = {"_read_in.weight": (D, n_dims), "_backbone.wpe.weight": (4 * n_dims, D)}
    for i in range(n_layer):
        h = f"_backbone.h.{i}."
        shapes |= {h + "ln_1.weight": (D,), h + "ln_2.weight": (D,)}
        shapes |= {h + "mlp.c_fc.weight": (4 * D, D), h + "mlp.c_proj.weight": (D, 4 * D)}
        shapes |= {h + "attn.c_attn_v.weight": (D, D), h + "attn.c_proj.weight": (D, D)}
        if struct == "low_rank":
            dqk = D // H
            shapes |= {
                h + "attn.c_attn_q.weight": (H * dqk, D),
                h + "attn.c_attn_k.weight": (H * dqk, D),
            }
            shapes |= {h + "attn.ln_q.weight": (dqk,), h + "attn.ln_k.weight": (dqk,)}
        elif struct == "bilinear_BTT":
            a, b = c, d = factorize(D)
            shapes[h + "attn.bilinear_btt_wk.weight"] = (c, d, H * b * s)
            shapes[h + "attn.bilinear_btt_wq.weight"] = (H * b, a, c * s)
            shapes[h + "attn.bilinear_btt_ln_PLPRXT.weight"] = (D,)
        else:  # bilinear_MLR
            for lv, r in enumerate(ranks):
                p = 2**lv
                for side in ("wq", "wk"):
                    shapes[h + f"attn.bilinear_mlr_{side}.{lv}.weight"] = (p, D // p, H * r)
                    shapes[h + f"attn.bilinear_mlr_ln_{side}.{lv}.weight"] = (r * p,)
    shapes |= {"_backbone.ln_f.weight": (D,), "_read_out.weight": (1, D)}
    return shapes


_LN = ["ln_1.weight", "ln_2.weight", "ln_f.weight", "ln_q.weight", "ln_k.weight",
       "bilinear_mlr_ln_wq", "bilinear_mlr_ln_wk", "bilinear_btt_ln_PLPRXT.weight"]  # fmt: skip
_HIDDEN = ["attn.c_attn_q.weight", "attn.c_attn_k.weight", "attn.c_attn_v.weight",
           "mlp.c_fc.weight"]  # fmt: skip
_OUTPUT = ["attn.c_proj.weight", "mlp.c_proj.weight"]


def mupify(name, shape):
    """``(init, lr multiplier)`` of one parameter by their rules (the branches their ICL model
    reaches, in their order); init is ``("normal", std)``, ``("zeros",)`` or ``("ones",)``."""
    if "wpe" in name:
        return ("normal", 0.02), 1.0
    if any(n in name for n in _LN):
        return ("ones",), 1.0
    if any(n in name for n in _HIDDEN):
        fan_in = shape[1]
        return ("normal", fan_in**-0.5), 768 / fan_in
    if "attn.bilinear_mlr_wq" in name or "attn.bilinear_mlr_wk" in name:
        fan_in = shape[1]  # (p_l, m_lk, H r_l)
        return ("normal", fan_in**-0.5), 768 / fan_in
    if name.endswith("attn.bilinear_btt_wk.weight"):
        fan_in = shape[1]  # (c, d, H b s)
        return ("normal", fan_in**-0.5), 768 / fan_in
    if name.endswith("attn.bilinear_btt_wq.weight"):
        fan_in = shape[2]  # (H b, a, c s)
        return ("normal", fan_in**-0.5), 768 / fan_in
    if any(n in name for n in _OUTPUT):
        return ("zeros",), 768 / shape[1]
    if "_read_in.weight" in name:
        return ("normal", 0.02), 1.0
    if "_read_out.weight" in name:
        return ("zeros",), 768 / shape[1]
    raise ValueError(f"{name} not compatible")
