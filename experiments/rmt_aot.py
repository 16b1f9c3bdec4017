"""The paper-size RMT and Transformer train steps compile for a 64-device mesh, FSDP sharding them.

Command:  python experiments/run.py --exp=rmt_aot              (``--smoke``: 8 devices, 1 layer)

A scale check without a pod (MaxText's AOT trick): the transformer and RMT train steps of the paper
presets (default: the 405M transformer and the 305M RMT) are lowered and compiled ahead of time for
a (data, fsdp) mesh of simulated CPU devices — nothing runs — and the per-device parameter +
optimizer bytes (about 1/devices of the total when FSDP shards every large array) and XLA's
per-device memory are written to ``summary.json``, one ``metrics.jsonl`` row per model. The device
count is fixed when JAX starts, so the compile runs in a child process with
``--xla_force_host_platform_device_count`` set (:func:`jaxlab.core.aot.run_with_devices`), unless
this process already has exactly that many devices.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

from jaxlab.core.aot import run_with_devices
from jaxlab.core.config import check
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter
from jaxlab.methods.rmt.aot import compile_paper_pairs


@dataclasses.dataclass(frozen=True)
class Config:
    pairs: tuple[str, ...] = ("405m:305m",)  # transformer:rmt paper presets
    devices: int = 64  # simulated CPU devices
    fsdp: int = 64  # the mesh's fsdp axis; data parallelism over the rest
    batch_size: int = 64
    num_layers: int = 0  # 0: the presets' depth
    seq_len: int = 0  # 0: the presets' 512

    def __post_init__(self) -> None:
        check(all(p.count(":") == 1 for p in self.pairs), "pairs must look like 405m:305m")
        check(self.devices > 0 and self.devices % self.fsdp == 0, "fsdp must divide devices")
        check(self.batch_size % self.devices == 0, "batch_size must be a multiple of devices")
        check(self.num_layers >= 0 and self.seq_len >= 0, "num_layers and seq_len must be >= 0")


PRESETS = {
    "default": lambda: Config(),
    "smoke": lambda: Config(
        pairs=("49m:46m",), devices=8, fsdp=8, batch_size=8, num_layers=1, seq_len=32
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("rmt_aot", PRESETS, preset)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    overrides = {k: v for k, v in (("num_layers", cfg.num_layers), ("seq_len", cfg.seq_len)) if v}
    job = functools.partial(
        compile_paper_pairs,
        cfg.pairs,
        fsdp=cfg.fsdp,
        batch_size=cfg.batch_size,
        overrides=overrides,
    )
    results = run_with_devices(job, cfg.devices)
    with MetricWriter(workdir, start_step=-1, tensorboard=False) as writer:  # a rerun rewrites
        for i, (name, res) in enumerate(results.items()):
            writer.write(i, {"model": name, **res})
    gib = 2.0**30
    headline = {
        f"{name} state per device": f"{r['state_bytes_per_device'] / 2**20:.1f} MiB "
        f"(1/{1 / r['sharded_fraction']:.1f} of {r['state_bytes'] / gib:.2f} GiB)"
        for name, r in results.items()
    }
    for name, r in results.items():
        headline[f"{name} XLA temporaries per device"] = (
            f"{r['temp_bytes_per_device'] / gib:.2f} GiB"
        )
    return {
        "headline": headline,
        "models": results,
        "max_sharded_fraction": max(r["sharded_fraction"] for r in results.values()),
        "max_temp_bytes_per_device": max(r["temp_bytes_per_device"] for r in results.values()),
    }
