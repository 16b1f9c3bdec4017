"""Bilinear BTT and MLR scoring beat multi-head attention whose head dim is below d on in-context
linear regression, at every compute budget (Kuang et al. 2025, Sec. 5.1, Fig. 3).

Command:  python experiments/run.py --exp=icl_regression      (``--smoke``: seconds)
Result:   the headline printed at the end: the error at the last query per model (mean ± sd over
          seeds) beside the zero predictor (about 1) and least squares (about 0), at equal steps
          and, per seed, at equal training FLOPs (the smallest model's total, MHA-8's); error
          against training FLOPs in error_vs_flops.png; full numbers in summary.json, measured
          results in jaxlab/methods/structured_attention/README.md.
Runtime:  the default's 12 runs are sized for about 20 minutes on 2 idle CPU cores (estimated from
          step-time probes against the previous default's measured idle time; the method README
          records the measured wall time), inside a 25-minute budget.

The Garg et al. (2022) set-up: prompts of ``N = 2d`` points with ``x ~ N(0, I/d)``, ``y = w^T x``,
no noise, ``w ~ N(0, I)`` fresh per prompt, read-in/read-out maps
(:mod:`jaxlab.methods.structured_attention.icl_task`). Four models at each ``(d, D)``, identical
but for the scoring function, as the authors' ``scripts/icl_regression/submit_icl_regression.sh``:
8-head MHA (head dim ``D/8``, below ``d`` so that its per-head rank cannot hold the ``d``-dim
inputs), 1-head MHA (the full-rank control), bilinear BTT with 8 heads (TT rank 1, blocks from the
authors' ``factorize``, keys in their ``(a b)`` order, full rank ``D`` per head) and bilinear MLR
with 8 heads whose ranks sum to ``D/8`` per head (the authors' rule: the QK projections cost what
MHA's do). Every model gets the authors' recipe (``train_ICL.py``): QK LayerNorm on, ``1/sqrt``
logit scales (their ICL runs set ``mha_SP_attn_logits_scaling=True`` and leave the bilinear µP
flags off), the RMS cap of the BTT/MLR factors, their ``muPify`` (``parametrization="mup"``:
read-in and positions at N(0, 0.02²), zero-initialised output maps and read-out, N(0, 1/fan_in)
hidden matrices and factors, AdamW rates ``lr * 768 / fan_in`` per matrix), AdamW (b1 0.9, b2 0.95,
eps 1e-20, no weight decay) with a 1,000-step linear warm-up then a constant rate, no gradient
clipping, and a curriculum that reaches the full ``(d, N)`` at 6% of the steps (theirs: from 4
dims and 8 points; here 4 equal stages from ``d/4`` and ``N/4``). Every run gets the same steps,
batch, learning rate and seeds (a seed fixes the init and the prompt stream). Training FLOPs are the
analytic count of each model's forward pass (from the shapes it builds) times 3.

The default is the smallest point of the authors' grid where the bottleneck binds: d = 16, D = 64,
8 heads (head dim 8 = d/2), N = 32, MLR ranks 4|2|1|1 per head (every level's LayerNorm sees at
least 4 numbers), learning rate 1e-4 (the one value in every model's grid of their script), 3
paired seeds. What is smaller than theirs, to fit the budget: 2 layers instead of 6 (a layer fewer
would leave no way to pair a y token with its x), batches of 32 prompts instead of 64, and 1,500
steps (the warm-up, then 500 at the constant rate) instead of 500k. ``--set preset=paper`` gives
their grid (d from 16 to 256, D from 64 to 1024, 6 layers, batches of 64, 500k steps) for
accelerators; D = 16 and 32 are left out, where 8 heads leave an MLR level a LayerNorm of 1 or 2
numbers.
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
from jaxlab.core.plots import pairs_figure, save_figure
from jaxlab.core.scaling import mean_sd
from jaxlab.core.sweep import Run, check_seeds, mean_curve, read_curve, sweep, value_at
from jaxlab.data.icl_regression import least_squares_error
from jaxlab.methods.structured_attention.icl_model import ICLConfig, ICLTransformer
from jaxlab.methods.structured_attention.icl_task import ICLRegressionTask

# model name -> (scoring, heads). ``mha16`` (head dim D/16, 4 at D = 64) is not in the default
# comparison: it asks whether the per-head rank is what limits MHA here (--set models=mha16).
MODELS = {
    "mha8": ("mha", 8),
    "btt8": ("btt", 8),
    "mlr8": ("mlr", 8),
    "mha1": ("mha", 1),
    "mha16": ("mha", 16),
}
DEFAULT_MODELS = ("mha8", "btt8", "mlr8", "mha1")


@dataclasses.dataclass(frozen=True)
class Config:
    dims: tuple[int, ...] = (16,)  # d; prompts hold 2d points
    widths: tuple[int, ...] = (64,)  # the 8-head MHA's head dim D / 8 = 8 is d / 2
    models: tuple[str, ...] = DEFAULT_MODELS
    num_layers: int = 2
    # Per head at widths[0], scaled by D / widths[0]; sum = D / 8 (the 8-head MHA's head dim), as
    # the authors' sum_l r_l = d_head. Under qk_norm every level's LayerNorm needs r_l 2^l >= 3
    # numbers (scoring.MIN_LEVEL_WIDTH); 4|2|1|1 gives 4, 4, 4, 8 (16|8|4|4 at D = 256 is one of
    # the authors' rank lists).
    mlr_ranks: tuple[int, ...] = (4, 2, 1, 1)
    # The authors' recipe (module docstring); each a switch of ICLConfig.
    qk_norm: bool = True
    logit_scale: str = "sqrt"
    rms_cap: bool = True
    parametrization: str = "mup"
    seeds: tuple[int, ...] = (0, 1, 2)
    # The curriculum reaches (d, N) at this fraction of the steps (0: none; the authors' 0.06).
    curriculum_fraction: float = 0.06
    # A model has left the zero predictor's plateau when its error is below (1 - margin) x the
    # zero predictor's; the comparisons with MHA-8 are undecided (None) while neither has.
    plateau_margin: float = 0.05
    train: TrainConfig = TrainConfig()

    def __post_init__(self) -> None:
        check(self.num_layers > 0, "num_layers must be positive")
        check(0 <= self.plateau_margin < 1, "plateau_margin must lie in [0, 1), e.g. 0.05")
        check(len(self.dims) >= 1 and min(self.dims) > 0, "dims: give at least one positive d")
        check(len(self.widths) >= 1, "need at least one width")
        check_seeds(self.seeds)
        check(len(self.models) >= 1, f"models is empty; choose from {list(MODELS)}")
        for m in self.models:
            check(m in MODELS, f"unknown model {m!r}; choose from {list(MODELS)}")
        # Every width splits into the heads of every model, before the MLR ranks are looked at:
        # a width that 8 heads cannot share is the mistake, not the ranks fitted to another one.
        for heads in sorted({MODELS[m][1] for m in self.models}, reverse=True):
            bad = [w for w in self.widths if w <= 0 or w % heads]
            names = ", ".join(m for m in self.models if MODELS[m][1] == heads)
            check(
                not bad,
                f"widths={self.widths}: {bad[0] if bad else 0} does not split into the {heads} "
                f"heads of {names}; give widths that are positive multiples of {heads}",
            )
        base = self.widths[0]
        if "mlr8" in self.models:  # MLR's per-head ranks add up to the 8-head MHA's head width
            for w in self.widths:
                check(
                    w % base == 0,
                    f"widths={self.widths}: {w} is not a multiple of widths[0]={base}, from which "
                    "mlr8's ranks are scaled",
                )
            check(
                sum(self.mlr_ranks) * 8 == base,
                f"mlr_ranks={self.mlr_ranks} sum to {sum(self.mlr_ranks)}, but the 8 heads of "
                f"mlr8 at widths[0]={base} are {base // 8} wide; give mlr_ranks that sum to "
                f"{base // 8} (per head, level 0 first), or change widths",
            )
        for d in self.dims:  # build every model config now, so a bad option fails here
            for w in self.widths:
                for m in self.models:
                    self.model(m, d, w)

    def model(self, name: str, dim: int, width: int) -> ICLConfig:
        scoring, heads = MODELS[name]
        return ICLConfig(
            dim=dim,
            n_points=2 * dim,
            d_model=width,
            num_layers=self.num_layers,
            num_heads=heads,
            scoring=scoring,
            mlr_ranks=tuple(r * width // self.widths[0] for r in self.mlr_ranks),
            qk_norm=self.qk_norm,
            logit_scale=self.logit_scale,
            rms_cap=self.rms_cap,
            parametrization=self.parametrization,
        )


# The authors' optimiser (train_ICL.py, muPify): AdamW b1 0.9, b2 0.95, eps 1e-20, no weight decay,
# no clipping, a 1,000-step linear warm-up then a constant rate (their get_lr_mult with
# min_lr = lr); the per-layer µP rates come from the task's optimizer (parametrization="mup").
_TRAIN = dict(
    weight_decay=0.0, min_lr_ratio=1.0, grad_clip=0.0, b1=0.9, b2=0.95, eps=1e-20,
    keep_checkpoints=1,
)  # fmt: skip
WARMUP = 1000
# Default steps and batch, sized to the idle 2-core budget (module docstring). The schedule is
# constant after warm-up, so a longer run (--set train.steps=3000) continues this one exactly.
STEPS = 1500
PRESETS = {
    "default": lambda: Config(
        train=TrainConfig(
            steps=STEPS,
            batch_size=32,
            learning_rate=1e-4,
            warmup_steps=WARMUP,
            checkpoint_every=STEPS,
            eval_every=100,
            eval_batches=16,
            log_every=100,
            **_TRAIN,
        )
    ),
    "smoke": lambda: Config(
        dims=(2,),
        widths=(24,),
        mlr_ranks=(3,),
        seeds=(0,),
        num_layers=1,
        curriculum_fraction=0.5,
        train=TrainConfig(
            steps=6,
            batch_size=8,
            learning_rate=1e-4,
            warmup_steps=1,
            checkpoint_every=6,
            eval_every=3,
            eval_batches=1,
            log_every=3,
            **_TRAIN,
        ),
    ),
    "paper": lambda: Config(
        dims=(16, 32, 64, 128, 256),
        widths=(64, 128, 256, 512, 1024),
        num_layers=6,
        train=TrainConfig(
            steps=500_000,
            batch_size=64,
            learning_rate=1e-4,
            warmup_steps=WARMUP,
            checkpoint_every=10_000,
            eval_every=2500,
            eval_batches=16,
            log_every=500,
            **_TRAIN,
        ),
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("icl_regression", PRESETS, preset)


def _run(cfg: Config, name: str, dim: int, width: int, seed: int) -> Run:
    """One model at one ``(d, D)`` with one seed: its config and its training (see core.sweep)."""
    model_cfg = cfg.model(name, dim, width)
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


def _references(cfg: Config, dim: int) -> dict:
    """The zero predictor and least squares on the evaluation prompts every model sees."""
    task = ICLRegressionTask(cfg.model("mha1", dim, cfg.widths[0]))
    batches = task.eval_batches(cfg.train.batch_size, cfg.train.eval_batches)
    xs = np.concatenate([b["xs"] for b in batches])
    ys = np.concatenate([b["ys"] for b in batches])
    return {"zero": float(np.mean(ys[:, -1] ** 2)), "least_squares": least_squares_error(xs, ys)}


def _cells(cfg: Config) -> dict[str, tuple[int, int]]:
    return {f"d{d}_D{w}": (d, w) for d in cfg.dims for w in cfg.widths}


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    refs = {f"d{d}": _references(cfg, d) for d in cfg.dims}
    cells = _cells(cfg)
    arms = {f"{name}_{cell}": (name, *dw) for cell, dw in cells.items() for name in cfg.models}
    swept = sweep(workdir, list(arms), cfg.seeds, lambda arm, s: _run(cfg, *arms[arm], s))
    results: dict[str, dict] = {m: {} for m in cfg.models}
    with MetricWriter(workdir, tensorboard=False) as writer:
        for i, (cell, (dim, width)) in enumerate(cells.items()):
            row = {"dim": dim, "width": width}
            for name in cfg.models:
                model_cfg = cfg.model(name, dim, width)
                model = nnx.eval_shape(lambda c=model_cfg: ICLTransformer(c, rngs=nnx.Rngs(0)))
                flops_per_step = 3 * model.flops() * cfg.train.batch_size
                runs = swept[f"{name}_{cell}"]
                stat = mean_sd([r["final_last_error"] for r in runs])
                results[name][cell] = {
                    "forward_flops_per_prompt": model.flops(),
                    "train_flops_per_step": flops_per_step,
                    "final_last_error": stat,
                    "runs": runs,
                }
                row[f"{name}_last_error"], row[f"{name}_last_error_sd"] = stat["mean"], stat["sd"]
            writer.write(i, row)
    return {"references": refs, "results": results, **_analyse(cfg, results, refs, workdir)}


def _analyse(cfg: Config, results: dict, refs: dict, workdir: pathlib.Path) -> dict:
    cells = _cells(cfg)
    curves = {}
    for name, by_cell in results.items():
        for cell, entry in by_cell.items():
            runs = entry["runs"]
            steps, mean, sd = mean_curve(
                [r["steps"] for r in runs], [r["last_error"] for r in runs]
            )
            d, w = cells[cell]
            curves[f"d={d}, D={w} (8-head head dim {w // 8})", name] = (
                steps * entry["train_flops_per_step"], mean, sd,
            )  # fmt: skip
    fig = pairs_figure(
        curves, xlabel="training FLOPs",
        ylabel="squared error at the last query", logx=True, logy=True,
        title=f"icl_regression: mean ± sd over {len(cfg.seeds)} seeds",
    )  # fmt: skip
    save_figure(fig, workdir / "error_vs_flops.png")
    headline: dict = {"seeds": len(cfg.seeds)}
    lines = [f"icl_regression ({len(cfg.seeds)} seeds; error at the last query, mean ± sd):"]
    # Below this line a model has left the zero predictor's plateau (Config.plateau_margin).
    plateaus = {
        c: (1.0 - cfg.plateau_margin) * refs[f"d{d}"]["zero"] for c, (d, _) in cells.items()
    }
    for cell, (d, w) in cells.items():
        ref = refs[f"d{d}"]
        headline[f"zero_predictor_d{d}"] = ref["zero"]
        headline[f"least_squares_d{d}"] = ref["least_squares"]
        parts = []
        for name in results:
            stat = results[name][cell]["final_last_error"]
            headline[f"{name}_{cell}"] = stat
            parts.append(f"{name} {stat['mean']:.3f} ± {stat['sd']:.3f}")
        below = [
            n for n in results if results[n][cell]["final_last_error"]["mean"] < plateaus[cell]
        ]
        headline[f"below_zero_predictor_{cell}"] = below
        lines.append(f"  d={d} D={w} (8-head head dim {w // 8}; zero predictor {ref['zero']:.3f}, "
                     f"least squares {ref['least_squares']:.2e}): " + ", ".join(parts))  # fmt: skip
    for cell in cells:
        equal = at_equal_flops({name: results[name][cell] for name in results})
        headline[f"at_equal_flops_{cell}"] = equal
        parts = [f"{n} {', '.join(f'{e:.3f}' for e in equal['per_seed'][n])}" for n in results]
        lines.append(f"  {cell} at equal training FLOPs ({equal['flops']:.3g}; per seed): "
                     + "; ".join(parts))  # fmt: skip
    if "mha8" in results:
        for name in ("btt8", "mlr8"):
            if name in results:
                beats = _all_decided(
                    _below(
                        results[name][c]["final_last_error"]["mean"],
                        results["mha8"][c]["final_last_error"]["mean"],
                        plateaus[c],
                    )
                    for c in cells
                )
                headline[f"{name}_beats_mha8_everywhere"] = beats
                lines.append(f"  {name} below 8-head MHA in every (d, D), equal steps: {beats}"
                             " (None: neither off the zero predictor's plateau)")  # fmt: skip
                for cell in cells:
                    per_seed = headline[f"at_equal_flops_{cell}"]["per_seed"]
                    wins = [
                        _below(a, b, plateaus[cell])
                        for a, b in zip(per_seed[name], per_seed["mha8"], strict=True)
                    ]
                    headline[f"{name}_beats_mha8_at_equal_flops_{cell}"] = wins
                    lines.append(f"  {name} below 8-head MHA at equal FLOPs, {cell}, per seed: "
                                 f"{wins}")  # fmt: skip
    print("\n".join(lines))
    return {"headline": headline}


def _below(error: float, mha8: float, plateau: float) -> bool | None:
    """Whether ``error`` is below MHA-8's; None (undecided) while both sit on the zero predictor's
    plateau (neither below ``plateau``), where their difference is evaluation noise."""
    if min(error, mha8) >= plateau:
        return None
    return bool(error < mha8)


def _all_decided(verdicts) -> bool | None:
    """True/False over every cell; None if any cell is undecided."""
    verdicts = list(verdicts)
    return None if any(v is None for v in verdicts) else all(verdicts)


def at_equal_flops(entries: dict) -> dict:
    """Each model's error at the last query, per seed, at the same training FLOPs: the smallest
    total compute of the models (their last evaluated step times FLOPs per step), read off each
    seed's curve by linear interpolation on the FLOP axis (:func:`jaxlab.core.sweep.value_at`).
    ``entries``: model name -> ``{"train_flops_per_step", "runs": [{"steps", "last_error"}]}``."""
    budget = min(
        run["steps"][-1] * entry["train_flops_per_step"]
        for entry in entries.values()
        for run in entry["runs"]
    )
    per_seed = {
        name: [
            value_at(run["steps"], run["last_error"], budget, scale=entry["train_flops_per_step"])
            for run in entry["runs"]
        ]
        for name, entry in entries.items()
    }
    return {"flops": budget, "per_seed": per_seed}
