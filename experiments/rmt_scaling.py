"""The RMT reaches a matched Transformer's loss with fewer FLOPs, params and tokens (Sec. 5.1).

Command:  python experiments/run.py --exp=rmt_scaling          (``--smoke``: under a minute)
          --set seeds=0,1,2,3,4 for more seeds; --set init=gpt2 (or authors) for another init rule
Result:   the headline printed at the end (per pair: the fraction of the transformer's tokens and
          FLOPs the RMT needs to reach its final loss, mean ± sd over seeds, beside the paper's);
          full numbers in summary.json, measured results in jaxlab/methods/rmt/README.md.

Trains matched Transformer/RMT pairs (same core width D = R*Dv, depth, heads, d_ff; see
:mod:`jaxlab.methods.rmt.scaling`) at three sizes on the shipped KJV corpus, each with several
seeds (a seed fixes the initialisation and the data order, shared by the pair). Both sides get one
recipe — the fields ``z_loss``, ``init``, ``alibi``, ``layer_scaled_logits``, ``norm``,
``positions`` and the whole ``train`` group apply to both models alike — so the pair differs in
its residual stream only (the RMT README's recipe table compares this with the authors' code).

Per pair and seed it reads off the paper's headline ratios (Table 3: 0.59 of the tokens and 0.42
of the FLOPs at 305M/405M): the tokens the RMT needs to reach the transformer's final validation
loss, as a fraction of the transformer's, and the FLOPs fraction, both from the analytic count
without the vocabulary terms (the paper's convention) and from XLA's cost analysis of the compiled
train steps (everything a step executes: vocabulary, elementwise work, backward, optimizer; on a
mesh of several devices, the devices' counts added up). It fits a power law L = a*C^-b per
architecture to the seed-mean final losses and times a training step of each model side by side
(Table 4: the RMT 1.77x slower per step). Each model's train step is built and compiled once per
pair: that one program gives the measured FLOPs, trains every seed and is the step that is timed.
``--set data=shards:DIR`` trains every pair on a corpus prepared with :mod:`jaxlab.data.prepare`
(the models take the shards' vocabulary from their index).

``--set preset=paper`` runs the paper's four pairs (46M-305M RMT vs 49M-405M transformer, N = 512)
on OpenWebText with GPT-2's tokenizer (V = 50257), on accelerators. The pod sequence, with a
directory every host can read::

    pip install -e ".[tpu]" datasets    # or ".[gpu]"; datasets only where the corpus is prepared
    python -m jaxlab.data.prepare --tokenizer=gpt2 --input=hf:Skylion007/openwebtext \
        --output=data/openwebtext_gpt2 --workers=16
    python experiments/run.py --exp=rmt_scaling --set preset=paper    # every host, JAXLAB_* set

(the preset reads ``data=shards:data/openwebtext_gpt2``). Preparing needs the network once; the
GPT-2 path is not exercised by the offline tests, which use a BPE trained on the shipped text.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import NamedTuple

import jax
import numpy as np
from flax import nnx

from jaxlab.core.aot import compile_train_step
from jaxlab.core.config import TrainConfig, check, check_choices, to_dict
from jaxlab.core.experiment import select_preset
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import AxisRules, MeshConfig, make_mesh
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import pairs_figure, save_figure, scaling_figure
from jaxlab.core.scaling import format_mean_sd, mean_sd
from jaxlab.core.step import LrGroups, TrainProgram, build_train_program
from jaxlab.core.sweep import Run, check_seeds, mean_curve, read_curve, sweep
from jaxlab.core.timing import step_seconds
from jaxlab.lm.config import AlibiName, NormName, PositionsName
from jaxlab.lm.task import LMTask, compile_lm_train_step, fit_vocab
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.methods.rmt.mup import mup_lr_groups
from jaxlab.methods.rmt.scaling import matched_pair, pair_reach, scaling_fits
from jaxlab.nn.init import InitName
from jaxlab.nn.layers import count_params, non_embedding_params

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
    seeds: tuple[int, ...] = (0, 1, 2)
    # The recipe both models share (defaults: the authors' code where it is one choice for both;
    # init: the paper's variance analysis applied to every matrix, see jaxlab.nn.init).
    z_loss: float = 1e-4  # in the objective, not in the reported loss
    init: InitName = "fan_in"
    alibi: AlibiName = "geometric"
    layer_scaled_logits: bool = True
    norm: NormName = "rmsnorm"
    positions: PositionsName = "alibi"
    paper_pairs: bool = False  # use the paper's presets instead of widths/layers
    mup: bool = False  # µP learning rates for the RMTs (only), the smallest pair as the base model
    data: str = "kjv"  # kjv | text file or directory | hf:NAME | shards:DIR (jaxlab.data.prepare)
    tokenizer: str = ""  # with shards: the tokenizer they must have been made with ("" = any)
    time_rounds: int = 5  # interleaved timing rounds per pair (0 skips the step-time benchmark)
    train: TrainConfig = TrainConfig()
    mesh: MeshConfig = MeshConfig()

    def __post_init__(self) -> None:
        check_choices(self)
        check(len(self.widths) == len(self.layers), "widths and layers need the same length")
        check(len(self.widths) >= 2 or self.paper_pairs, "rmt_scaling needs at least two sizes")
        check(self.head_dim > 0, f"head_dim must be positive, got {self.head_dim}")
        for w in self.widths:
            check(w % self.head_dim == 0, f"width {w} is not a multiple of head_dim")
        check(self.d_key >= 0 and self.residual_ratio > 0, "need d_key >= 0, residual_ratio > 0")
        check(self.z_loss >= 0, f"z_loss must be >= 0, got {self.z_loss}")
        check_seeds(self.seeds)
        check(self.time_rounds >= 0, "time_rounds must be >= 0 (0 skips the timing)")
        # Every pair now, not when the sweep reaches it; arms are named by width, so one each.
        widths = [t.d_model for t, _ in self.pairs()]
        check(len(set(widths)) == len(widths), f"widths={list(widths)} repeats a width")

    def recipe(self) -> dict:
        """The model fields both sides of a pair take alike."""
        return dict(
            init=self.init,
            alibi=self.alibi,
            layer_scaled_logits=self.layer_scaled_logits,
            norm=self.norm,
            positions=self.positions,
        )

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
            kw = dict(vocab_size=256, **self.recipe())
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
                **self.recipe(),
            )
            for w, n in zip(self.widths, self.layers, strict=True)
        ]


PRESETS = {
    # Three seeds of three pairs, 200 steps each (the method README gives the measured wall time).
    "default": lambda: Config(
        train=TrainConfig(
            steps=200,
            batch_size=16,
            learning_rate=3e-3,
            warmup_steps=20,
            checkpoint_every=100,
            eval_every=25,
            eval_batches=8,
            log_every=25,
        )
    ),
    "smoke": lambda: Config(
        widths=(32, 48),
        layers=(1, 1),
        d_key=16,
        seq_len=32,
        seeds=(0, 1),
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
    ),
    "paper": lambda: Config(
        paper_pairs=True,
        seq_len=512,
        data="shards:data/openwebtext_gpt2",
        tokenizer="gpt2",
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
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("rmt_scaling", PRESETS, preset)


class _Arm(NamedTuple):
    """One model of a pair, built once: its task and the program that trains it."""

    model_cfg: TransformerConfig | RMTConfig
    task: LMTask
    lr_groups: LrGroups | None  # µP's rates (RMTs with mup=True), else the loop's one rate
    program: TrainProgram  # the one run_training would build for cfg.train on cfg.mesh


def _arm(model_cfg, cfg: Config, mesh: jax.sharding.Mesh, rules: AxisRules) -> _Arm:
    """The language-modelling task of one model (both architectures alike) and its program."""
    cls = RMT if isinstance(model_cfg, RMTConfig) else Transformer
    task = LMTask(
        build=lambda rngs: cls(model_cfg, rngs=rngs),
        seq_len=model_cfg.seq_len,
        source=cfg.data,
        z_loss=cfg.z_loss,
        tokenizer=cfg.tokenizer or None,
    )
    lr_groups = mup_lr_groups(model_cfg) if getattr(model_cfg, "mup", False) else None
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):  # as in the loop
        program = build_train_program(
            task,
            cfg.train,
            mesh,
            rules,
            init_key=jax.random.key(cfg.train.seed),  # its shape only: every seed's program
            lr_groups=lr_groups,
        )
    return _Arm(model_cfg, task, lr_groups, program)


def _describe(
    arm: _Arm,
    batch: dict[str, np.ndarray],
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
    exp: Config,
) -> dict:
    """Sizes and FLOPs per token of one model: analytic, and measured on its train step, which is
    compiled here (ahead of time, for ``batch``'s shapes) for the training and the timer too."""
    compiled = compile_train_step(
        arm.program, mesh, rules, {k: (v.shape, v.dtype) for k, v in batch.items()}
    )
    model = nnx.merge(arm.program.graphdef, arm.program.abstract_state)[0]  # shapes only
    cfg, tokens = arm.model_cfg, batch["inputs"].size
    if compiled["num_devices"] == 1:  # XLA's count of the trained program is the whole step's
        step_flops = compiled["flops_per_device"]
    else:  # each device of a sharded step repeats the replicated optimizer update, which a count
        # per token must not multiply: the count is the same step's on one device
        step_flops = compile_lm_train_step(
            type(model),
            cfg,
            batch_size=batch["inputs"].shape[0],
            mesh_cfg=MeshConfig(data=1),
            train_cfg=exp.train,
            z_loss=exp.z_loss,
        )["flops_per_device"]
    return {
        "params": count_params(model),
        "non_embedding_params": non_embedding_params(model),
        "train_flops_per_token": cfg.flops_per_token().train,
        "train_flops_per_token_no_vocab": cfg.flops_per_token(include_vocab=False).train,
        "measured_train_flops_per_token": step_flops / tokens,
    }


def _run(arm: _Arm, cfg: Config, seed: int) -> Run:
    """One model with one seed: its config and its training (see core.sweep)."""
    train = dataclasses.replace(cfg.train, seed=seed)
    record = {"model": to_dict(arm.model_cfg), "train": to_dict(train), "z_loss": cfg.z_loss}
    full = {**record, "data": cfg.data, "tokenizer": cfg.tokenizer, "mesh": to_dict(cfg.mesh)}

    def fit(workdir: pathlib.Path) -> dict:
        run_training(
            arm.task,
            train,
            workdir,
            mesh_cfg=cfg.mesh,
            config_record=record,
            lr_groups=arm.lr_groups,
            program=arm.program,
        )
        tokens, losses = read_curve(workdir)
        _, bits = read_curve(workdir, "eval_bits_per_byte")
        return {
            "seed": seed,
            "tokens": tokens,
            "eval_loss": losses,
            "final_eval_loss": losses[-1],
            "final_eval_bits_per_byte": bits[-1],
        }

    return Run(full, fit)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    mesh, rules = make_mesh(cfg.mesh), AxisRules()  # the loop's, for cfg.mesh
    sizes = []
    with MetricWriter(workdir, tensorboard=False) as writer:
        pairs = [(fit_vocab(t, cfg.data), fit_vocab(r, cfg.data)) for t, r in cfg.pairs()]
        for i, (tcfg, rcfg) in enumerate(pairs):
            width = tcfg.d_model
            entry = {
                "width": width,
                "layers": tcfg.num_layers,
                "rank": rcfg.rank,
                "d_key": rcfg.d_key,
                "d_value": rcfg.d_value,
            }
            arms = {
                arch: _arm(c, cfg, mesh, rules)
                for arch, c in (("transformer", tcfg), ("rmt", rcfg))
            }
            batch = arms["transformer"].task.eval_batches(cfg.train.batch_size, 1)[0]
            described = {
                arch: _describe(arm, batch, mesh, rules, cfg) for arch, arm in arms.items()
            }
            named = {f"{arch}_D{width}": arm for arch, arm in arms.items()}
            swept = sweep(
                workdir, list(named), cfg.seeds, lambda n, s, named=named: _run(named[n], cfg, s)
            )
            runs = {arch: swept[f"{arch}_D{width}"] for arch in arms}
            for arch in arms:
                losses = [r["final_eval_loss"] for r in runs[arch]]
                entry[arch] = {
                    **described[arch],
                    "final_eval_loss": mean_sd(losses),
                    "runs": runs[arch],
                }
            entry["reach"] = pair_reach(
                runs["transformer"], runs["rmt"], entry["transformer"], entry["rmt"]
            )
            if cfg.time_rounds:
                entry.update(_time_steps(arms, batch, cfg, mesh, rules))
            writer.write(i, _row(entry))
            sizes.append(entry)
    return {"sizes": sizes, **_analyse(sizes, cfg, workdir), "paper": PAPER}


def _time_steps(
    arms: dict[str, _Arm],
    batch: dict[str, np.ndarray],
    cfg: Config,
    mesh: jax.sharding.Mesh,
    rules: AxisRules,
) -> dict:
    """Step times side by side, of the programs :func:`_run` trains; the RMT's grows with its
    residual Dk x Dv, so it is timed at the configured Dk and at Dk = Dv (the paper's 305M shape,
    a program built for the timer alone when it is another)."""
    rcfg = arms["rmt"].model_cfg
    d_keys = sorted({rcfg.d_key, rcfg.d_value})
    timed = {"transformer": arms["transformer"]} | {
        f"rmt_dk{dk}": (
            arms["rmt"]
            if dk == rcfg.d_key
            else _arm(dataclasses.replace(rcfg, d_key=dk), cfg, mesh, rules)
        )
        for dk in d_keys
    }
    timings = step_seconds(
        {name: arm.task for name, arm in timed.items()},
        batch,
        cfg.train,
        mesh_cfg=cfg.mesh,
        rules=rules,
        programs={name: arm.program for name, arm in timed.items()},
        repeats=cfg.time_rounds,
        calls=4,
    )
    secs = {name: t.step.median for name, t in timings.items()}
    by_dk = {dk: secs[f"rmt_dk{dk}"] / secs["transformer"] for dk in d_keys}
    return {
        "seconds_per_step": secs,
        "step_time_ratio": by_dk[rcfg.d_key],
        "step_time_ratio_by_d_key": by_dk,
    }


def _row(entry: dict) -> dict:
    """The experiment-level metrics row of one pair."""
    row = {}
    for arch in ("transformer", "rmt"):
        row[f"{arch}_final_eval_loss"] = entry[arch]["final_eval_loss"]["mean"]
        row[f"{arch}_final_eval_loss_sd"] = entry[arch]["final_eval_loss"]["sd"]
        row[f"{arch}_params"] = entry[arch]["params"]
        row[f"{arch}_train_flops_per_token"] = entry[arch]["train_flops_per_token"]
    for key in ("tokens_fraction", "flops_fraction", "measured_flops_fraction"):
        row[key] = entry["reach"][key]["mean"]
    row["reached_seeds"] = entry["reach"]["reached"]
    if "step_time_ratio" in entry:
        row["step_time_ratio"] = entry["step_time_ratio"]
    return row


def _analyse(sizes: list[dict], cfg: Config, workdir: pathlib.Path) -> dict:
    out: dict = {"fits": {}}
    points_c, points_p, curves, fits = {}, {}, {}, {}
    for arch in ("transformer", "rmt"):
        entries = [s[arch] for s in sizes]
        arch_fit = scaling_fits(entries)
        fits[arch] = arch_fit.vs_flops
        out["fits"][arch] = {
            "vs_flops": arch_fit.vs_flops._asdict(),
            "vs_params": arch_fit.vs_params._asdict(),
        }
        points_c[arch] = (arch_fit.compute, arch_fit.loss)
        points_p[arch] = (arch_fit.params, arch_fit.loss)
        for e, s in zip(entries, sizes, strict=True):
            tokens, mean, sd = mean_curve(
                [r["tokens"] for r in e["runs"]], [r["eval_loss"] for r in e["runs"]]
            )
            curves[f"D={s['width']}", arch] = (tokens * e["train_flops_per_token"], mean, sd)
    fig = pairs_figure(
        curves,
        xlabel="training FLOPs",
        ylabel=f"validation loss (nats/{'token' if cfg.data.startswith('shards:') else 'byte'})",
        logx=True,
        title=f"rmt_scaling: mean ± sd over {len(cfg.seeds)} seeds",
    )
    save_figure(fig, workdir / "loss_vs_flops.png")
    fig = scaling_figure(
        points_c,
        fits,
        xlabel="training FLOPs",
        ylabel="final validation loss (seed mean)",
    )
    save_figure(fig, workdir / "loss_vs_flops_fit.png")
    fig = scaling_figure(
        points_p,
        None,
        xlabel="non-embedding parameters",
        ylabel="final validation loss (seed mean)",
    )
    save_figure(fig, workdir / "loss_vs_params.png")
    headline: dict = {"seeds": len(cfg.seeds), "init": cfg.init}
    for s in sizes:
        reach, tag = s["reach"], f"D={s['width']}"
        losses = [format_mean_sd(s[arch]["final_eval_loss"]) for arch in ("transformer", "rmt")]
        headline[f"{tag} final loss transformer / rmt"] = " / ".join(losses)
        headline[f"{tag} seeds where the rmt reaches the transformer's loss"] = (
            f"{reach['reached']}/{reach['seeds']}"
        )
        headline[f"{tag} tokens fraction"] = format_mean_sd(
            reach["tokens_fraction"], PAPER["tokens_fraction"]
        )
        headline[f"{tag} FLOPs fraction, analytic"] = format_mean_sd(
            reach["flops_fraction"], PAPER["flops_fraction"]
        )
        headline[f"{tag} FLOPs fraction, XLA-measured step"] = format_mean_sd(
            reach["measured_flops_fraction"]
        )
        if "step_time_ratio" in s:
            headline[f"{tag} step time rmt / transformer"] = (
                f"{s['step_time_ratio']:.2f} (paper {PAPER['step_time_ratio']:.2f}, GPU)"
            )
    out["headline"] = headline
    return out
