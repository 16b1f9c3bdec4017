"""The xLSTM 7B train step compiles for a 64-device mesh, FSDP sharding its parameters.

Command:  python experiments/run.py --exp=xlstm_aot            (``--smoke``: 8 devices, tiny model)

A scale check without a pod: the train step of ``xLSTMConfig.xlstm_7b()`` (its 32 blocks scanned,
``scan_blocks``, with remat on every block; the paper's 8192-token rows) is lowered and compiled
ahead of time for a (data, fsdp) mesh of simulated CPU devices, from abstract inputs — nothing
runs — and the per-device parameter + optimizer bytes and XLA's per-device memory
(``memory_analysis()``) go to ``summary.json``. The device count is fixed when
JAX starts, so the compile runs in a child process (:func:`jaxlab.core.aot.run_with_devices`).
The step uses jaxlab's three memory options, each with the plain path as its reference: the
chunked cross-entropy (``loss_chunk``), the SwiGLU per block of tokens (``ffn_chunk``) and
two-level rematerialisation of the scanned blocks (``remat_group``); setting all three to 0
compiles the step as it was before them. Claim: the temporaries fit a 16 GiB chip with a quarter
of it free beside the state (figures in the method README).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

from jaxlab.core.aot import run_with_devices
from jaxlab.core.config import check
from jaxlab.core.experiment import select_preset
from jaxlab.core.mesh import MeshConfig
from jaxlab.core.metrics import MetricWriter
from jaxlab.lm.task import compile_lm_train_step
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig


@dataclasses.dataclass(frozen=True)
class Config:
    devices: int = 64
    fsdp: int = 64
    batch_size: int = 64
    seq_len: int = 8192  # the paper's pre-training rows
    tiny: bool = False  # the smoke model instead of the 7B
    # Changes to the 7B for measuring what the temporaries scale with (README): the preset's values.
    scan_blocks: bool = True
    num_layers: int = 32
    d_ff: int = 10944
    vocab_size: int = 50304
    chunk_size: int = 64
    # The two memory peaks (README): the loss's logits and the SwiGLU's hidden activations, each
    # computed per block of this many tokens (0: all at once, as before).
    loss_chunk: int = 1024
    ffn_chunk: int = 1024
    # Blocks per outer checkpoint of two-level remat (0: each block's input is saved).
    remat_group: int = 4

    def __post_init__(self) -> None:
        check(self.devices % self.fsdp == 0, "fsdp must divide devices")
        check(self.batch_size % self.devices == 0, "batch_size must be a multiple of devices")


PRESETS = {
    "default": lambda: Config(),
    "smoke": lambda: Config(
        devices=8,
        fsdp=8,
        batch_size=8,
        seq_len=32,
        tiny=True,
        loss_chunk=8,
        ffn_chunk=8,
        remat_group=2,
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("xlstm_aot", PRESETS, preset)


def model_config(cfg: Config) -> xLSTMConfig:
    if cfg.tiny:
        return xLSTMConfig(
            seq_len=cfg.seq_len, num_layers=2, d_model=64, num_heads=4, remat=True,
            scan_blocks=True, ffn_chunk=cfg.ffn_chunk, remat_group=cfg.remat_group,
        )  # fmt: skip
    return xLSTMConfig.xlstm_7b(
        seq_len=cfg.seq_len, remat=True, cell_form="chunkwise", scan_blocks=cfg.scan_blocks,
        num_layers=cfg.num_layers, d_ff=cfg.d_ff, vocab_size=cfg.vocab_size,
        chunk_size=cfg.chunk_size, ffn_chunk=cfg.ffn_chunk, remat_group=cfg.remat_group,
    )  # fmt: skip


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    mesh = MeshConfig(data=cfg.devices // cfg.fsdp, fsdp=cfg.fsdp)
    job = functools.partial(
        compile_lm_train_step, xLSTM, model_config(cfg), batch_size=cfg.batch_size,
        mesh_cfg=mesh, loss_chunk=cfg.loss_chunk,
    )  # fmt: skip
    res = run_with_devices(job, cfg.devices)
    # XLA's cost analysis counts a while loop's body once, so with scanned blocks its figure holds
    # one block; the analytic count (3x forward, no recomputation) is the whole step.
    tokens_per_device = cfg.batch_size * cfg.seq_len / cfg.devices
    res["analytic_train_flops_per_device"] = (
        model_config(cfg).flops_per_token().train * tokens_per_device
    )
    with MetricWriter(workdir, start_step=-1, tensorboard=False) as writer:  # a rerun rewrites
        writer.write(0, {"model": "xlstm_7b" if not cfg.tiny else "tiny", **res})
    gib = 2.0**30
    return {
        "result": res,
        "headline": {
            "state per device": f"{res['state_bytes_per_device'] / 2**20:.1f} MiB "
            f"(1/{1 / res['sharded_fraction']:.1f} of {res['state_bytes'] / gib:.2f} GiB)",
            "XLA temporaries per device": f"{res['temp_bytes_per_device'] / gib:.2f} GiB",
            "devices": res["num_devices"],
            "seq_len": cfg.seq_len,
            "scanned blocks": model_config(cfg).scan_blocks,
            "batch_size": cfg.batch_size,
            "loss_chunk": cfg.loss_chunk,
            "ffn_chunk": cfg.ffn_chunk,
            "remat_group": cfg.remat_group,
        },
    }
