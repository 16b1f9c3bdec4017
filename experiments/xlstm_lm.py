"""A tiny xLSTM against a Transformer of the same size: validation loss at equal tokens and FLOPs.

Command:  python experiments/run.py --exp=xlstm_lm           (``--smoke``: about a minute)
Result:   the headline printed at the end: per model, the final validation loss (mean ± sd over
          seeds) at equal tokens, and both models' losses at the largest FLOP budget both reached;
          full curves in summary.json, measured results in jaxlab/methods/xlstm/README.md.

The xLSTM 7B architecture (:mod:`jaxlab.methods.xlstm`) at CPU size and the baseline Transformer
(:mod:`jaxlab.lm.transformer`) with the same width, depth and heads train on the shipped KJV corpus
(byte level, packed rows with document resets / masks, validation books unseen) under one recipe:
the whole ``train`` group, the init rule, RMSNorm, the data order of each seed. The Transformer's
MLP width is chosen so that its non-embedding parameters match the xLSTM's (the xLSTM has no
position table; the Transformer uses ALiBi, so neither has positional parameters). Equal FLOPs:
each validation curve is put on the analytic training-FLOP axis (tokens x 3 x forward FLOPs per
token, each config's :meth:`~jaxlab.lm.config.LMConfig.flops_per_token`) and both are read at
the smaller of the two
final budgets. The paper (Beck et al., ICML 2025, Sec. 4) compares at 7B and 2T tokens; a few
hundred steps on 4 MB of text only tests that the architecture learns as well as the baseline at
matched cost, not the paper's scaling claims.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
from flax import nnx

from jaxlab.core.config import TrainConfig, to_dict
from jaxlab.core.experiment import select_preset
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import MeshConfig
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.core.scaling import mean_sd
from jaxlab.core.sweep import Run, check_seeds, read_curve, sweep, value_at
from jaxlab.lm.task import LMTask, fit_vocab
from jaxlab.lm.transformer import Transformer
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.methods.xlstm.matched import matched_transformer
from jaxlab.nn.layers import count_params, non_embedding_params


@dataclasses.dataclass(frozen=True)
class Config:
    d_model: int = 128
    num_layers: int = 4
    num_heads: int = 4
    seq_len: int = 128
    chunk_size: int = 32
    seeds: tuple[int, ...] = (0, 1)
    data: str = "kjv"
    train: TrainConfig = TrainConfig()
    mesh: MeshConfig = MeshConfig()

    def __post_init__(self) -> None:
        check_seeds(self.seeds)
        self.models()  # a bad data source or vocabulary fails here, before any training

    def models(self) -> dict[str, tuple[type, object]]:
        shared = dict(seq_len=self.seq_len, num_layers=self.num_layers, num_heads=self.num_heads,
                      d_model=self.d_model, norm="rmsnorm")  # fmt: skip
        xcfg = fit_vocab(xLSTMConfig(chunk_size=self.chunk_size, **shared), self.data)
        return {"xlstm": (xLSTM, xcfg), "transformer": (Transformer, matched_transformer(xcfg))}


PRESETS = {
    # Two seeds of two models, 300 steps of 16 x 128 bytes each.
    "default": lambda: Config(
        train=TrainConfig(
            steps=300,
            batch_size=16,
            learning_rate=3e-3,
            warmup_steps=30,
            checkpoint_every=100,
            eval_every=50,
            eval_batches=8,
            log_every=25,
        )
    ),
    "smoke": lambda: Config(
        d_model=32,
        num_layers=1,
        num_heads=2,
        seq_len=32,
        chunk_size=8,
        train=TrainConfig(
            steps=10,
            batch_size=8,
            warmup_steps=2,
            checkpoint_every=10,
            eval_every=5,
            eval_batches=1,
            log_every=5,
        ),
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("xlstm_lm", PRESETS, preset)


def _run(cfg: Config, name: str, seed: int) -> Run:
    """One model with one seed: its config and its training (see core.sweep)."""
    cls, model_cfg = cfg.models()[name]
    train = dataclasses.replace(cfg.train, seed=seed)
    record = {"model": to_dict(model_cfg), "train": to_dict(train), "data": cfg.data}

    def fit(workdir: pathlib.Path) -> dict:
        task = LMTask(build=lambda r: cls(model_cfg, rngs=r), seq_len=cfg.seq_len, source=cfg.data)
        run_training(task, train, workdir, mesh_cfg=cfg.mesh, config_record=record)
        tokens, losses = read_curve(workdir)
        return {"seed": seed, "tokens": tokens, "eval_loss": losses, "final_eval_loss": losses[-1]}

    return Run(record, fit)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    models, results = cfg.models(), {}
    swept = sweep(workdir, list(models), cfg.seeds, lambda name, s: _run(cfg, name, s))
    for name, (cls, model_cfg) in models.items():
        runs = swept[name]
        model = nnx.eval_shape(lambda cls=cls, c=model_cfg: cls(c, rngs=nnx.Rngs(0)))
        results[name] = {
            "params": count_params(model),
            "non_embedding_params": non_embedding_params(model),
            "train_flops_per_token": model_cfg.flops_per_token().train,
            "final_eval_loss": mean_sd([r["final_eval_loss"] for r in runs]),
            "runs": runs,
            "model": to_dict(model_cfg),
        }
    # Equal FLOPs: both curves on the FLOP axis, read at the smaller final budget.
    budget = min(r["train_flops_per_token"] * r["runs"][0]["tokens"][-1] for r in results.values())
    for r in results.values():
        fpt = r["train_flops_per_token"]
        at = [value_at(run["tokens"], run["eval_loss"], budget, scale=fpt) for run in r["runs"]]
        r["eval_loss_at_equal_flops"] = mean_sd(at)
    fig = curves_figure(
        {
            f"{name} seed {run['seed']}": (
                np.array(run["tokens"]) * r["train_flops_per_token"],
                run["eval_loss"],
            )
            for name, r in results.items()
            for run in r["runs"]
        },
        xlabel="training FLOPs (analytic)",
        ylabel="validation loss (nats/byte)",
        title="xLSTM vs Transformer on KJV",
    )
    save_figure(fig, workdir / "val_loss_vs_flops.png")
    x, t = results["xlstm"], results["transformer"]
    with MetricWriter(workdir, tensorboard=False) as writer:  # one row per seed, both models
        for i, seed in enumerate(cfg.seeds):
            losses = {n: r["runs"][i]["final_eval_loss"] for n, r in results.items()}
            writer.write(seed, {f"{n}_final_eval_loss": v for n, v in losses.items()})
    return {
        **results,
        "equal_flops_budget": budget,
        "headline": {
            "params": {"xlstm": x["params"], "transformer": t["params"]},
            "flops_per_token_ratio": x["train_flops_per_token"] / t["train_flops_per_token"],
            "equal_tokens_eval_loss": {
                "xlstm": x["final_eval_loss"],
                "transformer": t["final_eval_loss"],
            },
            "equal_flops_eval_loss": {
                "xlstm": x["eval_loss_at_equal_flops"],
                "transformer": t["eval_loss_at_equal_flops"],
            },
            "seeds": len(cfg.seeds),
            "tokens_per_run": x["runs"][0]["tokens"][-1],
        },
    }
