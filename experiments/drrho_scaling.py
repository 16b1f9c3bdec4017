"""DRRho's zero-shot error falls faster with data than CLIP's: power laws error = a·n^(−b).

Command:  python experiments/run.py --exp=drrho_scaling       (``--smoke``: under a minute)
Result:   the headline printed at the end: the fitted a, b (± 1σ) of CLIP and of DRRho, and the
          error of each at every size (mean ± sample sd over seeds) (measured numbers: the
          method's README)

The claim (Wei et al., ICML 2025, Sec. 5, Fig. 4): with a reference, the scaling law of the error
against compute has a better exponent — E = 7.15·C^−0.127 for DRRho-CLIP against 5.77·C^−0.116 for
OpenCLIP. Here the number of noisy training pairs n is swept over at least four sizes with steps
proportional to n (so compute ∝ n), each for several seeds; one strong reference, trained once
before everything on its own clean pairs (ten times the largest n, a seed stream no learner sees,
:func:`.pipeline.make_reference_pairs`), steers every DRRho run, as the paper's fixed pretrained
reference does. The error is 1 − zero-shot accuracy on held-out images;
:func:`jaxlab.core.scaling.fit_power_law` (no offset: four points) fits each method over all
(n, seed) points, and the figure shows both laws.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from jaxlab.core.config import TrainConfig, check, to_dict
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter, write_json
from jaxlab.core.plots import save_figure, scaling_figure
from jaxlab.core.scaling import fit_power_law, mean_sd
from jaxlab.core.sweep import Run, check_seeds, sweep
from jaxlab.data.captions import VOCAB
from jaxlab.methods.drrho_clip.model import CLIPConfig
from jaxlab.methods.drrho_clip.pipeline import (
    DataConfig,
    Splits,
    check_recipe,
    evaluate,
    make_reference_pairs,
    make_splits,
    train,
)
from jaxlab.methods.drrho_clip.task import LossConfig


@dataclasses.dataclass(frozen=True)
class Config:
    model: CLIPConfig
    train: TrainConfig  # recipe at the smallest size; steps scale with n
    reference_train: TrainConfig
    sizes: tuple[int, ...] = (1000, 2000, 4000, 8000)
    data: DataConfig = DataConfig()
    loss: LossConfig = LossConfig()
    seeds: tuple[int, ...] = (0, 1, 2, 3)

    def __post_init__(self) -> None:
        check(len(self.sizes) >= 2 and min(self.sizes) > 1, "sizes: at least two sizes > 1")
        check_seeds(self.seeds)
        check(len(set(self.sizes)) == len(self.sizes), f"sizes={list(self.sizes)} repeats a size")
        check_recipe(
            self.data, self.train, self.loss, ("clip", "drrho"),
            {"reference_train": (self.reference_train, "reference_pairs")},
            train_pairs=min(self.sizes),
        )  # fmt: skip


def _train_cfg(steps: int, batch: int, lr: float) -> TrainConfig:
    return TrainConfig(
        steps=steps, batch_size=batch, learning_rate=lr, warmup_steps=max(steps // 20, 1),
        checkpoint_every=steps, eval_every=steps, eval_batches=2, log_every=max(steps // 10, 1),
        tensorboard=False,
    )  # fmt: skip


MODEL = CLIPConfig(image_tower="mlp", width=64, depth=2, heads=4, vocab_size=len(VOCAB))
PRESETS = {
    "default": lambda: Config(
        model=MODEL, train=_train_cfg(80, 64, 2e-3), reference_train=_train_cfg(1000, 128, 2e-3)
    ),
    "smoke": lambda: Config(
        model=CLIPConfig(image_tower="mlp", width=16, depth=1, heads=2, vocab_size=len(VOCAB)),
        train=_train_cfg(4, 16, 3e-3),
        reference_train=_train_cfg(4, 16, 3e-3),
        sizes=(64, 128),
        data=DataConfig(
            reference_pairs=256, weak_reference_pairs=16, test_pairs=64, held_out_pairs=16
        ),
        seeds=(0,),
    ),
    "paper": lambda: Config(
        model=CLIPConfig.vit_b(len(VOCAB)),
        train=_train_cfg(2000, 5120, 3.125e-4),
        reference_train=_train_cfg(10000, 5120, 3.125e-4),
        sizes=(100_000, 200_000, 400_000, 800_000),
        data=DataConfig(reference_pairs=8_000_000, weak_reference_pairs=100_000, test_pairs=10_240),
        loss=LossConfig(tau=0.01, ref_tau=0.01, eps=1e-4, gamma=1.0),
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("drrho_scaling", PRESETS, preset)


def _run(cfg: Config, arm: str, seed: int, workdir: pathlib.Path, cache: dict) -> Run:
    """The reference, or CLIP or DRRho at one size, with one seed (see core.sweep).

    The strong reference is trained once, in ``WORKDIR/strong_reference``, by the first run that
    needs it, and shared by every seed; ``cache`` keeps it and the rendered splits.
    """
    n0 = min(cfg.sizes)
    data = dataclasses.replace(cfg.data, seed=seed)
    ref_loss = dataclasses.replace(cfg.loss, objective="clip")
    ref = {"loss": to_dict(ref_loss), "train": to_dict(cfg.reference_train),
           "pairs": cfg.data.reference_pairs, "mention": cfg.data.reference_mention}  # fmt: skip
    config = {"model": to_dict(cfg.model), "data": to_dict(data), "reference": ref}

    def splits(n: int) -> Splits:
        if ("splits", seed, n) not in cache:
            cache["splits", seed, n] = make_splits(data, train_pairs=n)
        return cache["splits", seed, n]

    def reference():
        if "reference" not in cache:
            pairs, test = make_reference_pairs(cfg.data), splits(n0).test
            args = (cfg.model, ref_loss, cfg.reference_train, pairs, test)
            cache["reference"] = train(*args, workdir / "strong_reference")[0]
        return cache["reference"]

    if arm == "reference":  # its accuracy on this seed's held-out images
        return Run(config, lambda wd: evaluate(reference(), splits(n0)))
    method, n = arm.split("_n")
    n = int(n)
    steps = cfg.train.steps * n // n0
    recipe = dataclasses.replace(
        cfg.train, seed=seed, steps=steps, checkpoint_every=steps, eval_every=steps
    )
    loss = dataclasses.replace(cfg.loss, objective=method)

    def fit(wd: pathlib.Path) -> dict:
        s = splits(n)
        model, _ = train(cfg.model, loss, recipe, s.train, s.test, wd, reference=reference())
        return evaluate(model, s)

    return Run({**config, "loss": to_dict(loss), "train": to_dict(recipe), "n": n}, fit)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    arms = ["reference", *(f"{m}_n{n}" for n in cfg.sizes for m in ("clip", "drrho"))]
    cache: dict = {}
    swept = sweep(workdir, arms, cfg.seeds, lambda a, s: _run(cfg, a, s, workdir, cache))
    errors = {
        m: {n: [1 - r["zero_shot_test"] for r in swept[f"{m}_n{n}"]] for n in cfg.sizes}
        for m in ("clip", "drrho")
    }
    with MetricWriter(workdir, tensorboard=False) as writer:  # one row per seed: each size's errors
        for i, seed in enumerate(cfg.seeds):
            for n in cfg.sizes:
                for m in errors:
                    print(f"seed {seed} n {n} {m}: error {errors[m][n][i]:.4f}", flush=True)
            writer.write(
                seed, {f"error_{m}_n{n}": errors[m][n][i] for m in errors for n in cfg.sizes}
            )
    fits, table = {}, {}
    for method, by_n in errors.items():
        x = np.repeat(cfg.sizes, len(cfg.seeds))
        y = np.concatenate([by_n[n] for n in cfg.sizes])
        fits[method] = fit_power_law(x, y, with_offset=False)
        table[method] = {str(n): mean_sd(by_n[n]) for n in cfg.sizes}
    write_json(
        workdir / "errors.json", {m: {str(n): v for n, v in e.items()} for m, e in errors.items()}
    )
    fig = scaling_figure(
        {m: (np.repeat(cfg.sizes, len(cfg.seeds)), np.concatenate([e[n] for n in cfg.sizes]))
         for m, e in errors.items()},
        fits, xlabel="training pairs n (steps ∝ n)",
        ylabel="zero-shot error (held-out images)", title="drrho_scaling",
    )  # fmt: skip
    save_figure(fig, workdir / "scaling.png")
    headline = {}
    for m, f in fits.items():
        headline.update({f"{m}_a": f.a, f"{m}_b": f.b, f"{m}_b_err": f.b_err})
    headline["drrho_exponent_larger"] = fits["drrho"].b > fits["clip"].b
    for n in cfg.sizes:
        for m in fits:
            headline[f"error_{m}_n{n}"] = table[m][str(n)]["mean"]
    ref_error = mean_sd([1 - r["zero_shot_test"] for r in swept["reference"]])
    headline["error_reference"] = ref_error["mean"]
    headline["seeds"] = len(cfg.seeds)
    return {
        "fits": {m: f._asdict() for m, f in fits.items()},
        "errors": table,
        "reference_error": ref_error,
        "headline": headline,
    }
