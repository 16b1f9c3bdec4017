"""A student MLP of a random full-rank teacher: full < SST < min(LoRA, ReLoRA*) at equal rank.

Command:  python experiments/run.py --exp=sst_mlp            (``--smoke``: under a minute)
Result:   the headline printed at the end: each method's validation relative MSE (mean ± sample sd
          over 3 seeds) and whether full < SST < min(LoRA, ReLoRA*) holds; measured numbers in
          ``jaxlab/methods/sst/README.md``

Teacher–student regression (:class:`jaxlab.methods.sst.teacher.TeacherStudentTask`): a
``d -> hidden -> d`` GELU MLP with dense Gaussian weights labels Gaussian inputs; a student of the
same shape is trained by each method at the same rank r (SST, LoRA, ReLoRA*, GaLore) or at full
rank, under one recipe (AdamW, the loop's warmup + cosine schedule, clipping, steps, batches,
seeds); only how the two weight matrices are trained differs (Zhao et al., ICML 2025, compare
their Table 1 and Sec. 5 for the low-rank baselines). GaLore's scale α is 1 so that its learning
rate is the recipe's.
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
from jaxlab.methods.sst.teacher import TeacherStudentTask


@dataclasses.dataclass(frozen=True)
class Config:
    train: TrainConfig
    sst: SSTConfig
    d_model: int = 64
    hidden: int = 256
    rows: int = 16384
    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2)

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in METHODS]
        check(not bad, f"methods={bad} are not methods; choose from {list(METHODS)}")
        check_seeds(self.seeds)
        check(
            min(self.d_model, self.hidden, self.rows) >= 1,
            f"d_model, hidden and rows must be >= 1, got {self.d_model}, {self.hidden}, "
            f"{self.rows}",
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
            iteration_warmup=3,
            relora_every=250,
            relora_warmup=25,
            galore_every=200,
            galore_scale=1.0,
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
            galore_scale=1.0,
        ),
        d_model=16,
        hidden=32,
        rows=1024,
        seeds=(0,),
    ),  # fmt: skip
}


def get_config(preset: str = "default") -> Config:
    return select_preset("sst_mlp", PRESETS, preset)


def _run(cfg: Config, data: TeacherStudentTask, method: str, seed: int) -> Run:
    """One method with one seed: its config and its training (see core.sweep)."""
    task = LowRankTask(data, dataclasses.replace(cfg.sst, method=method, seed=seed))
    train = dataclasses.replace(cfg.train, seed=seed)
    record = {"method": method, "train": to_dict(train), "sst": to_dict(task.sst)}
    full = {**record, "teacher": {"d_model": cfg.d_model, "hidden": cfg.hidden, "rows": cfg.rows}}

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
    data = TeacherStudentTask(d_model=cfg.d_model, hidden=cfg.hidden, rows=cfg.rows)
    swept = sweep(workdir, cfg.methods, cfg.seeds, lambda m, s: _run(cfg, data, m, s))
    results: dict[str, dict] = {}
    with MetricWriter(workdir, tensorboard=False) as writer:
        for i, (method, runs) in enumerate(swept.items()):
            final = mean_sd([r["final"] for r in runs])
            results[method] = {
                "eval_relative_mse": final,
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
        title=f"sst_mlp: rank {cfg.sst.rank} of {cfg.d_model} (seed {cfg.seeds[0]})",
        logy=True,
    )
    save_figure(fig, workdir / "val_relative_mse.png")
    mse = {m: r["eval_relative_mse"]["mean"] for m, r in results.items()}
    order = None
    if {"full", "sst", "lora", "relora"} <= set(mse):
        order = mse["full"] < mse["sst"] < min(mse["lora"], mse["relora"])
    gap = _gap_reduction(mse)
    return {
        "methods": results,
        "headline": {
            "eval_relative_mse": {m: results[m]["eval_relative_mse"] for m in results},
            "full_lt_sst_lt_min_lora_relora": order,
            "gap_reduction_vs_best_low_rank": gap,
            "trainable_params": {m: r["trainable_params"] for m, r in results.items()},
            "rank": cfg.sst.rank,
            "width": cfg.d_model,
            "seeds": len(cfg.seeds),
        },
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
