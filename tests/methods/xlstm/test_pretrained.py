"""Loading the authors' checkpoint layout (:mod:`jaxlab.methods.xlstm.pretrained`).

The checkpoint is written by :mod:`jaxlab.testing.xlstm_checkpoint` from the authors' names and
shapes (not jaxlab's). Each projection of the loaded model is checked against PyTorch's
``Linear`` convention ``x W^T + b`` on the named tensor (so a transposed square matrix fails);
the fused weight mode gives the single mode's logits; scanned, looped and mesh-sharded loads agree;
every refusal is one line; and jaxlab's own parameters survive ``save_pretrained`` ->
``load_pretrained`` bit for bit.
"""

import json

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import MeshConfig, make_mesh
from jaxlab.methods.xlstm import load_pretrained, save_pretrained, xLSTM, xLSTMConfig
from jaxlab.testing.xlstm_checkpoint import TINY_CONFIG, authors_tensors, write_checkpoint
from jaxlab.testing.xlstm_reference import ReferenceConfig, model_forward

TOKENS = jax.random.randint(jax.random.key(0), (2, 11), 0, TINY_CONFIG["vocab_size"])
TENSORS = authors_tensors(TINY_CONFIG)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("authors"), TINY_CONFIG, TENSORS)


@pytest.fixture(scope="module")
def loop_model(checkpoint):
    return load_pretrained(checkpoint, scan_blocks=False)


# (authors' name in block 1, the jaxlab module, has a bias)
LINEARS = [
    ("mlstm_layer.q", lambda b: b.mlstm.q, False),
    ("mlstm_layer.k", lambda b: b.mlstm.k, False),
    ("mlstm_layer.v", lambda b: b.mlstm.v, False),
    ("mlstm_layer.ogate_preact", lambda b: b.mlstm.ogate, False),
    ("mlstm_layer.out_proj", lambda b: b.mlstm.out, False),
    ("ffn.proj_up_gate", lambda b: b.mlp.gate, False),
    ("ffn.proj_up", lambda b: b.mlp.up, False),
    ("ffn.proj_down", lambda b: b.mlp.down, False),
]


