"""The RMT reaches a matched Transformer's loss with fewer FLOPs, params and tokens (Sec. 5.1).

Command:  python experiments/run.py --exp=rmt_scaling          (``--smoke``: under a minute)
Runtime:  8 min 01 s wall on an idle 2-core CPU (29 min when shared with 3 other jobs); --smoke 30 s
Result:   at D = 64 / 96 / 128 (Dk = 4R = 16 / 24 / 32) the RMT ends at validation loss
          1.799 / 1.528 / 1.438 against the transformer's 1.788 / 1.608 / 1.533 nats/byte, with
          23-30% fewer parameters; at D = 128 it reaches the transformer's final loss with 0.71 of
          its tokens and 0.59 of its FLOPs (paper: 0.59 and 0.42), at D = 96 with 0.72 and 0.60; at
          D = 64 it does not reach it. Step time RMT/transformer 1.21 / 1.16 / 1.13 (paper 1.77,
          on GPU). Measured 2026-11-30.

Trains matched Transformer/RMT pairs (same core width D = R*Dv, depth, heads, d_ff; see
:mod:`jaxlab.methods.rmt.scaling`) at three sizes on the shipped KJV corpus with the same batches,
logs validation loss against tokens, parameters and FLOPs, fits a power law L = a*C^-b per
architecture, and reads off the headline ratios: the FLOPs and tokens the RMT needs to reach the
transformer's final loss, as fractions of the transformer's (paper, Table 3: 0.42 of the FLOPs and
0.59 of the tokens at 305M/405M). It also times a training step of each model side by side (paper
Table 4: RMT 1.77x slower per step). ``--set preset=paper`` runs the paper's four pairs
(46M-305M RMT vs 49M-405M transformer, N = 512) on byte-level OpenWebText through Hugging Face
``datasets`` on accelerators; jaxlab has no BPE tokenizer, so V = 256 instead of 50257.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
from flax import nnx

from jaxlab.core.config import TrainConfig, check, to_dict
from jaxlab.core.errors import ConfigError
from jaxlab.core.flops import transformer_flops_per_token
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import MeshConfig
from jaxlab.core.metrics import MetricWriter, read_metrics
from jaxlab.core.plots import plot_curves, plot_scaling
from jaxlab.core.scaling import fit_power_law
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.methods.rmt.benchmark import step_seconds
from jaxlab.methods.rmt.flops import rmt_flops_per_token
from jaxlab.methods.rmt.mup import mup_lr_groups
from jaxlab.methods.rmt.scaling import fraction_to_reach, matched_pair, non_embedding_params
from jaxlab.nn.layers import count_params
from jaxlab.nn.lm_task import LMTask
from jaxlab.nn.transformer import Transformer, TransformerConfig

PAPER = {"tokens_fraction": 0.59, "flops_fraction": 0.42, "step_time_ratio": 7.17 / 4.06}
PAPER_PAIRS = (("49m", "46m"), ("160m", "134m"), ("260m", "206m"), ("405m", "305m"))


@dataclasses.dataclass(frozen=True)
class Config:
    widths: tuple[int, ...] = (64, 96, 128)  # core width D of each pair
    layers: tuple[int, ...] = (2, 3, 4)
    head_dim: int = 16  # Dv, and the transformer's head size
    # Dk: the RMT's residual stream is Dk x Dv per token, residual_ratio = Dk / R times the core
    # width R * Dv. 0 (default) scales Dk with R at the paper's 305M ratio, 4 (Dk = 64, R = 16).
    d_key: int = 0
    residual_ratio: int = 4
    seq_len: int = 128
    norm: str = "rmsnorm"
    positions: str = "alibi"
    paper_pairs: bool = False  # use the paper's presets instead of widths/layers
    mup: bool = False  # µP learning rates for the RMTs, with the smallest pair as the base model
    data: str = "kjv"
    # z-loss coefficients of the LM objective (not in the reported loss), per architecture.
    transformer_z_loss: float = 0.0
    rmt_z_loss: float = 1e-4
    time_rounds: int = 5  # interleaved timing rounds per pair (0 skips the step-time benchmark)
    train: TrainConfig = TrainConfig()
    mesh: MeshConfig = MeshConfig()

    def __post_init__(self) -> None:
        check(len(self.widths) == len(self.layers), "widths and layers need the same length")
        check(len(self.widths) >= 2 or self.paper_pairs, "rmt_scaling needs at least two sizes")
        check(self.head_dim > 0, f"head_dim must be positive, got {self.head_dim}")
        for w in self.widths:
            check(w % self.head_dim == 0, f"width {w} is not a multiple of head_dim")
        check(self.d_key >= 0 and self.residual_ratio > 0, "need d_key >= 0, residual_ratio > 0")
        check(self.transformer_z_loss >= 0 and self.rmt_z_loss >= 0, "z-losses must be >= 0")

    def pairs(self) -> list[tuple[TransformerConfig, RMTConfig]]:
        pairs = self._pairs()
        if not self.mup:
            return pairs
        base = pairs[0][1]
        mup = dict(
            mup=True,
            mup_base_rank=base.rank,
            mup_base_d_key=base.d_key,
            mup_base_d_value=base.d_value,
            mup_base_d_ff=base.d_ff,
        )
        return [(t, dataclasses.replace(r, **mup)) for t, r in pairs]

    def _pairs(self) -> list[tuple[TransformerConfig, RMTConfig]]:
        if self.paper_pairs:
            kw = dict(vocab_size=256, positions=self.positions, norm=self.norm)
            return [
                (TransformerConfig.paper(t, **kw), RMTConfig.paper(r, **kw)) for t, r in PAPER_PAIRS
            ]
        return [
            matched_pair(
                w,
                n,
                head_dim=self.head_dim,
                d_key=self.d_key or self.residual_ratio * (w // self.head_dim),
                seq_len=self.seq_len,
                vocab_size=256,
                norm=self.norm,
                positions=self.positions,
            )
            for w, n in zip(self.widths, self.layers, strict=True)
        ]


def get_config(preset: str = "default") -> Config:
    if preset == "default":
        return Config(
            train=TrainConfig(
                steps=400,
                batch_size=16,
                learning_rate=3e-3,
                warmup_steps=40,
                checkpoint_every=100,
                eval_every=50,
                eval_batches=8,
                log_every=50,
            )
        )
    if preset == "smoke":
        return Config(
            widths=(32, 48),
            layers=(1, 1),
            d_key=16,
            seq_len=32,
            time_rounds=1,
            train=TrainConfig(
                steps=10,
                batch_size=8,
                warmup_steps=2,
                checkpoint_every=10,
                eval_every=5,
                eval_batches=1,
                log_every=5,
            ),
        )
    if preset == "paper":
        return Config(
            paper_pairs=True,
            seq_len=512,
            data="hf:Skylion007/openwebtext",
            train=TrainConfig(
                steps=20000,
                batch_size=256,
                learning_rate=6e-4,
                warmup_steps=1000,
                checkpoint_every=1000,
                eval_every=500,
                eval_batches=32,
                log_every=100,
            ),
            mesh=MeshConfig(data=-1, fsdp=8),
        )
    raise ConfigError(f"unknown preset {preset!r} for rmt_scaling; choose default, smoke or paper")


def _train(arch, model_cfg, cfg: Config, workdir: pathlib.Path) -> dict:
    cls, flops, z_loss = (
        (Transformer, transformer_flops_per_token, cfg.transformer_z_loss)
        if arch == "transformer"
        else (RMT, rmt_flops_per_token, cfg.rmt_z_loss)
    )
    task = LMTask(
        build=lambda rngs: cls(model_cfg, rngs=rngs),
        seq_len=model_cfg.seq_len,
        source=cfg.data,
        z_loss=z_loss,
    )
    run_training(
        task,
        cfg.train,
        workdir,
        mesh_cfg=cfg.mesh,
        config_record={"model": to_dict(model_cfg), "train": to_dict(cfg.train), "z_loss": z_loss},
        lr_groups=mup_lr_groups(model_cfg) if getattr(model_cfg, "mup", False) else None,
    )
    rows = [r for r in read_metrics(workdir) if "eval_loss" in r]
    model = nnx.eval_shape(lambda: cls(model_cfg, rngs=nnx.Rngs(0)))
    return {
        "arch": arch,
        "params": count_params(model),
        "non_embedding_params": non_embedding_params(model),
        "train_flops_per_token": flops(model_cfg).train,
        "train_flops_per_token_no_vocab": flops(model_cfg, include_vocab=False).train,
        "tokens": [r["tokens_seen"] for r in rows],
        "eval_loss": [r["eval_loss"] for r in rows],
        "final_eval_loss": rows[-1]["eval_loss"],
        "final_eval_bits_per_byte": rows[-1]["eval_bits_per_byte"],
        "task": task,
    }


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    sizes, writer = [], MetricWriter(workdir, start_step=None, tensorboard=False)
    for i, (tcfg, rcfg) in enumerate(cfg.pairs()):
        width = tcfg.d_model
        tf = _train("transformer", tcfg, cfg, workdir / f"transformer_D{width}")
        rmt = _train("rmt", rcfg, cfg, workdir / f"rmt_D{width}")
        entry = {
            "width": width,
            "layers": tcfg.num_layers,
            "rank": rcfg.rank,
            "d_key": rcfg.d_key,
            "d_value": rcfg.d_value,
        }
        if cfg.time_rounds:
            # The RMT's step time grows with its residual Dk x Dv: time it at the configured Dk
            # and at Dk = Dv (the paper's 305M shape) beside the transformer, in one process.
            batch = tf["task"].eval_batches(cfg.train.batch_size, 1)[0]
            d_keys = sorted({rcfg.d_key, rcfg.d_value})
            builders = {"transformer": lambda r, c=tcfg: Transformer(c, rngs=r)}
            for dk in d_keys:
                c = dataclasses.replace(rcfg, d_key=dk)
                builders[f"rmt_dk{dk}"] = lambda r, c=c: RMT(c, rngs=r)
            secs = step_seconds(builders, batch, rounds=cfg.time_rounds)
            by_dk = {dk: secs[f"rmt_dk{dk}"] / secs["transformer"] for dk in d_keys}
            entry.update(
                seconds_per_step=secs,
                step_time_ratio=by_dk[rcfg.d_key],
                step_time_ratio_by_d_key=by_dk,
            )
        for run_ in (tf, rmt):
            run_.pop("task")
            entry[run_["arch"]] = run_
        entry["reach"] = fraction_to_reach(
            (rmt["tokens"], rmt["eval_loss"]),
            (tf["tokens"], tf["eval_loss"]),
            rmt["train_flops_per_token_no_vocab"],
            tf["train_flops_per_token_no_vocab"],
        )
        writer.write(
            i,
            {
                f"{a}_{k}": entry[a][k]
                for a in ("transformer", "rmt")
                for k in ("final_eval_loss", "params", "train_flops_per_token")
            },
        )
        sizes.append(entry)
    writer.close()
    return {"sizes": sizes, **_analyse(sizes, workdir), "paper": PAPER}


def _analyse(sizes: list[dict], workdir: pathlib.Path) -> dict:
    out: dict = {"fits": {}}
    points_c, points_p, curves, fits = {}, {}, {}, {}
    for arch in ("transformer", "rmt"):
        runs = [s[arch] for s in sizes]
        compute = np.array([r["train_flops_per_token"] * r["tokens"][-1] for r in runs])
        params = np.array([r["non_embedding_params"] for r in runs])
        loss = np.array([r["final_eval_loss"] for r in runs])
        fit = fit_power_law(compute, loss, with_offset=len(runs) >= 4)
        fits[arch] = fit
        out["fits"][arch] = {
            "vs_flops": fit._asdict(),
            "vs_params": fit_power_law(params, loss, with_offset=False)._asdict(),
        }
        points_c[arch], points_p[arch] = (compute, loss), (params, loss)
        for r, s in zip(runs, sizes, strict=True):
            flops = np.array(r["tokens"]) * r["train_flops_per_token"]
            curves[f"{arch} D={s['width']}"] = (flops, r["eval_loss"])
    plot_curves(
        curves,
        workdir / "loss_vs_flops.png",
        xlabel="training FLOPs",
        ylabel="validation loss (nats/byte)",
        logx=True,
        title="rmt_scaling",
    )
    plot_scaling(
        points_c,
        fits,
        workdir / "loss_vs_flops_fit.png",
        xlabel="training FLOPs",
        ylabel="final validation loss",
    )
    plot_scaling(
        points_p,
        None,
        workdir / "loss_vs_params.png",
        xlabel="non-embedding parameters",
        ylabel="final validation loss",
    )
    largest = sizes[-1]
    out["headline"] = {**largest["reach"], "width": largest["width"]}
    if "step_time_ratio" in largest:
        out["headline"]["step_time_ratio"] = largest["step_time_ratio"]
    return out
