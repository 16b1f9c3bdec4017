"""A small baseline Transformer LM learns the shipped KJV corpus well below its unigram entropy.

Command:  python experiments/run.py --exp=lm_baseline        (``--smoke``: under a minute)
Result:   the headline printed at the end: validation bits per byte against the unigram entropy
          of the validation books (measured numbers: the root README's method table)

The baseline decoder-only Transformer (:mod:`jaxlab.nn.transformer`) trains on byte-level King James
Bible text packed into rows with document masking; validation books are never trained on. The
floor to beat is the unigram byte entropy of the validation text (what a model that ignores context
can reach). ``--set preset=paper`` gives the RMT paper's 405M baseline shape (V = 50257, N = 512)
for accelerators; on the byte corpus its vocabulary is set to 256.
"""

from __future__ import annotations

import dataclasses
import pathlib

from flax import nnx

from jaxlab.core.config import TrainConfig, to_dict
from jaxlab.core.experiment import select_preset
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import MeshConfig
from jaxlab.core.metrics import read_metrics
from jaxlab.core.plots import plot_curves
from jaxlab.data.text import VOCAB_SIZE, unigram_entropy_bits
from jaxlab.nn.layers import count_params
from jaxlab.nn.lm_task import LMTask
from jaxlab.nn.transformer import Transformer, TransformerConfig


@dataclasses.dataclass(frozen=True)
class Config:
    model: TransformerConfig
    train: TrainConfig
    mesh: MeshConfig = MeshConfig()
    data: str = "kjv"
    z_loss: float = 0.0  # z-loss coefficient of the LM objective (not in the reported loss)


PRESETS = {
    "default": lambda: Config(
        model=TransformerConfig(seq_len=128, num_layers=4, d_model=128, num_heads=4),
        train=TrainConfig(
            steps=600,
            batch_size=16,
            learning_rate=3e-3,
            warmup_steps=50,
            checkpoint_every=100,
            eval_every=100,
            eval_batches=16,
            log_every=25,
        ),
    ),
    # Just big enough to get below the unigram entropy (what the smoke test checks), in seconds.
    "smoke": lambda: Config(
        model=TransformerConfig(seq_len=32, num_layers=2, d_model=32, num_heads=2),
        train=TrainConfig(
            steps=60,
            batch_size=16,
            learning_rate=1e-2,
            warmup_steps=5,
            checkpoint_every=10,
            eval_every=15,
            eval_batches=8,
            log_every=5,
        ),
    ),
    "paper": lambda: Config(
        model=TransformerConfig.paper("405m", vocab_size=VOCAB_SIZE),
        train=TrainConfig(
            steps=20000,
            batch_size=256,
            learning_rate=6e-4,
            warmup_steps=1000,
            checkpoint_every=1000,
            eval_every=1000,
            eval_batches=32,
            log_every=100,
        ),
        mesh=MeshConfig(data=-1, fsdp=8),
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("lm_baseline", PRESETS, preset)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    task = LMTask(
        build=lambda rngs: Transformer(cfg.model, rngs=rngs),
        seq_len=cfg.model.seq_len,
        source=cfg.data,
        z_loss=cfg.z_loss,
    )
    summary = run_training(task, cfg.train, workdir, mesh_cfg=cfg.mesh, config_record=to_dict(cfg))
    floor = unigram_entropy_bits(task.val_docs)
    rows = [r for r in read_metrics(workdir) if "eval_bits_per_byte" in r]
    plot_curves(
        {
            "validation": ([r["step"] for r in rows], [r["eval_bits_per_byte"] for r in rows]),
            "unigram entropy": ([0, cfg.train.steps], [floor, floor]),
        },
        workdir / "val_bits_per_byte.png",
        xlabel="step",
        ylabel="bits per byte",
        title="lm_baseline on KJV (validation books)",
    )
    model = nnx.eval_shape(lambda: Transformer(cfg.model, rngs=nnx.Rngs(0)))
    bits = summary["eval"].get("eval_bits_per_byte")
    return {
        **summary,
        "num_params": count_params(model),
        "val_bits_per_byte": bits,
        "unigram_entropy_bits": floor,
        "headline": {
            "val_bits_per_byte": bits,
            "unigram_entropy_bits": floor,
            "below_unigram_entropy": bits is not None and bits < floor,
            "steps": cfg.train.steps,
            "tokens_seen": summary["tokens_seen"],
        },
    }