@pytest.mark.parametrize(
    "name,module", [(n, m) for n, m, _ in LINEARS], ids=[n for n, *_ in LINEARS]
)
def test_projections_follow_torch_linear(loop_model, name, module):
    w = TENSORS[f"backbone.blocks.1.{name}.weight"].astype(np.float64)
    x = np.random.default_rng(1).normal(size=(3, w.shape[1]))
    got = module(loop_model.blocks[1])(jnp.asarray(x, jnp.float32)[None])[0]
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gate", ["igate", "fgate"])
def test_gates_follow_torch_linear_with_bias(loop_model, gate):
    w = TENSORS[f"backbone.blocks.0.mlstm_layer.{gate}_preact.weight"].astype(np.float64)
    b = TENSORS[f"backbone.blocks.0.mlstm_layer.{gate}_preact.bias"].astype(np.float64)
    x = np.random.default_rng(2).normal(size=(1, 3, w.shape[1]))
    cap = TINY_CONFIG["gate_soft_cap"]
    got = getattr(loop_model.blocks[0].mlstm, gate)(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(got, cap * np.tanh((x @ w.T + b) / cap), rtol=1e-5, atol=1e-5)


def test_norms_embedding_and_head_are_copied(loop_model):
    t = TENSORS
    np.testing.assert_array_equal(loop_model.embed.embedding[...], t["backbone.embeddings.weight"])
    np.testing.assert_array_equal(loop_model.unembed.kernel[...], t["lm_head.weight"].T)
    np.testing.assert_array_equal(loop_model.out_norm.scale[...], t["backbone.out_norm.weight"])
    block = loop_model.blocks[1]
    for got, name in [
        (block.norm_mlstm.scale, "norm_mlstm.weight"),
        (block.norm_ffn.scale, "norm_ffn.weight"),
        (block.mlstm.norm.scale, "mlstm_layer.multihead_norm.weight"),
    ]:
        np.testing.assert_array_equal(got[...], t[f"backbone.blocks.1.{name}"])


def test_config_maps_onto_jaxlab(loop_model):
    cfg = loop_model.cfg
    c = TINY_CONFIG
    assert (cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.vocab_size) == (
        c["embedding_dim"], c["num_blocks"], c["num_heads"], c["vocab_size"],
    )  # fmt: skip
    assert cfg.ff_dim == TENSORS["backbone.blocks.0.ffn.proj_up.weight"].shape[0]
    assert (cfg.gate_soft_cap, cfg.logit_soft_cap, cfg.chunk_size) == (15.0, 30.0, 4)


def test_scanned_sharded_and_fused_loads_agree(checkpoint, loop_model, tmp_path):
    want = loop_model(TOKENS)
    assert bool(jnp.all(jnp.isfinite(want)))
    scanned = load_pretrained(checkpoint)  # the default: blocks scanned, as the 7B preset
    assert scanned.cfg.scan_blocks
    np.testing.assert_allclose(scanned(TOKENS), want, rtol=1e-5, atol=1e-5)

    mesh = make_mesh(MeshConfig(data=2, fsdp=4))
    sharded = load_pretrained(checkpoint, mesh=mesh)
    kernel = sharded.blocks.mlstm.v.kernel[...]  # (layers, embed, heads): embed over fsdp
    assert kernel.sharding.spec[1] == "fsdp" and len(kernel.sharding.device_set) == 8
    np.testing.assert_allclose(sharded(TOKENS), want, rtol=1e-5, atol=1e-5)

    fused = {}
    for name, array in TENSORS.items():  # the authors' "fused" mode: parts concatenated
        for parts, into in [
            (("q", "k", "v", "ogate_preact"), "qkv_opreact"),
            (("igate_preact", "fgate_preact"), "ifgate_preact"),
        ]:
            for kind in ("weight", "bias"):
                if name.endswith(f"mlstm_layer.{parts[0]}.{kind}"):
                    prefix = name[: -len(f"{parts[0]}.{kind}")]
                    pieces = [TENSORS.get(f"{prefix}{p}.{kind}") for p in parts]
                    if all(p is not None for p in pieces):
                        fused[f"{prefix}{into}.{kind}"] = np.concatenate(pieces)
        if name.endswith("ffn.proj_up_gate.weight"):
            prefix = name[: -len("proj_up_gate.weight")]
            fused[prefix + "proj_up_gate_z.weight"] = np.concatenate(
                [array, TENSORS[prefix + "proj_up.weight"]]
            )
        singles = ("q.", "k.", "v.", "ogate_preact.", "igate_preact.", "fgate_preact.")
        if not any(f"mlstm_layer.{s}" in name for s in singles) and "proj_up" not in name:
            fused[name] = array
    config = {**TINY_CONFIG, "weight_mode": "fused"}
    fused_dir = write_checkpoint(tmp_path / "fused", config, fused, num_shards=3)
    np.testing.assert_allclose(load_pretrained(fused_dir)(TOKENS), want, rtol=1e-5, atol=1e-5)


def _refusal(tmp_path, config=TINY_CONFIG, tensors=TENSORS):
    directory = write_checkpoint(tmp_path / "bad", config, tensors)
    with pytest.raises(ConfigError) as info:
        load_pretrained(directory)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_tensor_is_refused(tmp_path):
    tensors = dict(TENSORS)
    del tensors["backbone.blocks.1.mlstm_layer.fgate_preact.bias"]
    assert "backbone.blocks.1.mlstm_layer.fgate_preact.bias is missing" in _refusal(
        tmp_path, tensors=tensors
    )


def test_unknown_tensor_is_refused(tmp_path):
    tensors = {**TENSORS, "backbone.blocks.0.mlstm_layer.conv1d.weight": np.zeros(3, np.float32)}
    assert "unknown tensor backbone.blocks.0.mlstm_layer.conv1d.weight" in _refusal(
        tmp_path, tensors=tensors
    )


def test_extra_block_is_refused(tmp_path):
    tensors = {**TENSORS, "backbone.blocks.2.norm_ffn.weight": np.ones(32, np.float32)}
    assert "unknown tensor backbone.blocks.2.norm_ffn.weight" in _refusal(tmp_path, tensors=tensors)


def test_shape_mismatch_is_refused(tmp_path):
    tensors = {**TENSORS, "backbone.blocks.0.mlstm_layer.v.weight": np.zeros((32, 16), np.float32)}
    message = _refusal(tmp_path, tensors=tensors)
    assert "mlstm_layer.v.weight has shape (32, 16), the config needs (32, 32)" in message


@pytest.mark.parametrize(
    "change,match",
    [
        ({"use_bias": True}, "use_bias=True is not modelled"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings=True is not modelled"),
        ({"add_out_norm": False}, "add_out_norm=False is not modelled"),
        ({"slstm_at": [1]}, r"unknown keys \['slstm_at'\]"),
        ({"weight_mode": "packed"}, "weight_mode='packed' is unknown"),
        ({"num_heads": 5}, "num_heads=5 must divide"),
    ],
)
def test_config_it_cannot_map_is_refused(tmp_path, change, match):
    with pytest.raises(ConfigError, match=match):
        load_pretrained(write_checkpoint(tmp_path / "bad", {**TINY_CONFIG, **change}, TENSORS))


def test_missing_files_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    with pytest.raises(ConfigError, match="neither model.safetensors.index.json"):
        load_pretrained(tmp_path)


@pytest.mark.parametrize("scan", [False, True], ids=["loop", "scanned"])
def test_save_then_load_round_trip(tmp_path, scan):
    cfg = xLSTMConfig(vocab_size=64, seq_len=16, num_layers=2, d_model=32, num_heads=4,
                      chunk_size=4, ffn_multiple=16, scan_blocks=scan)  # fmt: skip
    model = xLSTM(cfg, rngs=nnx.Rngs(3))
    save_pretrained(model, tmp_path, max_shard_bytes=40_000)  # several shards
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    loaded = load_pretrained(tmp_path, scan_blocks=scan, seq_len=16)
    assert loaded.cfg == cfg
    jax.tree.map(np.testing.assert_array_equal, nnx.to_pure_dict(nnx.state(loaded)),
                 nnx.to_pure_dict(nnx.state(model)))  # fmt: skip
    np.testing.assert_array_equal(loaded(TOKENS), model(TOKENS))


def test_bfloat16_checkpoint_loads_as_float32(tmp_path):
    """Checkpoints stored in bfloat16 read through ml_dtypes and cast to the parameter dtype."""
    tensors = {name: array.astype(ml_dtypes.bfloat16) for name, array in TENSORS.items()}
    model = load_pretrained(write_checkpoint(tmp_path, TINY_CONFIG, tensors), scan_blocks=False)
    kernel = model.blocks[0].mlstm.q.kernel[...]
    assert kernel.dtype == jnp.float32
    want = tensors["backbone.blocks.0.mlstm_layer.q.weight"].astype(np.float32).T
    np.testing.assert_array_equal(kernel, want)


@pytest.mark.parametrize("form", ["recurrent", "chunkwise"])
def test_loaded_checkpoint_matches_the_float64_reference(x64, tmp_path, form):
    """The loader against the authors' model written independently (jaxlab.testing.xlstm_reference),
    both reading the same file by the authors' names, at the released eps = 1e-6."""
    config = TINY_CONFIG
    directory = write_checkpoint(tmp_path, config, TENSORS)
    model = load_pretrained(
        directory, scan_blocks=False, cell_form=form, dtype="float64", param_dtype="float64"
    )
    got = np.asarray(model(TOKENS))
    weights = {("embedding.weight" if k.endswith("embeddings.weight") else k): v
               for k, v in TENSORS.items()}  # fmt: skip
    want, _ = model_forward(weights, np.asarray(TOKENS), ReferenceConfig.from_dict(config))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * np.abs(want).max())
