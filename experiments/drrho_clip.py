"""DRRho-CLIP with a strong reference beats CLIP, GCL, JEST, KD at equal steps, and its reference.

Command:  python experiments/run.py --exp=drrho_clip          (``--smoke``: under a minute)
Result:   the headline printed at the end: zero-shot accuracy (held-out images) of every method,
          mean ± sample sd over seeds, the per-seed paired difference DRRho − X (mean ± sd over
          seeds) against each X, and the share of anchors the ε gate switched off (measured
          numbers: the method's README)

The claim (Wei et al., ICML 2025, Sec. 5, Table 2): a target trained with DRRho risk on noisy
pairs, steered by a reference trained elsewhere, is better than training without a reference
(CLIP, GCL), than selection with the same reference (JEST), than distilling it (KD), and than the
reference itself. As in the paper the reference knows something the learner does not: it is
trained once, before every target, on ten times the learner's pairs, all clean, from a seed stream
no learner sees, for four times the learner's steps (:func:`.pipeline.make_reference_pairs`), and
its embeddings of the learner's pairs are cached as task state. The earlier weak reference (plain
CLIP on a small clean subset, the learner's steps) stays as a control: its own row and the
``drrho_weak`` arm, DRRho steered by it. Every target runs the same steps, batch, learning rate,
temperature (τ = 0.01 fixed, the paper's) and towers on the same noisy pairs
(:mod:`jaxlab.data.captions`); only the objective differs. JEST is the DRRho authors' own
(``jointly_sample_batch_softmax``: softmax scores, reference at t = 100, 2 chunks, keep 20%;
:mod:`jaxlab.methods.drrho_clip.jest`), its kept pairs trained with GCL as the authors'
``--fastclip`` runs train them (``loss.jest_loss``); ``--set methods=...,jest_infonce`` adds the
same selection with CLIP's InfoNCE on the kept pairs, ``jest_sigmoid`` the JEST paper's sigmoid,
16-chunk, keep-50% variant. Evaluation: zero-shot accuracy over the 20 classes with prompt
ensembles, on held-out images and on a held-out attribute combination, and recall@1 among held-out
pairs. Every seed renders its own learner data, so the claims are judged by the paired differences
DRRho − X of each seed (``summary.json``: ``drrho_minus``), whose spread excludes the
seed-to-seed variation that every method shares; ``gate`` holds, per DRRho arm, the mean share of
anchors the ε gate of Eq. (9) switched off and the share of those (over a run) whose pair is noisy;
``noise`` holds, per target arm, the share of noisy pairs among those its steps train on (JEST: the
kept ones) and their share of the per-pair gradient norm
(:func:`jaxlab.methods.drrho_clip.task.noisy_gradient_share`).
``--set preset=paper`` gives the paper's ViT-B/16 hyperparameters (τ = 0.01 fixed, ε = 1e-4, γ = 1,
batch 5120, lr 3.125e-4) for a pod; the rendered data stays a stand-in for DFN-192M.
"""

from __future__ import annotations

import dataclasses
import pathlib

from jaxlab.core.config import TrainConfig, to_dict
from jaxlab.core.experiment import select_preset
from jaxlab.core.mesh import AxisRules, batch_shards, make_mesh
from jaxlab.core.metrics import MetricWriter, read_metrics, write_json
from jaxlab.core.plots import bars_figure, curves_figure, save_figure
from jaxlab.core.scaling import mean_sd
from jaxlab.core.sweep import Run, check_seeds, read_curve, run_dir, sweep
from jaxlab.data.captions import VOCAB
from jaxlab.methods.drrho_clip.model import CLIPConfig
from jaxlab.methods.drrho_clip.pipeline import (
    DataConfig,
    Splits,
    arm_loss,
    arm_reference,
    check_recipe,
    check_super_batches,
    evaluate,
    make_reference_pairs,
    make_splits,
    run_shares,
    train,
)
from jaxlab.methods.drrho_clip.task import LossConfig

METHODS = ("clip", "drrho", "jest", "kd", "drrho_kd", "gcl", "drrho_weak")  # headline pairs first
REFERENCES = ("reference", "weak_reference")  # the strong one, and the weak control
GATE = ("gate_off", "gate_off_noisy")  # the ε gate's statistics (GCL and DRRho arms)
NOISE = ("noisy_share", "grad_share_noisy")  # what each step trains on (every target)


@dataclasses.dataclass(frozen=True)
class Config:
    model: CLIPConfig
    train: TrainConfig  # every target's recipe
    reference_train: TrainConfig  # the strong reference's (plain CLIP on its own clean pairs)
    weak_reference_train: TrainConfig  # the weak control's (plain CLIP on the small clean subset)
    data: DataConfig = DataConfig()
    loss: LossConfig = LossConfig()  # τ, ε, γ, KD weight, JEST variant; objective set per arm
    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2, 3)

    def __post_init__(self) -> None:
        check_seeds(self.seeds)
        references = {
            "reference_train": (self.reference_train, "reference_pairs"),
            "weak_reference_train": (self.weak_reference_train, "weak_reference_pairs"),
        }
        check_recipe(self.data, self.train, self.loss, self.methods, references)


