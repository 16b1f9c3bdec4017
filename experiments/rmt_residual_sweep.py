"""Growing only the RMT's residual key dimension Dk lowers its loss at fixed size (paper Fig. 6).

Command:  python experiments/run.py --exp=rmt_residual_sweep   (``--smoke``: under a minute)
Result:   the headline printed at the end (validation loss per Dk, mean ± sample sd over seeds);
          measured results in jaxlab/methods/rmt/README.md

Only the key dimension Dk of the residual matrix varies (parameters change by well under 1%: the
keys are the only parameters that depend on Dk); everything else, including the data order, is
fixed. Each Dk is trained with several seeds and the validation loss is reported per Dk with its
spread. The paper's shape: loss falls as Dk grows, most of the gain coming once Dk reaches R.
"""

from __future__ import annotations

import dataclasses
import pathlib

from flax import nnx

from jaxlab.core.config import TrainConfig, check, to_dict
from jaxlab.core.errors import ConfigError
from jaxlab.core.experiment import select_preset
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.core.scaling import mean_sd
from jaxlab.core.sweep import Run, check_seeds, sweep
from jaxlab.lm.task import LMTask, fit_vocab
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.nn.layers import count_params


@dataclasses.dataclass(frozen=True)
class Config:
    # With R = 8 this spans Dk < R, = R and > R; a wider range would change the parameter count by
    # more than 1% at this tiny size (keys and the matrix norm's scales grow with Dk).
    d_keys: tuple[int, ...] = (4, 8, 16)
    seeds: tuple[int, ...] = (0, 1)
    model: RMTConfig = RMTConfig(seq_len=128, num_layers=2, rank=8, d_key=8, d_value=16, d_ff=512)
    data: str = "kjv"  # kjv | text file or directory | hf:NAME | shards:DIR (jaxlab.data.prepare)
    tokenizer: str = ""  # with shards: the tokenizer they must have been made with ("" = any)
    z_loss: float = 1e-4  # z-loss coefficient of the LM objective (not in the reported loss)
    train: TrainConfig = TrainConfig(
        steps=300,
        batch_size=16,
        learning_rate=3e-3,
        warmup_steps=30,
        checkpoint_every=100,
        eval_every=100,
        eval_batches=8,
        log_every=50,
    )

    def __post_init__(self) -> None:
        check(len(self.d_keys) >= 2, "rmt_residual_sweep needs at least two d_keys")
        check(len(set(self.d_keys)) == len(self.d_keys), f"d_keys={self.d_keys} repeats a value")
        check_seeds(self.seeds)
        check(self.z_loss >= 0, "z_loss must be >= 0")
        for d_key in self.d_keys:  # every arm's model now, not after the first arms trained
            try:
                self.arm_model(d_key)
            except ConfigError as err:
                raise ConfigError(f"d_keys={self.d_keys}: at d_key={d_key}, {err}") from None

    def arm_model(self, d_key: int) -> RMTConfig:
        """The model of the arm with this ``d_key`` (its vocabulary fitted to the data)."""
        return fit_vocab(dataclasses.replace(self.model, d_key=d_key), self.data)


PRESETS = {
    "default": Config,
    "smoke": lambda: Config(
        d_keys=(2, 8),
        seeds=(0,),
        model=RMTConfig(seq_len=32, num_layers=1, rank=4, d_key=4, d_value=8, d_ff=64),
        train=TrainConfig(
            steps=10,
            batch_size=8,
            warmup_steps=2,
            checkpoint_every=10,
            eval_every=10,
            eval_batches=1,
            log_every=5,
        ),
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("rmt_residual_sweep", PRESETS, preset)


def _run(cfg: Config, d_key: int, seed: int) -> Run:
    """One Dk with one seed: its config and its training (see core.sweep)."""
    model_cfg = cfg.arm_model(d_key)
    train = dataclasses.replace(cfg.train, seed=seed)
    record = {**to_dict(model_cfg), "z_loss": cfg.z_loss}
    full = {"model": record, "train": to_dict(train), "data": cfg.data, "tokenizer": cfg.tokenizer}

    def fit(workdir: pathlib.Path) -> dict:
        task = LMTask(
            build=lambda rngs: RMT(model_cfg, rngs=rngs),
            seq_len=model_cfg.seq_len,
            source=cfg.data,
            z_loss=cfg.z_loss,
            tokenizer=cfg.tokenizer or None,
        )
        summary = run_training(task, train, workdir, config_record=record)
        return {"eval_loss": summary["eval"]["eval_loss"]}

    return Run(full, fit)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    arms = {f"dk{d_key}": d_key for d_key in cfg.d_keys}
    swept = sweep(workdir, list(arms), cfg.seeds, lambda arm, s: _run(cfg, arms[arm], s))
    results = []
    with MetricWriter(workdir, tensorboard=False) as writer:
        for i, (arm, d_key) in enumerate(arms.items()):
            losses = [r["eval_loss"] for r in swept[arm]]
            model_cfg = cfg.arm_model(d_key)
            params = count_params(nnx.eval_shape(lambda c=model_cfg: RMT(c, rngs=nnx.Rngs(0))))
            spread = mean_sd(losses)  # sample standard deviation over seeds (ddof = 1)
            row = {
                "d_key": d_key,
                "params": params,
                "eval_loss_mean": spread["mean"],
                "eval_loss_std": spread["sd"],
                "eval_losses": losses,
            }
            writer.write(i, {k: v for k, v in row.items() if k != "eval_losses"})
            results.append(row)
    fig = curves_figure(
        {
            "validation loss": (
                [r["d_key"] for r in results],
                [r["eval_loss_mean"] for r in results],
            )
        },
        xlabel="Dk (residual key dimension)",
        ylabel="validation loss (nats/byte)",
        logx=True,
        title=f"R = {cfg.model.rank}",
    )
    save_figure(fig, workdir / "loss_vs_dk.png")
    params = [r["params"] for r in results]
    headline = {
        f"Dk={r['d_key']} validation loss": f"{r['eval_loss_mean']:.3f} ± {r['eval_loss_std']:.3f}"
        for r in results
    }
    headline["parameter change across the sweep"] = (
        f"{(max(params) - min(params)) / min(params):.2%}"
    )
    return {
        "headline": headline,
        "results": results,
        "rank": cfg.model.rank,
        "param_change": (max(params) - min(params)) / min(params),
        "loss_drop_smallest_to_largest_dk": results[0]["eval_loss_mean"]
        - results[-1]["eval_loss_mean"],
    }
