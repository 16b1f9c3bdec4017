"""MLR attention against MHA, sliding-window and Global+SWA attention in a byte-level LM, and MLR
inside the RMT (Kuang et al. 2025, Sec. 5.2, Fig. 5: MLR gives a slight gain in loss per compute).

Command:  python experiments/run.py --exp=mlr_lm      (``--smoke``: about a minute)
Result:   the headline printed at the end: final validation loss per attention kind (mean ± sd
          over seeds) and the non-embedding training compute it took; full numbers in
          summary.json, measured results in jaxlab/methods/structured_attention/README.md.

The baseline Transformer (:mod:`jaxlab.lm.transformer`) on the shipped KJV corpus at byte level
(validation books unseen), trained once per attention kind with everything else equal — the
``LMConfig.attention`` field is the only difference: ``mha``; ``swa`` with a window; ``gswa``
(Global+SWA, two halves of each head, probabilities added, as in the authors' code); ``mlr`` with
a scaled-down version of the paper's 8-level 32|8|6|4|4|4|4|2 at head dim 64 (default 4 levels
16|8|4|4 at head dim 32 on 128-byte rows), ``normalize="block_levels"`` as in the paper's LM runs.
Two more rows put MLR into the RMT (:mod:`jaxlab.methods.rmt`, its own recipe) beside the RMT with
MHA: a combination not published. Compute is the non-embedding training FLOPs per token (3x the
forward: projections, MLP, and the token mixing counted over the pairs each kind really scores,
``LMConfig.flops_per_token(include_vocab=False, causal=True)``) times the tokens seen. The
``paper`` preset adds the authors' recipe (per-head QK LayerNorm, µP logit scales ``8/d``) to every
row; the default keeps the models' own (no QK norm, ``1/sqrt(d)``).
"""

from __future__ import annotations

import dataclasses
import pathlib

from jaxlab.core.config import TrainConfig, check, to_dict
from jaxlab.core.experiment import select_preset
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.core.scaling import mean_sd
from jaxlab.core.sweep import Run, check_seeds, mean_curve, read_curve, sweep
from jaxlab.lm.task import LMTask, fit_vocab
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig

MODELS = ("mha", "swa", "gswa", "mlr", "rmt_mha", "rmt_mlr")


@dataclasses.dataclass(frozen=True)
class Config:
    models: tuple[str, ...] = MODELS
    seq_len: int = 128
    d_model: int = 64
    head_dim: int = 32
    num_layers: int = 2
    window: int = 32  # swa / gswa: earlier positions a query sees
    ranks: tuple[int, ...] = (16, 8, 4, 4)  # mlr, level 0 first; sum = head_dim
    normalize: str = "block_levels"
    rmt_d_key: int = 16
    # The authors' recipe (their LM config: do_qk_ln=True, µP logits 8/d) is the paper preset's;
    # off by default, as the models' own defaults.
    qk_norm: bool = False
    logit_scale: str = "sqrt"
    seeds: tuple[int, ...] = (0, 1)
    data: str = "kjv"
    train: TrainConfig = TrainConfig()

    def __post_init__(self) -> None:
        check(len(self.models) >= 1, f"models is empty; choose from {list(MODELS)}")
        for m in self.models:
            check(m in MODELS, f"unknown model {m!r}; choose from {list(MODELS)}")
        check_seeds(self.seeds)
        check(self.d_model % self.head_dim == 0, "head_dim must divide d_model")
        for m in self.models:  # build every config now, so a bad option fails before training
            self.model(m)

    def model(self, name: str) -> TransformerConfig | RMTConfig:
        kind = name.removeprefix("rmt_")
        attention = dict(
            attention=kind,
            attention_window=self.window if kind in ("swa", "gswa") else 0,
            attention_ranks=self.ranks if kind == "mlr" else (),
            attention_normalize=self.normalize,
        )
        common = dict(
            vocab_size=256, seq_len=self.seq_len, num_layers=self.num_layers,
            qk_norm=self.qk_norm, logit_scale=self.logit_scale,
        )  # fmt: skip
        heads = self.d_model // self.head_dim
        if name.startswith("rmt_"):
            cfg = RMTConfig(
                rank=heads, d_key=self.rmt_d_key, d_value=self.head_dim, d_ff=4 * self.d_model,
                **common, **attention,
            )  # fmt: skip
        else:
            cfg = TransformerConfig(d_model=self.d_model, num_heads=heads, **common, **attention)
        return fit_vocab(cfg, self.data)  # a shard corpus's vocabulary (bytes: 256)


