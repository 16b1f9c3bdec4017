"""A student MLP of a random full-rank teacher: full < SST < min(LoRA, ReLoRA*) at equal rank.

Command:  python experiments/run.py --exp=sst_mlp            (``--smoke``: under a minute)
          python experiments/run.py --exp=sst_mlp --set preset=deep   (deep tanh teacher)
Result:   the headline printed at the end: each method's validation relative MSE (mean ± sample sd
          over 3 seeds) and whether full < SST < min(LoRA, ReLoRA*) holds; measured numbers in
          ``jaxlab/methods/sst/README.md``

Teacher–student regression (:class:`jaxlab.methods.sst.teacher.TeacherStudentTask`): a
``d -> hidden -> d`` GELU MLP with dense Gaussian weights labels Gaussian inputs; a student of the
same shape is trained by each method at the same rank r (SST, LoRA, ReLoRA*, GaLore) or at full
rank, under one recipe (AdamW, the loop's warmup + cosine schedule, clipping, steps, batches,
seeds); only how the two weight matrices are trained differs (Zhao et al., ICML 2025, compare
their Table 1 and Sec. 5 for the low-rank baselines). GaLore runs at its paper's scale α = 0.25
and at the recipe's rate (and grid) divided by α (:func:`~jaxlab.methods.sst.tuning.method_rates`),
so that its Adam step α·lr is the recipe's. The ``deep`` preset replaces the pair by a deep tanh
teacher and student (64 → 256 → 256 → 256 → 32, :class:`~jaxlab.methods.sst.teacher.TanhMLP`) at
r = 16, with the paper's iteration schedule scaled to 4 rounds and one learning rate per method
from a grid on short runs (:func:`~jaxlab.methods.sst.tuning.choose_rates`); its headline adds the
seed-paired gap reduction beside the paper's small-model range (Zhao et al., ICML 2025: 50-67%).
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
from jaxlab.core.sweep import Run, check_seeds, read_curve, sweep
from jaxlab.methods.sst import METHODS, LowRankTask, SSTConfig
from jaxlab.methods.sst.config import scaled_iteration
from jaxlab.methods.sst.teacher import TeacherStudentTask
from jaxlab.methods.sst.tuning import choose_rates, method_rates

# Zhao et al., ICML 2025: SST's perplexity-gap reduction against the best low-rank method on their
# smaller models (50-67%) and on LLaMA-1.3B (97.4%).
PAPER = {"gap_reduction_small_models": (0.50, 0.67), "gap_reduction_llama_1.3b": 0.974}


@dataclasses.dataclass(frozen=True)
class Config:
    train: TrainConfig
    sst: SSTConfig
    d_model: int = 64
    hidden: int = 256
    widths: tuple[int, ...] = ()  # a deep tanh teacher (TanhMLP) instead of d -> hidden -> d
    rows: int = 16384
    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    lr_grid: tuple[float, ...] = ()  # () trains every method at train.learning_rate
    grid_steps: int = 0  # the grid runs' length (seed seeds[0]); 0 means train.steps

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in METHODS]
        check(not bad, f"methods={bad} are not methods; choose from {list(METHODS)}")
        check_seeds(self.seeds)
        check(
            min(self.d_model, self.hidden, self.rows) >= 1,
            f"d_model, hidden and rows must be >= 1, got {self.d_model}, {self.hidden}, "
            f"{self.rows}",
        )
        check(all(lr > 0 for lr in self.lr_grid), f"lr_grid={self.lr_grid} must be positive")
        check(
            0 <= self.grid_steps <= self.train.steps,
            f"grid_steps={self.grid_steps} must lie in [0, train.steps={self.train.steps}]",
        )
        check(  # a grid run trains grid_steps steps with the same warmup
            not self.grid_steps or self.grid_steps >= self.train.warmup_steps,
            f"grid_steps={self.grid_steps} is below train.warmup_steps="
            f"{self.train.warmup_steps}: the rate-grid runs would end before their warmup; set "
            f"grid_steps >= {self.train.warmup_steps} (0: train.steps)",
        )


_TRAIN = dict(
    batch_size=128, learning_rate=3e-3, weight_decay=0.0, eval_batches=16, tensorboard=False
)
PRESETS = {
    "default": lambda: Config(
        train=TrainConfig(
            steps=3000,
            warmup_steps=100,
            log_every=100,
            eval_every=250,
            checkpoint_every=1000,
            **_TRAIN,
        ),
        sst=SSTConfig(
            rank=4,
            resample_every=25,
            iteration_warmup=0,  # as measured (README); the deep preset has App. F's warm-up
            relora_every=250,
            relora_warmup=25,
            galore_every=200,
        ),
    ),  # fmt: skip
    # Every method once, one seed, a few steps: the run is exercised, not the claim.
    "smoke": lambda: Config(
        train=TrainConfig(
            steps=40,
            warmup_steps=5,
            log_every=20,
            eval_every=20,
            checkpoint_every=40,
            **{**_TRAIN, "eval_batches": 2},
        ),
        sst=SSTConfig(
            rank=2,
            resample_every=5,
            iteration_warmup=1,
            relora_every=20,
            relora_warmup=5,
            galore_every=20,
        ),
        d_model=16,
        hidden=32,
        rows=1024,
        seeds=(0,),
    ),  # fmt: skip
}


def _deep() -> Config:
    """The deep tanh teacher 64 -> 256 -> 256 -> 256 -> 32 at r = 16 (6.25% of the hidden width),
    3,000 steps holding 4 rounds of the 256-wide maps' ⌈256/16⌉ = 16 iterations (T₃ = 46), two
    seeds, a learning rate per method from a grid on 600-step seed-0 runs."""
    steps, rank = 3000, 16
    t3, warmup = scaled_iteration(steps, k=256, rank=rank, rounds=4)
    return Config(
        train=TrainConfig(
            steps=steps,
            warmup_steps=100,
            log_every=100,
            eval_every=250,
            checkpoint_every=1000,
            **_TRAIN,
        ),
        sst=SSTConfig(
            rank=rank,
            resample_every=t3,
            iteration_warmup=warmup,
            relora_every=500,
            relora_warmup=50,
            galore_every=200,
        ),
        widths=(64, 256, 256, 256, 32),
        seeds=(0, 1),
        lr_grid=(1e-3, 3e-3, 1e-2, 3e-2),
        grid_steps=600,
    )


PRESETS["deep"] = _deep


def get_config(preset: str = "default") -> Config:
    return select_preset("sst_mlp", PRESETS, preset)


def _run(
    cfg: Config, data: TeacherStudentTask, method: str, seed: int, lr: float, steps: int = 0
) -> Run:
    """One method with one seed at rate ``lr`` (for ``steps`` steps if given): its config and its
    training (see core.sweep)."""
    task = LowRankTask(data, dataclasses.replace(cfg.sst, method=method, seed=seed))
    train = dataclasses.replace(cfg.train, seed=seed, learning_rate=lr)
    if steps:
        train = dataclasses.replace(train, steps=steps, checkpoint_every=steps)
    record = {"method": method, "train": to_dict(train), "sst": to_dict(task.sst)}
    teacher = {"d_model": cfg.d_model, "hidden": cfg.hidden, "rows": cfg.rows}
    if cfg.widths:  # recorded only when set, so the default's finished runs stay reusable
        teacher["widths"] = list(cfg.widths)
    full = {**record, "teacher": teacher}

    def fit(workdir: pathlib.Path) -> dict:
        summary = run_training(task, train, workdir, config_record=record, verbose=False)
        steps, mse = read_curve(workdir, "eval_relative_mse", x="step")
        return {
            "seed": seed,
            "steps": steps,
            "eval_relative_mse": mse,
            "final": mse[-1],
            "steps_per_second": summary["steps_per_second"],
            **task.memory(train),
        }

    return Run(full, fit)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    data = TeacherStudentTask(
        d_model=cfg.d_model, hidden=cfg.hidden, widths=cfg.widths, rows=cfg.rows
    )
    alpha = cfg.sst.galore_scale  # GaLore's rates are the others' divided by α (method_rates)
    rates = {m: method_rates((cfg.train.learning_rate,), m, alpha)[0] for m in cfg.methods}
    grid = {}
    for m in cfg.methods if cfg.lr_grid else ():  # the best final MSE of a short seed-0 run
        best, table = choose_rates(
            workdir / "lr_grid", (m,), method_rates(cfg.lr_grid, m, alpha), cfg.seeds[0],
            lambda m, lr, s: _run(cfg, data, m, s, lr, cfg.grid_steps or cfg.train.steps),
            score=lambda result: result["final"],
        )  # fmt: skip
        rates.update(best)
        grid.update(table)
    if cfg.lr_grid:
        for method, lr in rates.items():
            print(f"{method}: learning rate {lr:g} (grid {grid[method]})")
    swept = sweep(workdir, cfg.methods, cfg.seeds, lambda m, s: _run(cfg, data, m, s, rates[m]))
    results: dict[str, dict] = {}
    with MetricWriter(workdir, tensorboard=False) as writer:
        for i, (method, runs) in enumerate(swept.items()):
            final = mean_sd([r["final"] for r in runs])
            results[method] = {
                "eval_relative_mse": final,
                "learning_rate": rates[method],
                "trainable_params": runs[0]["trainable_params"],
                "optimizer_state_bytes": runs[0]["optimizer_state_bytes"],
                "runs": runs,
            }
            writer.write(i, {f"{method}_eval_relative_mse": final["mean"]})
            print(f"{method}: validation relative MSE {final['mean']:.4f} ± {final['sd']:.4f}")
    fig = curves_figure(
        {m: (r["runs"][0]["steps"], r["runs"][0]["eval_relative_mse"]) for m, r in results.items()},
        xlabel="step",
        ylabel="validation MSE / target variance",
        title=f"sst_mlp: rank {cfg.sst.rank}, widths {cfg.widths or (cfg.d_model, cfg.hidden)} "
        f"(seed {cfg.seeds[0]})",
        logy=True,
    )
    save_figure(fig, workdir / "val_relative_mse.png")
    mse = {m: r["eval_relative_mse"]["mean"] for m, r in results.items()}
    order = None
    if {"full", "sst", "lora", "relora"} <= set(mse):
        order = mse["full"] < mse["sst"] < min(mse["lora"], mse["relora"])
    gap = _gap_reduction(mse)
    if gap is not None:  # seed-paired: seed i of SST against seed i of full and of the baseline
        best = gap["against"]
        per_seed = [
            _gap_reduction({m: results[m]["runs"][i]["final"] for m in ("full", "sst", best)})[
                "value"
            ]
            for i in range(len(cfg.seeds))
        ]
        gap["per_seed"] = per_seed
        gap["paired"] = mean_sd(per_seed) if None not in per_seed else None
    return {
        "methods": results,
        "headline": {
            "eval_relative_mse": {m: results[m]["eval_relative_mse"] for m in results},
            "full_lt_sst_lt_min_lora_relora": order,
            "gap_reduction_vs_best_low_rank": gap,
            "trainable_params": {m: r["trainable_params"] for m, r in results.items()},
            "rank": cfg.sst.rank,
            "width": cfg.d_model,
            "widths": cfg.widths,  # the deep preset's teacher and student
            "seeds": len(cfg.seeds),
            "learning_rates": rates,
        },
        "lr_grid": grid,
        "paper": PAPER,
    }


def _gap_reduction(metric: dict[str, float]) -> dict | None:
    """1 − (SST − full) / (best low-rank − full) against the best of LoRA, ReLoRA*, GaLore."""
    others = {m: metric[m] for m in ("lora", "relora", "galore") if m in metric}
    if not others or "sst" not in metric or "full" not in metric:
        return None
    best = min(others, key=others.get)
    denom = others[best] - metric["full"]
    value = 1 - (metric["sst"] - metric["full"]) / denom if denom > 0 else None
    return {"against": best, "value": value}
