"""The released xLSTM 7B weights: :func:`load_pretrained` and its inverse :func:`save_pretrained`.

The authors publish the trained model (Hugging Face ``NX-AI/xLSTM-7b``) as a ``config.json``
with the fields of their ``xLSTMLargeConfig`` (NX-AI/xlstm, ``xlstm/xlstm_large/model.py``; the
Hugging Face ``xLSTMConfig`` adds its own housekeeping keys) and safetensors shards listed in
``model.safetensors.index.json`` (or one ``model.safetensors``). The tensors carry the names of
their PyTorch modules: ``backbone.blocks.{i}.mlstm_layer.q.weight`` and so on, with the embedding
as ``backbone.embeddings.weight`` (Hugging Face's ``xLSTMModel``) or ``embedding.weight``
(``xLSTMLarge``). :data:`TENSORS` maps each onto jaxlab's parameters: a PyTorch ``Linear`` stores
``(out, in)`` and computes ``x W^T``, jaxlab's kernels are ``(in, out)``, so every projection is
transposed; norms, gate biases and the embedding are copied, cast to ``param_dtype`` (a
bfloat16 checkpoint reads through ``ml_dtypes``). The authors' ``"fused"`` weight mode
(one ``qkv_opreact`` for q, k, v and the output gate, one ``ifgate_preact``, one
``proj_up_gate_z``) is split on load. Tensors are read with safetensors' numpy API, so no torch
is needed. Anything that does not map is refused in one line (:class:`ConfigError`): a missing
tensor, an unknown one, a shape mismatch, or a config field whose value jaxlab does not model
(biases in the linear maps, tied embeddings, no output norm). The kernel choices of the config
(``chunkwise_kernel``, ``mode``, ...) are the authors' PyTorch backends and are ignored: jaxlab's
cell forms compute the same cell.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import AxisRules, state_shardings
from jaxlab.methods.xlstm.config import round_up, xLSTMConfig
from jaxlab.methods.xlstm.model import xLSTM

__all__ = ["TENSORS", "load_pretrained", "pretrained_config", "save_pretrained"]

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"

# The authors' config keys -> xLSTMConfig fields.
CONFIG_FIELDS = {
    "embedding_dim": "d_model",
    "num_heads": "num_heads",
    "num_blocks": "num_layers",
    "vocab_size": "vocab_size",
    "norm_eps": "norm_eps",
    "qk_dim_factor": "qk_dim_factor",
    "v_dim_factor": "v_dim_factor",
    "chunk_size": "chunk_size",
    "eps": "cell_eps",
    "ffn_proj_factor": "ffn_factor",
    "ffn_round_up_to_multiple_of": "ffn_multiple",
    "gate_soft_cap": "gate_soft_cap",
    "output_logit_soft_cap": "logit_soft_cap",
}
# Keys whose value must be this one for the weights to mean what jaxlab's model computes.
REQUIRED = {"use_bias": False, "add_out_norm": True, "tie_word_embeddings": False}
# The authors' PyTorch kernel and runtime choices, and Hugging Face's bookkeeping: no effect on
# what the model computes.
IGNORED = frozenset(
    {
        "chunkwise_kernel", "sequence_kernel", "step_kernel", "mode", "return_last_states",
        "autocast_kernel_dtype", "inference_state_dtype", "norm_reduction_force_float32",
        "weight_mode", "max_inference_chunksize", "mlstm_round_up_to_multiple_of",
        "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "use_cache",
        "bos_token_id", "eos_token_id", "pad_token_id", "force_bos_token_insert", "_name_or_path",
    }
)  # fmt: skip

# jaxlab parameter path (inside one block for the per-block entries) -> (the authors' tensor
# name, whether the PyTorch Linear weight is transposed). Per-block names follow
# ``backbone.blocks.{i}.``; the embedding's is resolved by _embedding_name.
BLOCK_TENSORS: dict[tuple[str, ...], tuple[str, bool]] = {
    ("norm_mlstm", "scale"): ("norm_mlstm.weight", False),
    ("mlstm", "q", "kernel"): ("mlstm_layer.q.weight", True),
    ("mlstm", "k", "kernel"): ("mlstm_layer.k.weight", True),
    ("mlstm", "v", "kernel"): ("mlstm_layer.v.weight", True),
    ("mlstm", "ogate", "kernel"): ("mlstm_layer.ogate_preact.weight", True),
    ("mlstm", "igate", "kernel"): ("mlstm_layer.igate_preact.weight", True),
    ("mlstm", "igate", "bias"): ("mlstm_layer.igate_preact.bias", False),
    ("mlstm", "fgate", "kernel"): ("mlstm_layer.fgate_preact.weight", True),
    ("mlstm", "fgate", "bias"): ("mlstm_layer.fgate_preact.bias", False),
    ("mlstm", "norm", "scale"): ("mlstm_layer.multihead_norm.weight", False),
    ("mlstm", "out", "kernel"): ("mlstm_layer.out_proj.weight", True),
    ("norm_ffn", "scale"): ("norm_ffn.weight", False),
    ("mlp", "gate", "kernel"): ("ffn.proj_up_gate.weight", True),
    ("mlp", "up", "kernel"): ("ffn.proj_up.weight", True),
    ("mlp", "down", "kernel"): ("ffn.proj_down.weight", True),
}
MODEL_TENSORS: dict[tuple[str, ...], tuple[str, bool]] = {
    ("embed", "embedding"): ("backbone.embeddings.weight", False),
    ("out_norm", "scale"): ("backbone.out_norm.weight", False),
    ("unembed", "kernel"): ("lm_head.weight", True),
}
TENSORS = {**MODEL_TENSORS, **{("blocks", "{i}", *k): v for k, v in BLOCK_TENSORS.items()}}
EMBEDDING_NAMES = ("backbone.embeddings.weight", "embedding.weight")

# The "fused" weight mode: a fused tensor -> its parts, split in this order along the output axis.
FUSED = {
    "mlstm_layer.qkv_opreact.weight": ("q", "k", "v", "ogate_preact"),
    "mlstm_layer.ifgate_preact.weight": ("igate_preact", "fgate_preact"),
    "mlstm_layer.ifgate_preact.bias": ("igate_preact", "fgate_preact"),
    "ffn.proj_up_gate_z.weight": ("proj_up_gate", "proj_up"),
}


def pretrained_config(config: Mapping[str, Any], **overrides: Any) -> xLSTMConfig:
    """The :class:`xLSTMConfig` of an authors' ``config.json`` (a dict), plus jaxlab's
    execution options in ``overrides`` (``dtype``, ``cell_form``, ``scan_blocks``, ...).

    Raises:
      ConfigError: a key jaxlab does not know, or a value it does not model.
    """
    unknown = sorted(set(config) - set(CONFIG_FIELDS) - set(REQUIRED) - IGNORED)
    if unknown:
        raise ConfigError(f"xLSTM config.json: unknown keys {unknown}; jaxlab cannot map them")
    for key, want in REQUIRED.items():
        if config.get(key, want) != want:
            raise ConfigError(
                f"xLSTM config.json: {key}={config[key]} is not modelled (needs {want})"
            )
    if config.get("weight_mode", "single") not in ("single", "fused"):
        raise ConfigError(f"xLSTM config.json: weight_mode={config['weight_mode']!r} is unknown")
    fields = {CONFIG_FIELDS[k]: v for k, v in config.items() if k in CONFIG_FIELDS}
    cfg = xLSTMConfig(**{"scan_blocks": True, **fields, **overrides})
    multiple = config.get("mlstm_round_up_to_multiple_of")
    for name, factor in (("qk_dim", cfg.qk_dim_factor), ("v_dim", cfg.v_dim_factor)):
        width = cfg.d_model * factor
        if multiple and -(-width // multiple) * multiple != getattr(cfg, name):
            raise ConfigError(
                f"xLSTM config.json: {name} rounds up to a multiple of {multiple}, which jaxlab's "
                f"int(embedding_dim * factor) = {getattr(cfg, name)} does not"
            )
    if cfg.linear != "dense" or cfg.slstm_blocks:
        raise ConfigError("load_pretrained: the released model has dense maps and no sLSTM blocks")
    return cfg


def _read_config(directory: pathlib.Path) -> dict[str, Any]:
    path = directory / "config.json"
    if not path.is_file():
        raise ConfigError(f"load_pretrained: no config.json in {directory}")
    return json.loads(path.read_text())


def _shard_files(directory: pathlib.Path) -> dict[str, pathlib.Path]:
    """Tensor name -> the shard file holding it, from the index (or the single file)."""
    from safetensors import safe_open

    index = directory / INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: directory / file for name, file in weight_map.items()}
    if (directory / SINGLE).is_file():
        with safe_open(directory / SINGLE, framework="np") as f:
            return dict.fromkeys(f.keys(), directory / SINGLE)
    raise ConfigError(f"load_pretrained: neither {INDEX} nor {SINGLE} in {directory}")


def _read_tensors(directory: pathlib.Path) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    files = _shard_files(directory)
    tensors = {}
    for file in sorted(set(files.values())):
        if not file.is_file():
            raise ConfigError(f"load_pretrained: the index names {file.name}, which is missing")
        with safe_open(file, framework="np") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has keys(), no iteration)
                tensors[name] = f.get_tensor(name)
    missing_files = sorted(n for n in files if n not in tensors)
    if missing_files:
        raise ConfigError(f"load_pretrained: the index lists {missing_files[0]}, no shard holds it")
    return tensors


def _unfuse(tensors: dict[str, np.ndarray], cfg: xLSTMConfig) -> dict[str, np.ndarray]:
    """The "fused" weight mode's tensors split into the "single" mode's names."""
    sizes = {
        "q": cfg.qk_dim, "k": cfg.qk_dim, "v": cfg.v_dim, "ogate_preact": cfg.v_dim,
        "igate_preact": cfg.num_heads, "fgate_preact": cfg.num_heads,
        "proj_up_gate": cfg.ff_dim, "proj_up": cfg.ff_dim,
    }  # fmt: skip
    out = {}
    for name, array in tensors.items():
        fused = next((f for f in FUSED if name.endswith("." + f)), None)
        if fused is None:
            out[name] = array
            continue
        parts, prefix = FUSED[fused], name[: -len(fused)]
        cuts = np.cumsum([sizes[p] for p in parts])
        if array.shape[0] != cuts[-1]:
            raise ConfigError(
                f"load_pretrained: {name} has shape {array.shape}, expected {cuts[-1]} rows"
            )
        module = fused.rsplit(".", 2)[0]  # mlstm_layer or ffn
        for part, piece in zip(parts, np.split(array, cuts[:-1]), strict=True):
            out[f"{prefix}{module}.{part}.{fused.rsplit('.', 1)[1]}"] = piece
    return out


def _embedding_name(tensors: Mapping[str, Any]) -> str:
    present = [n for n in EMBEDDING_NAMES if n in tensors]
    if len(present) != 1:
        raise ConfigError(
            f"load_pretrained: expected one embedding tensor of {EMBEDDING_NAMES}, found {present}"
        )
    return present[0]


def _names(cfg: xLSTMConfig, embedding: str) -> dict[tuple, tuple[str, bool]]:
    """jaxlab path (with the block index) -> (the authors' name, transposed) for every tensor."""
    names = {path: spec for path, spec in MODEL_TENSORS.items()}
    names[("embed", "embedding")] = (embedding, False)
    for i in range(cfg.num_layers):
        for path, (name, transposed) in BLOCK_TENSORS.items():
            names[("blocks", i, *path)] = (f"backbone.blocks.{i}.{name}", transposed)
    return names


def _get(tree: Mapping, path: tuple) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


def load_pretrained(
    directory: str | pathlib.Path, mesh: jax.sharding.Mesh | None = None, **overrides: Any
) -> xLSTM:
    """The authors' checkpoint in ``directory`` as an :class:`xLSTM` (blocks scanned by default).

    Args:
      directory: holds ``config.json`` and ``model.safetensors.index.json`` with its shards (or
        one ``model.safetensors``), as Hugging Face's ``NX-AI/xLSTM-7b`` does.
      mesh: when given, every parameter is placed with the sharding of its logical axes under
        :class:`jaxlab.core.mesh.AxisRules` (as the training loop places them); otherwise on the
        default device.
      overrides: jaxlab execution options for :func:`pretrained_config` (``dtype``,
        ``param_dtype``, ``cell_form``, ``scan_blocks``, ``chunk_size``, ...).

    Raises:
      ConfigError: in one line, for a config it cannot map, a missing, unknown or misshapen tensor.
    """
    directory = pathlib.Path(directory)
    config = _read_config(directory)
    cfg = pretrained_config(config, **overrides)
    tensors = _read_tensors(directory)
    if config.get("weight_mode", "single") == "fused":
        tensors = _unfuse(tensors, cfg)
    names = _names(cfg, _embedding_name(tensors))
    wanted = {name for name, _ in names.values()}
    missing = sorted(wanted - set(tensors))
    if missing:
        raise ConfigError(
            f"load_pretrained: tensor {missing[0]} is missing ({len(missing)} in all)"
        )
    unknown = sorted(set(tensors) - wanted)
    if unknown:
        raise ConfigError(f"load_pretrained: unknown tensor {unknown[0]} ({len(unknown)} in all)")

    abstract = nnx.eval_shape(lambda: xLSTM(cfg, rngs=nnx.Rngs(0)))
    state = nnx.state(abstract)
    like = nnx.to_pure_dict(state)
    values = jax.tree.map(lambda _: None, like)
    per_block = cfg.scan_blocks
    if per_block:  # one stacked array per block parameter, filled block by block
        values["blocks"] = jax.tree.map(lambda x: np.empty(x.shape, x.dtype), like["blocks"])
    for path, (name, transposed) in names.items():
        stored = tensors.pop(name)  # freed once copied: one copy of the weights on the host
        array = stored.T if transposed else stored
        target_path = (path[0], *path[2:]) if per_block and path[0] == "blocks" else path
        target = _get(like, target_path)
        shape = target.shape[1:] if per_block and path[0] == "blocks" else target.shape
        if array.shape != shape:
            raise ConfigError(
                f"load_pretrained: {name} has shape {stored.shape}, the config needs "
                f"{shape[::-1] if transposed else shape}"
            )
        array = np.asarray(array, dtype=target.dtype)
        if per_block and path[0] == "blocks":
            _get(values, target_path)[path[1]] = array
        else:
            _set(values, target_path, array)
    if mesh is not None:
        shardings = nnx.to_pure_dict(state_shardings(state, mesh, AxisRules()))
        values = jax.tree.map(jax.device_put, values, shardings)
    else:
        values = jax.tree.map(jax.numpy.asarray, values)
    nnx.replace_by_pure_dict(state, values)
    nnx.update(abstract, state)
    return abstract


def authors_config(cfg: xLSTMConfig) -> dict[str, Any]:
    """The authors' ``config.json`` fields of a jaxlab config (the inverse of
    :func:`pretrained_config` on the fields that matter)."""
    config = {key: getattr(cfg, field) for key, field in CONFIG_FIELDS.items()}
    return {**config, **REQUIRED, "weight_mode": "single", "ffn_proj_factor": cfg.ffn_factor}


def save_pretrained(
    model: xLSTM, directory: str | pathlib.Path, *, max_shard_bytes: int = 5 * 2**30
) -> None:
    """Writes ``model`` in the authors' layout (``config.json``, safetensors shards of at most
    ``max_shard_bytes`` and ``model.safetensors.index.json``), which :func:`load_pretrained`
    reads back; float32, names as in :data:`TENSORS`, the embedding as Hugging Face names it."""
    from safetensors.numpy import save_file

    cfg = model.cfg
    derived = round_up(cfg.ffn_factor * cfg.d_model, cfg.ffn_multiple)
    if cfg.ff_dim != derived or cfg.linear != "dense" or cfg.slstm_blocks:
        raise ConfigError(
            "save_pretrained: the authors' layout holds dense mLSTM-only models whose d_ff is "
            f"round_up(ffn_factor * d_model, ffn_multiple) = {derived}"
        )
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    params = jax.tree.map(np.asarray, nnx.to_pure_dict(nnx.state(model)))
    tensors = {}
    for path, (name, transposed) in _names(cfg, EMBEDDING_NAMES[0]).items():
        if cfg.scan_blocks and path[0] == "blocks":
            array = _get(params, (path[0], *path[2:]))[path[1]]
        else:
            array = _get(params, path)
        tensors[name] = np.ascontiguousarray(array.T if transposed else array, np.float32)
    shards: list[dict[str, np.ndarray]] = [{}]
    for name, array in tensors.items():
        if (
            shards[-1]
            and sum(a.nbytes for a in shards[-1].values()) + array.nbytes > max_shard_bytes
        ):
            shards.append({})
        shards[-1][name] = array
    weight_map = {}
    for n, shard in enumerate(shards):
        file = f"model-{n + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, directory / file, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file))
    total = sum(a.nbytes for a in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX).write_text(json.dumps(index, indent=2))
    (directory / "config.json").write_text(json.dumps(authors_config(cfg), indent=2))
