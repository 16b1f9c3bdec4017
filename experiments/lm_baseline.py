"""A small baseline Transformer LM learns the shipped KJV corpus well below its unigram entropy.

Command:  python experiments/run.py --exp=lm_baseline        (``--smoke``: under a minute)
Result:   the headline printed at the end: validation bits per byte against the unigram entropy
          of the validation books (measured numbers: the root README's method table)

The baseline decoder-only Transformer (:mod:`jaxlab.lm.transformer`) trains on byte-level King James
Bible text packed into rows with document masking; validation books are never trained on. The
floor to beat is the unigram byte entropy of the validation text (what a model that ignores context
can reach). ``--set data=shards:DIR`` trains on a corpus prepared with
:mod:`jaxlab.data.prepare` instead (any tokenizer; the model's vocabulary comes from the shard
index, and the headline compares bits per token with the validation split's token-unigram entropy).

``--set preset=paper`` is the RMT paper's 405M baseline (V = 50257, N = 512) on OpenWebText with
GPT-2's tokenizer, for accelerators. On the pod, with a directory every host can read::

    pip install -e ".[tpu]" datasets    # or ".[gpu]"; datasets only where the corpus is prepared
    python -m jaxlab.data.prepare --tokenizer=gpt2 --input=hf:Skylion007/openwebtext \
        --output=data/openwebtext_gpt2 --workers=16
    python experiments/run.py --exp=lm_baseline --set preset=paper    # every host, JAXLAB_* set

(the preset reads ``data=shards:data/openwebtext_gpt2``; ``--set data=shards:/path`` elsewhere).
Preparing needs the network once (GPT-2's tokenizer and the dataset are cached afterwards); that
path is not exercised by the offline tests, which use a BPE trained on the shipped text.
"""

from __future__ import annotations

import dataclasses
import pathlib

from jaxlab.core.config import TrainConfig, to_dict
from jaxlab.core.experiment import select_preset
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import MeshConfig
from jaxlab.core.metrics import read_metrics
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.lm.task import LMTask, fit_vocab
from jaxlab.lm.transformer import Transformer, TransformerConfig


@dataclasses.dataclass(frozen=True)
class Config:
    model: TransformerConfig
    train: TrainConfig
    mesh: MeshConfig = MeshConfig()
    data: str = "kjv"  # kjv | text file or directory | hf:NAME | shards:DIR (jaxlab.data.prepare)
    z_loss: float = 0.0  # z-loss coefficient of the LM objective (not in the reported loss)
    tokenizer: str = ""  # with shards: the tokenizer they must have been made with ("" = any)


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
            warmup_steps=2,  # so that --smoke --set train.steps=2 (a start-up timing) is valid
            checkpoint_every=10,
            eval_every=15,
            eval_batches=8,
            log_every=5,
        ),
    ),
    "paper": lambda: Config(
        model=TransformerConfig.paper("405m"),
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
        data="shards:data/openwebtext_gpt2",
        tokenizer="gpt2",
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("lm_baseline", PRESETS, preset)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    model_cfg = fit_vocab(cfg.model, cfg.data)  # shards: the vocabulary of their index
    task = LMTask(
        build=lambda rngs: Transformer(model_cfg, rngs=rngs),
        seq_len=model_cfg.seq_len,
        source=cfg.data,
        z_loss=cfg.z_loss,
        tokenizer=cfg.tokenizer or None,
    )
    summary = run_training(task, cfg.train, workdir, mesh_cfg=cfg.mesh, config_record=to_dict(cfg))
    floor = task.unigram_entropy_bits()
    metric = task.bits_metric  # bits_per_byte on byte-level data, else bits_per_token
    rows = [r for r in read_metrics(workdir) if f"eval_{metric}" in r]
    unit = metric.removeprefix("bits_per_")
    fig = curves_figure(
        {
            "validation": ([r["step"] for r in rows], [r[f"eval_{metric}"] for r in rows]),
            "unigram entropy": ([0, cfg.train.steps], [floor, floor]),
        },
        xlabel="step",
        ylabel=f"bits per {unit}",
        title="lm_baseline on KJV (validation books)"
        if cfg.data == "kjv"
        else f"lm_baseline on {cfg.data} (validation)",
    )
    save_figure(fig, workdir / f"val_{metric}.png")
    bits = summary["eval"].get(f"eval_{metric}")
    extra = {} if task.corpus is None else {f"val_{metric}": bits, "vocab_size": task.vocab_size}
    return {
        **summary,
        "val_bits_per_byte": summary["eval"].get("eval_bits_per_byte"),
        **extra,
        "unigram_entropy_bits": floor,
        "headline": {
            f"val_{metric}": bits,
            "unigram_entropy_bits": floor,
            "below_unigram_entropy": bits is not None and bits < floor,
            "steps": cfg.train.steps,
            "tokens_seen": summary["tokens_seen"],
        },
    }