_TRAIN = dict(batch_size=16, learning_rate=3e-3, keep_checkpoints=1)
PRESETS = {
    "default": lambda: Config(
        train=TrainConfig(
            steps=200,
            warmup_steps=20,
            checkpoint_every=200,
            eval_every=40,
            eval_batches=8,
            log_every=40,
            **{**_TRAIN, "batch_size": 8},
        )
    ),
    "smoke": lambda: Config(
        seq_len=32,
        d_model=32,
        head_dim=16,
        num_layers=1,
        window=8,
        ranks=(8, 4, 4),
        rmt_d_key=8,
        seeds=(0,),
        train=TrainConfig(
            steps=4,
            warmup_steps=1,
            checkpoint_every=4,
            eval_every=2,
            eval_batches=1,
            log_every=2,
            **{**_TRAIN, "batch_size": 8},
        ),
    ),  # fmt: skip
    "paper": lambda: Config(
        seq_len=1024,
        d_model=768,
        head_dim=64,
        num_layers=12,
        window=256,
        ranks=(32, 8, 6, 4, 4, 4, 4, 2),
        rmt_d_key=64,
        qk_norm=True,
        logit_scale="mup",
        seeds=(0, 1),
        train=TrainConfig(
            steps=20000,
            batch_size=64,
            learning_rate=6e-4,
            warmup_steps=1000,
            checkpoint_every=1000,
            eval_every=500,
            eval_batches=32,
            log_every=100,
        ),
    ),  # fmt: skip
}


def get_config(preset: str = "default") -> Config:
    return select_preset("mlr_lm", PRESETS, preset)


def _run(cfg: Config, name: str, seed: int) -> Run:
    """One attention kind with one seed: its config and its training (see core.sweep)."""
    model_cfg = cfg.model(name)
    train = dataclasses.replace(cfg.train, seed=seed)
    record = {"model": to_dict(model_cfg), "train": to_dict(train), "data": cfg.data}

    def fit(workdir: pathlib.Path) -> dict:
        cls = RMT if name.startswith("rmt_") else Transformer
        task = LMTask(build=lambda r: cls(model_cfg, rngs=r), seq_len=cfg.seq_len, source=cfg.data)
        run_training(task, train, workdir, config_record=record)
        tokens, losses = read_curve(workdir)
        return {"seed": seed, "tokens": tokens, "eval_loss": losses, "final_eval_loss": losses[-1]}

    return Run(record, fit)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    swept = sweep(workdir, cfg.models, cfg.seeds, lambda name, s: _run(cfg, name, s))
    results = {}
    with MetricWriter(workdir, tensorboard=False) as writer:
        for i, (name, runs) in enumerate(swept.items()):
            fpt = cfg.model(name).flops_per_token(include_vocab=False, causal=True).train
            stat = mean_sd([r["final_eval_loss"] for r in runs])
            results[name] = {"train_flops_per_token": fpt, "final_eval_loss": stat, "runs": runs}
            writer.write(i, {"final_eval_loss": stat["mean"], "final_eval_loss_sd": stat["sd"],
                             "train_flops_per_token": fpt})  # fmt: skip
    curves = {}
    for name, entry in results.items():
        runs = entry["runs"]
        tokens, mean, _ = mean_curve([r["tokens"] for r in runs], [r["eval_loss"] for r in runs])
        curves[name] = (tokens * entry["train_flops_per_token"], mean)
    fig = curves_figure(
        curves, xlabel="non-embedding training FLOPs",
        ylabel="validation loss (nats/byte)", logx=True,
        title=f"mlr_lm: mean over {len(cfg.seeds)} seeds",
    )  # fmt: skip
    save_figure(fig, workdir / "loss_vs_compute.png")
    headline = {"seeds": len(cfg.seeds), "ranks": list(cfg.ranks), "window": cfg.window}
    lines = [f"mlr_lm (T={cfg.seq_len}, D={cfg.d_model}, head dim {cfg.head_dim}, ranks "
             f"{'|'.join(map(str, cfg.ranks))}, {len(cfg.seeds)} seeds):"]  # fmt: skip
    for name, entry in results.items():
        s = entry["final_eval_loss"]
        compute = entry["train_flops_per_token"] * entry["runs"][0]["tokens"][-1]
        headline[name] = {"final_eval_loss": s, "train_compute": compute}
        lines.append(f"  {name:8s} val loss {s['mean']:.4f} ± {s['sd']:.4f}  compute {compute:.3e}")
    for a, b in (("mlr", "mha"), ("rmt_mlr", "rmt_mha")):
        if a in results and b in results:
            d = results[a]["final_eval_loss"]["mean"] - results[b]["final_eval_loss"]["mean"]
            ratio = results[a]["train_flops_per_token"] / results[b]["train_flops_per_token"]
            headline[f"{a}_minus_{b}_loss"], headline[f"{a}_over_{b}_compute"] = d, ratio
            lines.append(f"  {a} - {b}: loss {d:+.4f} at {ratio:.3f}x the compute per token")
    print("\n".join(lines))
    return {"results": results, "headline": headline}
