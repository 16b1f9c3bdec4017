"""A tiny xLSTM checkpoint in the authors' layout, written from their code, not from jaxlab.

The names and shapes follow NX-AI/xlstm ``xlstm/xlstm_large/model.py`` (``xLSTMLarge``: PyTorch
``Linear`` weights stored ``(out, in)``, q/k widths ``int(embedding_dim * qk_dim_factor)``, the
FFN width ``embedding_dim * ffn_proj_factor`` rounded up to ``ffn_round_up_to_multiple_of``,
per-head gate pre-activations with biases, flat RMSNorm and multi-head norm weights) and the
Hugging Face ``xLSTMForCausalLM`` that wraps it (embedding ``backbone.embeddings.weight``, head
``lm_head.weight``); the index file is the one Hugging Face writes. :func:`authors_tensors` gives
the tensors by those names, so a float64 reference that reads the authors' names can take the
same dict; :func:`write_checkpoint` writes them where ``load_pretrained`` reads.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

__all__ = ["TINY_CONFIG", "authors_tensors", "write_checkpoint"]

# The fields of the authors' config.json (Hugging Face's xLSTMConfig), at a CPU size.
TINY_CONFIG: dict[str, Any] = {
    "architectures": ["xLSTMForCausalLM"],
    "model_type": "xlstm",
    "vocab_size": 64,
    "embedding_dim": 32,
    "num_blocks": 2,
    "num_heads": 4,
    "use_bias": False,
    "norm_reduction_force_float32": True,
    "tie_word_embeddings": False,
    "add_out_norm": True,
    "norm_eps": 1e-6,
    "qk_dim_factor": 0.5,
    "v_dim_factor": 1.0,
    "chunkwise_kernel": "chunkwise--triton_xl_chunk",
    "sequence_kernel": "native_sequence__triton",
    "step_kernel": "triton",
    "mode": "inference",
    "chunk_size": 4,
    "return_last_states": True,
    "autocast_kernel_dtype": "bfloat16",
    "eps": 1e-6,
    "inference_state_dtype": "float32",
    "ffn_proj_factor": 2.667,
    "ffn_round_up_to_multiple_of": 16,
    "gate_soft_cap": 15.0,
    "output_logit_soft_cap": 30.0,
    "weight_mode": "single",
    "torch_dtype": "float32",
    "use_cache": True,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "pad_token_id": 1,
}


def authors_tensors(config: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 tensors with the authors' names and shapes for ``config`` (single weight
    mode): projections N(0, 1/in), norm weights near 1, gate biases near the 7B's init."""
    rng = np.random.default_rng(seed)
    E, NH, V = config["embedding_dim"], config["num_heads"], config["vocab_size"]
    qk, v = int(E * config["qk_dim_factor"]), int(E * config["v_dim_factor"])
    multiple = config["ffn_round_up_to_multiple_of"]
    ff = int(math.ceil(E * config["ffn_proj_factor"] / multiple) * multiple)

    def linear(out_dim, in_dim):  # torch.nn.Linear.weight: (out_features, in_features)
        return rng.normal(0, in_dim**-0.5, (out_dim, in_dim))

    def norm(n):
        return 1 + 0.1 * rng.normal(size=n)

    t = {"backbone.embeddings.weight": rng.normal(size=(V, E))}
    for i in range(config["num_blocks"]):
        b = f"backbone.blocks.{i}."
        t |= {
            b + "norm_mlstm.weight": norm(E),
            b + "mlstm_layer.q.weight": linear(qk, E),
            b + "mlstm_layer.k.weight": linear(qk, E),
            b + "mlstm_layer.v.weight": linear(v, E),
            b + "mlstm_layer.ogate_preact.weight": linear(v, E),
            b + "mlstm_layer.igate_preact.weight": linear(NH, E),
            b + "mlstm_layer.igate_preact.bias": rng.normal(-2, 1, NH),
            b + "mlstm_layer.fgate_preact.weight": linear(NH, E),
            b + "mlstm_layer.fgate_preact.bias": np.linspace(3, 6, NH),
            b + "mlstm_layer.multihead_norm.weight": norm(v),
            b + "mlstm_layer.out_proj.weight": linear(E, v),
            b + "norm_ffn.weight": norm(E),
            b + "ffn.proj_up_gate.weight": linear(ff, E),
            b + "ffn.proj_up.weight": linear(ff, E),
            b + "ffn.proj_down.weight": linear(E, ff),
        }
    t |= {"backbone.out_norm.weight": norm(E), "lm_head.weight": linear(V, E)}
    return {name: array.astype(np.float32) for name, array in t.items()}


def write_checkpoint(
    directory: str | pathlib.Path,
    config: dict[str, Any],
    tensors: dict[str, np.ndarray],
    *,
    num_shards: int = 2,
) -> pathlib.Path:
    """``config.json``, ``num_shards`` safetensors shards and ``model.safetensors.index.json``
    (``{"metadata": {"total_size": ...}, "weight_map": {name: file}}``) in ``directory``."""
    from safetensors.numpy import save_file

    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    weight_map = {}
    for n, part in enumerate(np.array_split(np.arange(len(names)), num_shards)):
        file = f"model-{n + 1:05d}-of-{num_shards:05d}.safetensors"
        save_file({names[j]: tensors[names[j]] for j in part}, directory / file)
        weight_map.update({names[j]: file for j in part})
    total = int(sum(a.nbytes for a in tensors.values()))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory
