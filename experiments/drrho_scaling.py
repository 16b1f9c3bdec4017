"""DRRho's zero-shot error falls faster with data than CLIP's: power laws error = a·n^(−b).

Command:  python experiments/run.py --exp=drrho_scaling       (``--smoke``: under a minute)
Result:   the headline printed at the end: the fitted a, b (± 1σ) of CLIP and of DRRho, and the
          error of each at every size (mean ± sample sd over seeds) (measured numbers: the
          method's README)

The claim (Wei et al., ICML 2025, Sec. 5, Fig. 4): with a reference, the scaling law of the error
against compute has a better exponent — E = 7.15·C^−0.127 for DRRho-CLIP against 5.77·C^−0.116 for
OpenCLIP. Here the number of noisy training pairs n is swept over at least four sizes with steps
proportional to n (so compute ∝ n), each for several seeds; per seed one weak reference (plain CLIP
on the clean subset) steers every DRRho run. The error is 1 − zero-shot accuracy on held-out
images; :func:`jaxlab.core.scaling.fit_power_law` (no offset: four points) fits each method over
all (n, seed) points, and the figure shows both laws.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from jaxlab.core.config import TrainConfig, check
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter, write_json
from jaxlab.core.plots import save_figure, scaling_figure
from jaxlab.core.scaling import fit_power_law, mean_sd
from jaxlab.data.captions import VOCAB
from jaxlab.methods.drrho_clip.model import CLIPConfig
from jaxlab.methods.drrho_clip.pipeline import DataConfig, evaluate, make_splits, train
from jaxlab.methods.drrho_clip.task import LossConfig


@dataclasses.dataclass(frozen=True)
class Config:
    model: CLIPConfig
    train: TrainConfig  # recipe at the smallest size; steps scale with n
    reference_train: TrainConfig
    sizes: tuple[int, ...] = (1000, 2000, 4000, 8000)
    data: DataConfig = DataConfig()
    loss: LossConfig = LossConfig()
    seeds: int = 3

    def __post_init__(self) -> None:
        check(len(self.sizes) >= 2 and min(self.sizes) > 1, "sizes: at least two sizes > 1")
        check(self.seeds >= 1, "seeds must be >= 1")


def _train_cfg(steps: int, batch: int, lr: float) -> TrainConfig:
    return TrainConfig(
        steps=steps, batch_size=batch, learning_rate=lr, warmup_steps=max(steps // 20, 1),
        checkpoint_every=steps, eval_every=steps, eval_batches=2, log_every=max(steps // 10, 1),
        tensorboard=False,
    )  # fmt: skip


MODEL = CLIPConfig(image_tower="mlp", width=64, depth=2, heads=4, vocab_size=len(VOCAB))
PRESETS = {
    "default": lambda: Config(
        model=MODEL, train=_train_cfg(80, 64, 2e-3), reference_train=_train_cfg(300, 64, 2e-3)
    ),
    "smoke": lambda: Config(
        model=CLIPConfig(image_tower="mlp", width=16, depth=1, heads=2, vocab_size=len(VOCAB)),
        train=_train_cfg(4, 16, 3e-3),
        reference_train=_train_cfg(4, 16, 3e-3),
        sizes=(64, 128),
        data=DataConfig(reference_pairs=64, test_pairs=64, held_out_pairs=16),
        seeds=1,
    ),
    "paper": lambda: Config(
        model=CLIPConfig.vit_b(len(VOCAB)),
        train=_train_cfg(2000, 5120, 3.125e-4),
        reference_train=_train_cfg(10000, 5120, 3.125e-4),
        sizes=(100_000, 200_000, 400_000, 800_000),
        data=DataConfig(reference_pairs=100_000),
        loss=LossConfig(tau=0.01, ref_tau=0.01, eps=1e-4, gamma=1.0),
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("drrho_scaling", PRESETS, preset)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    errors: dict[str, dict[int, list[float]]] = {
        m: {n: [] for n in cfg.sizes} for m in ("clip", "drrho")
    }
    n0 = min(cfg.sizes)
    writer = MetricWriter(workdir, tensorboard=False)  # one row per seed: each size's errors
    for seed in range(cfg.seeds):
        base = make_splits(dataclasses.replace(cfg.data, seed=seed), train_pairs=n0)
        reference, _ = train(
            cfg.model, dataclasses.replace(cfg.loss, objective="clip"),
            dataclasses.replace(cfg.reference_train, seed=seed), base.reference, base.test,
            workdir / f"seed{seed}" / "reference",
        )  # fmt: skip
        for n in cfg.sizes:
            splits = make_splits(dataclasses.replace(cfg.data, seed=seed), train_pairs=n)
            steps = cfg.train.steps * n // n0
            recipe = dataclasses.replace(
                cfg.train, seed=seed, steps=steps, checkpoint_every=steps, eval_every=steps
            )
            for method in ("clip", "drrho"):
                model, _ = train(
                    cfg.model, dataclasses.replace(cfg.loss, objective=method), recipe,
                    splits.train, splits.test, workdir / f"seed{seed}" / f"{method}_n{n}",
                    reference=reference,
                )  # fmt: skip
                err = 1 - evaluate(model, splits)["zero_shot_test"]
                errors[method][n].append(err)
                print(f"seed {seed} n {n} {method}: error {err:.4f}", flush=True)
        writer.write(
            seed, {f"error_{m}_n{n}": errors[m][n][seed] for m in errors for n in cfg.sizes}
        )
    writer.close()
    fits, table = {}, {}
    for method, by_n in errors.items():
        x = np.repeat(cfg.sizes, cfg.seeds)
        y = np.concatenate([by_n[n] for n in cfg.sizes])
        fits[method] = fit_power_law(x, y, with_offset=False)
        table[method] = {str(n): mean_sd(by_n[n]) for n in cfg.sizes}
    write_json(
        workdir / "errors.json", {m: {str(n): v for n, v in e.items()} for m, e in errors.items()}
    )
    fig = scaling_figure(
        {m: (np.repeat(cfg.sizes, cfg.seeds), np.concatenate([e[n] for n in cfg.sizes]))
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
    headline["seeds"] = cfg.seeds
    return {
        "fits": {m: f._asdict() for m, f in fits.items()},
        "errors": table,
        "headline": headline,
    }
