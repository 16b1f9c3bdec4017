"""Bilinear BTT and MLR scoring beat multi-head attention whose head dim is below d on in-context
linear regression, at every compute budget (Kuang et al. 2025, Sec. 5.1, Fig. 3).

Command:  python experiments/run.py --exp=icl_regression      (``--smoke``: about a minute)
Result:   the headline printed at the end: the error at the last query per model and width
          (mean ± sd over seeds) beside the zero predictor (about 1) and least squares (about 0);
          full numbers in summary.json, measured results in
          jaxlab/methods/structured_attention/README.md.

The Garg et al. (2022) set-up: prompts of ``N = 2d`` points with ``x ~ N(0, I/d)``, ``y = w^T x``,
``w ~ N(0, I)`` fresh per prompt, read-in/read-out maps, a curriculum on the active dimensions and
points (:mod:`jaxlab.methods.structured_attention.icl_task`). Four models at each width ``D``,
identical but for the scoring function: 8-head MHA (head dim ``D/8 < d``), 1-head MHA, bilinear
BTT (TT rank 1) and bilinear MLR (ranks scaled with ``D``). Every run gets the same recipe (steps,
batch, learning rate, schedule, seeds: a seed fixes the init and the prompt stream). Training FLOPs
are the analytic count of each model's forward pass times 3. The default (d = 4, widths 16 and 32,
4 layers, 2,000 steps, no curriculum) is sized for a CPU: at this budget the curriculum and
2 layers held every model near the one-step-gradient-descent error or above (README); ``--set
preset=paper`` gives a paper-like scale (d = 20, widths 64-512, 6 layers, 100k steps, Garg et al.'s
curriculum) for accelerators.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
from flax import nnx

from jaxlab.core.config import TrainConfig, check, to_dict
from jaxlab.core.experiment import select_preset
from jaxlab.core.loop import run_training
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import pairs_figure, panels_figure, save_figure
from jaxlab.core.scaling import mean_sd
from jaxlab.core.sweep import Run, check_seeds, mean_curve, read_curve, sweep
from jaxlab.data.icl_regression import least_squares_error
from jaxlab.methods.structured_attention.icl_model import ICLConfig, ICLTransformer
from jaxlab.methods.structured_attention.icl_task import ICLRegressionTask

# model name -> (scoring, heads)
MODELS = {"mha8": ("mha", 8), "mha1": ("mha", 1), "btt": ("btt", 1), "mlr": ("mlr", 1)}


@dataclasses.dataclass(frozen=True)
class Config:
    dim: int = 4  # d; prompts hold 2d points
    widths: tuple[int, ...] = (16, 32)
    models: tuple[str, ...] = tuple(MODELS)
    num_layers: int = 4
    # At width 16, scaled by D / 16: sum_l r_l 2^l = D (a full-rank M), half MHA's QK width. Each
    # level's LayerNorm acts on r_l 2^l numbers; (2, 1, 1) put 2 under two of them (a LayerNorm of
    # 2 numbers is +-1 whatever they are) and MLR did not learn at D = 16 (README).
    mlr_ranks: tuple[int, ...] = (4, 2, 2)
    seeds: tuple[int, ...] = (0, 1)
    # The curriculum reaches (d, N) at this fraction of the steps (0: none). Off by default: in a
    # 2,000-step run it leaves the later points untrained for most of the run (README).
    curriculum_fraction: float = 0.0
    train: TrainConfig = TrainConfig()

    def __post_init__(self) -> None:
        check(self.dim > 0 and self.num_layers > 0, "dim and num_layers must be positive")
        check(len(self.widths) >= 1, "need at least one width")
        check_seeds(self.seeds)
        for m in self.models:
            check(m in MODELS, f"unknown model {m!r}; choose from {list(MODELS)}")
        for w in self.widths:
            check(w % 16 == 0, f"width {w} must be a multiple of 16 (MLR ranks scale by D / 16)")

    def model(self, name: str, width: int) -> ICLConfig:
        scoring, heads = MODELS[name]
        ranks = tuple(r * width // 16 for r in self.mlr_ranks)
        return ICLConfig(
            dim=self.dim,
            n_points=2 * self.dim,
            d_model=width,
            num_layers=self.num_layers,
            num_heads=heads,
            scoring=scoring,
            mlr_ranks=ranks,
        )


_TRAIN = dict(weight_decay=0.0, warmup_steps=50, grad_clip=1.0, keep_checkpoints=1)
PRESETS = {
    "default": lambda: Config(
        train=TrainConfig(
            steps=2000,
            batch_size=64,
            learning_rate=2e-3,
            checkpoint_every=2000,
            eval_every=250,
            eval_batches=8,
            log_every=250,
            **_TRAIN,
        )
    ),
    "smoke": lambda: Config(
        dim=2,
        widths=(16,),
        seeds=(0,),
        num_layers=1,
        curriculum_fraction=0.5,
        train=TrainConfig(
            steps=6,
            batch_size=8,
            learning_rate=1e-3,
            checkpoint_every=6,
            eval_every=3,
            eval_batches=1,
            log_every=3,
            **{**_TRAIN, "warmup_steps": 1},
        ),  # fmt: skip
    ),
    "paper": lambda: Config(
        dim=20,
        widths=(64, 128, 256, 512),
        num_layers=6,
        seeds=(0, 1, 2),
        curriculum_fraction=0.5,
        train=TrainConfig(
            steps=100_000,
            batch_size=64,
            learning_rate=1e-4,
            checkpoint_every=5000,
            eval_every=2000,
            eval_batches=16,
            log_every=500,
            **_TRAIN,
        ),  # fmt: skip
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("icl_regression", PRESETS, preset)


def _run(cfg: Config, name: str, width: int, seed: int) -> Run:
    """One model at one width with one seed: its config and its training (see core.sweep)."""
    model_cfg = cfg.model(name, width)
    train = dataclasses.replace(cfg.train, seed=seed)
    curriculum_steps = int(cfg.curriculum_fraction * cfg.train.steps)
    record = {"model": to_dict(model_cfg), "train": to_dict(train)}
    full = {**record, "curriculum_steps": curriculum_steps}

    def fit(workdir: pathlib.Path) -> dict:
        task = ICLRegressionTask(model_cfg, curriculum_steps=curriculum_steps)
        run_training(task, train, workdir, config_record=record)
        steps, errors = read_curve(workdir, "eval_last_error", x="step")
        return {"seed": seed, "steps": steps, "last_error": errors, "final_last_error": errors[-1]}

    return Run(full, fit)


def _references(cfg: Config) -> dict:
    """The zero predictor and least squares on the evaluation prompts every model sees."""
    task = ICLRegressionTask(cfg.model("mha1", cfg.widths[0]))
    batches = task.eval_batches(cfg.train.batch_size, cfg.train.eval_batches)
    xs = np.concatenate([b["xs"] for b in batches])
    ys = np.concatenate([b["ys"] for b in batches])
    return {"zero": float(np.mean(ys[:, -1] ** 2)), "least_squares": least_squares_error(xs, ys)}


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    refs = _references(cfg)
    results: dict[str, dict] = {m: {} for m in cfg.models}
    arms = {f"{name}_D{width}": (name, width) for width in cfg.widths for name in cfg.models}
    swept = sweep(workdir, list(arms), cfg.seeds, lambda arm, s: _run(cfg, *arms[arm], s))
    with MetricWriter(workdir, tensorboard=False) as writer:
        for i, width in enumerate(cfg.widths):
            row = {"width": width}
            for name in cfg.models:
                model_cfg = cfg.model(name, width)
                model = nnx.eval_shape(lambda c=model_cfg: ICLTransformer(c, rngs=nnx.Rngs(0)))
                flops_per_step = 3 * model.flops() * cfg.train.batch_size
                runs = swept[f"{name}_D{width}"]
                stat = mean_sd([r["final_last_error"] for r in runs])
                results[name][width] = {
                    "train_flops_per_step": flops_per_step,
                    "final_last_error": stat,
                    "runs": runs,
                }
                row[f"{name}_last_error"], row[f"{name}_last_error_sd"] = stat["mean"], stat["sd"]
            writer.write(i, row)
    return {
        "references": refs,
        "results": _stringify(results),
        **_analyse(cfg, results, refs, workdir),
    }


def _stringify(results: dict) -> dict:
    return {m: {str(w): v for w, v in by_w.items()} for m, by_w in results.items()}


def _analyse(cfg: Config, results: dict, refs: dict, workdir: pathlib.Path) -> dict:
    curves = {}
    for name, by_width in results.items():
        for width, entry in by_width.items():
            runs = entry["runs"]
            steps, mean, sd = mean_curve(
                [r["steps"] for r in runs], [r["last_error"] for r in runs]
            )
            curves[f"D={width}", name] = (steps * entry["train_flops_per_step"], mean, sd)
    fig = pairs_figure(
        curves, xlabel="training FLOPs",
        ylabel="squared error at the last query", logx=True, logy=True,
        title=f"icl_regression d={cfg.dim}: mean ± sd over {len(cfg.seeds)} seeds",
    )  # fmt: skip
    save_figure(fig, workdir / "error_vs_flops.png")
    by_width = {
        name: (list(cfg.widths), [results[name][w]["final_last_error"]["mean"] for w in cfg.widths])
        for name in results
    }
    by_width["zero predictor"] = (list(cfg.widths), [refs["zero"]] * len(cfg.widths))
    fig = panels_figure(
        {"final error at the last query": by_width},
        xlabel="width D", logx=True, logy=True,
    )  # fmt: skip
    save_figure(fig, workdir / "error_vs_width.png")
    headline = {
        "dim": cfg.dim,
        "seeds": len(cfg.seeds),
        **{f"{k}_error": v for k, v in refs.items()},
    }
    lines = [f"icl_regression (d={cfg.dim}, {len(cfg.seeds)} seeds; zero predictor "
             f"{refs['zero']:.3f}, least squares {refs['least_squares']:.2e}):"]  # fmt: skip
    for w in cfg.widths:
        parts = []
        for name in results:
            s = results[name][w]["final_last_error"]
            headline[f"{name}_D{w}"] = s
            parts.append(f"{name} {s['mean']:.3f} ± {s['sd']:.3f}")
        lines.append(f"  D={w} (8-head head dim {w // 8}): " + ", ".join(parts))
    if "mha8" in results:
        for name in ("btt", "mlr"):
            if name in results:
                beats = all(
                    results[name][w]["final_last_error"]["mean"]
                    < results["mha8"][w]["final_last_error"]["mean"]
                    for w in cfg.widths
                )
                headline[f"{name}_beats_mha8_at_every_width"] = beats
                lines.append(f"  {name} below 8-head MHA at every width: {beats}")
    print("\n".join(lines))
    return {"headline": headline}