def _train_cfg(steps: int, batch: int, lr: float, evals: int = 2, **kw) -> TrainConfig:
    every = max(steps // evals, 1)
    return TrainConfig(
        steps=steps,
        batch_size=batch,
        learning_rate=lr,
        warmup_steps=max(steps // 20, 1),
        weight_decay=0.1,
        checkpoint_every=every,
        eval_every=every,
        eval_batches=4,
        log_every=max(steps // 50, 1),
        tensorboard=False,
        **kw,
    )


SMALL = CLIPConfig(image_tower="mlp", width=64, depth=2, heads=4, vocab_size=len(VOCAB))
STEPS = 250  # every target's; the strong reference gets 4×, the weak one 1×
PRESETS = {
    "default": lambda: Config(
        model=SMALL,
        train=_train_cfg(STEPS, 128, 2e-3),
        reference_train=_train_cfg(4 * STEPS, 128, 2e-3),
        weak_reference_train=_train_cfg(STEPS, 128, 2e-3),
    ),
    "smoke": lambda: Config(
        model=CLIPConfig(image_tower="mlp", width=16, depth=1, heads=2, vocab_size=len(VOCAB)),
        train=_train_cfg(10, 32, 3e-3, evals=1),  # one eval and one checkpoint per run
        reference_train=_train_cfg(12, 32, 3e-3, evals=1),
        weak_reference_train=_train_cfg(6, 32, 3e-3, evals=1),
        data=DataConfig(
            train_pairs=256,
            reference_pairs=512,
            weak_reference_pairs=96,
            test_pairs=96,
            held_out_pairs=32,
        ),  # fmt: skip
        # The arms the smoke test pairs DRRho with; drrho_weak only swaps the reference (the weak
        # one still trains and is evaluated as its own row), which test_pipeline.py pins.
        methods=("clip", "jest", "drrho"),
        seeds=(0,),
    ),
    # The ViT-B/16 run of the paper (Sec. 5, Appendix): τ fixed at 0.01, ε = 1e-4, γ = 1, global
    # batch 5120, lr 3.125e-4; towers at ViT-B width/depth on the 32-px canvas (patch 4).
    "paper": lambda: Config(
        model=CLIPConfig.vit_b(len(VOCAB)),
        train=_train_cfg(30000, 5120, 3.125e-4),
        reference_train=_train_cfg(120000, 5120, 3.125e-4),
        weak_reference_train=_train_cfg(10000, 5120, 3.125e-4),
        data=DataConfig(
            train_pairs=1_000_000,
            reference_pairs=10_000_000,
            weak_reference_pairs=100_000,
            test_pairs=10_240,
        ),  # fmt: skip
        loss=LossConfig(tau=0.01, ref_tau=0.01, eps=1e-4, gamma=1.0),
        seeds=(0,),
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("drrho_clip", PRESETS, preset)


def _references(cfg: Config, workdir: pathlib.Path, cache: dict):
    """``reference(kind)``: the strong or the weak reference, each trained once per experiment
    (in ``WORKDIR/<kind>_reference``; a finished one is only restored) and shared by every seed,
    as the paper's pretrained reference is; with their configs for the sweep records."""
    first = dataclasses.replace(cfg.data, seed=cfg.seeds[0])
    ref_loss = dataclasses.replace(cfg.loss, objective="clip")
    configs = {
        "strong": {"loss": to_dict(ref_loss), "train": to_dict(cfg.reference_train),
                   "pairs": cfg.data.reference_pairs, "mention": cfg.data.reference_mention},
        "weak": {"loss": to_dict(ref_loss), "train": to_dict(cfg.weak_reference_train),
                 "pairs": cfg.data.weak_reference_pairs, "data_seed": cfg.seeds[0]},
    }  # fmt: skip

    def reference(kind: str):
        if ("reference", kind) not in cache:
            test = make_splits(first).test if "test" not in cache else cache["test"]
            cache["test"] = test
            if kind == "strong":
                pairs, recipe = make_reference_pairs(cfg.data), cfg.reference_train
            else:
                pairs, recipe = make_splits(first).weak_reference, cfg.weak_reference_train
            wd = workdir / f"{kind}_reference"
            cache["reference", kind] = train(cfg.model, ref_loss, recipe, pairs, test, wd)[0]
        return cache["reference", kind]

    return reference, configs


def _run(cfg: Config, arm: str, seed: int, workdir: pathlib.Path, cache: dict) -> Run:
    """A reference's evaluation or one target with one seed: its config and training (core.sweep).

    ``cache`` keeps each seed's splits and the two references for the runs that need them, so
    finished runs render and restore nothing.
    """

    def splits(seed: int) -> Splits:
        if ("splits", seed) not in cache:
            cache["splits", seed] = make_splits(dataclasses.replace(cfg.data, seed=seed))
        return cache["splits", seed]

    data = dataclasses.replace(cfg.data, seed=seed)
    reference, ref_configs = _references(cfg, workdir, cache)
    if arm in REFERENCES:
        kind = "strong" if arm == "reference" else "weak"
    else:
        kind = arm_reference(arm)
    config = {"model": to_dict(cfg.model), "data": to_dict(data), "reference": ref_configs[kind]}
    if arm in REFERENCES:
        return Run(config, lambda wd: evaluate(reference(kind), splits(seed)))
    loss = arm_loss(cfg.loss, arm)
    recipe = dataclasses.replace(cfg.train, seed=seed)

    def fit(wd: pathlib.Path) -> dict:
        s = splits(seed)
        model, _ = train(cfg.model, loss, recipe, s.train, s.test, wd, reference=reference(kind))
        result = evaluate(model, s)
        return {**result, **run_shares(read_metrics(wd))}

    return Run({**config, "loss": to_dict(loss), "train": to_dict(recipe)}, fit)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    # What the devices constrain, before the references train (the launcher checked the batches).
    check_super_batches(cfg.train, cfg.loss, cfg.methods, batch_shards(make_mesh(), AxisRules()))
    arms = (*REFERENCES, *cfg.methods)
    cache: dict = {}
    per_seed = sweep(workdir, arms, cfg.seeds, lambda a, s: _run(cfg, a, s, workdir, cache))
    with MetricWriter(workdir, tensorboard=False) as writer:  # one row per seed: every method's
        for i, seed in enumerate(cfg.seeds):
            for m in arms:
                print(f"seed {seed} {m}: {per_seed[m][i]}", flush=True)
            writer.write(seed, {f"{m}_{k}": v for m in arms for k, v in per_seed[m][i].items()})
    metrics = list(per_seed["reference"][0])
    results = {
        m: {k: mean_sd([r[k] for r in rows]) for k in metrics} for m, rows in per_seed.items()
    }
    gate, noise = (
        {
            m: {k: mean_sd([r[k] for r in rows]) for k in keys}
            for m, rows in per_seed.items()
            if all(keys[0] in r for r in rows)
        }
        for keys in (GATE, NOISE)
    )
    write_json(workdir / "per_seed.json", per_seed)
    fig = bars_figure(
        {k: {m: results[m][k]["mean"] for m in results} for k in metrics},
        title=f"drrho_clip: mean over {len(cfg.seeds)} seed(s)",
    )
    save_figure(fig, workdir / "results.png")
    curves = {}
    for m in cfg.methods:
        curves[m] = read_curve(run_dir(workdir, m, cfg.seeds[0]), "eval_zero_shot_acc", x="step")
    fig = curves_figure(
        curves, xlabel="step",
        ylabel="in-batch zero-shot accuracy (eval)", title=f"drrho_clip, seed {cfg.seeds[0]}",
    )  # fmt: skip
    save_figure(fig, workdir / "zero_shot_curves.png")
    zs = {m: results[m]["zero_shot_test"]["mean"] for m in results}
    headline = {f"zero_shot_{m}": v for m, v in zs.items()}
    headline.update({f"zero_shot_{m}_sd": results[m]["zero_shot_test"]["sd"] for m in results})
    paired = {}
    if "drrho" in zs:
        # Per seed, DRRho and X share data and reference: judge DRRho − X by its own spread.
        paired = {
            other: {
                k: mean_sd([d[k] - o[k] for d, o in zip(per_seed["drrho"], rows, strict=True)])
                for k in metrics
            }
            for other, rows in per_seed.items()
            if other != "drrho"
        }
        for other, diff in paired.items():
            headline[f"drrho_minus_{other}"] = diff["zero_shot_test"]["mean"]
            headline[f"drrho_minus_{other}_sd"] = diff["zero_shot_test"]["sd"]
        headline["recall1_i2t_drrho"] = results["drrho"]["recall1_image_to_text"]["mean"]
    for m, g in gate.items():
        headline[f"gate_off_{m}"] = g["gate_off"]["mean"]
        headline[f"gate_off_noisy_{m}"] = g["gate_off_noisy"]["mean"]
    for m, g in noise.items():
        headline[f"noisy_share_{m}"] = g["noisy_share"]["mean"]
        headline[f"grad_share_noisy_{m}"] = g["grad_share_noisy"]["mean"]
    headline["recall1_i2t_clip"] = results.get("clip", results["reference"])[
        "recall1_image_to_text"
    ]["mean"]
    headline["seeds"] = len(cfg.seeds)
    headline["steps"] = cfg.train.steps
    out = {"results": results, "drrho_minus": paired, "gate": gate, "noise": noise}
    return {**out, "headline": headline}
