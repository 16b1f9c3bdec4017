"""The xLSTM 7B train step compiles for a 64-device mesh, FSDP sharding its parameters.

Command:  python experiments/run.py --exp=xlstm_aot            (``--smoke``: 8 devices, tiny model)

A scale check without a pod: the train step of ``xLSTMConfig.xlstm_7b()`` (remat on every block)
is lowered and compiled ahead of time for a (data, fsdp) mesh of simulated CPU devices, from
abstract inputs — nothing runs — and the per-device parameter + optimizer bytes and XLA's
per-device memory (``memory_analysis()``) go to ``summary.json``. The device count is fixed when
JAX starts, so the compile runs in a child process (:func:`jaxlab.core.aot.run_with_devices`).
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
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.nn.lm_task import compile_lm_train_step


@dataclasses.dataclass(frozen=True)
class Config:
    devices: int = 64
    fsdp: int = 64
    batch_size: int = 64
    seq_len: int = 2048  # the paper pre-trains at 8192; shorter keeps the CPU compile short
    tiny: bool = False  # the smoke model instead of the 7B

    def __post_init__(self) -> None:
        check(self.devices % self.fsdp == 0, "fsdp must divide devices")
        check(self.batch_size % self.devices == 0, "batch_size must be a multiple of devices")


PRESETS = {
    "default": lambda: Config(),
    "smoke": lambda: Config(devices=8, fsdp=8, batch_size=8, seq_len=32, tiny=True),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("xlstm_aot", PRESETS, preset)


def model_config(cfg: Config) -> xLSTMConfig:
    if cfg.tiny:
        return xLSTMConfig(seq_len=cfg.seq_len, num_layers=1, d_model=64, num_heads=4, remat=True)
    return xLSTMConfig.xlstm_7b(seq_len=cfg.seq_len, remat=True, cell_form="chunkwise")


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    mesh = MeshConfig(data=cfg.devices // cfg.fsdp, fsdp=cfg.fsdp)
    job = functools.partial(
        compile_lm_train_step, xLSTM, model_config(cfg), batch_size=cfg.batch_size, mesh_cfg=mesh
    )
    res = run_with_devices(job, cfg.devices)
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
            "batch_size": cfg.batch_size,
        },
    }
