"""SST pre-trains a byte-level LM closer to full rank than LoRA, ReLoRA* and GaLore at equal rank.

With a fraction of full-rank AdamW's optimizer state.

Command:  python experiments/run.py --exp=sst_pretrain       (``--smoke``: tiny shapes, 7 runs)
Result:   the headline printed at the end: validation perplexity per method, the perplexity-gap
          reduction 1 − (ppl_SST − ppl_full)/(ppl_low-rank − ppl_full) against the best low-rank
          baseline, trainable parameters, optimizer-state bytes and step times relative to full
          rank, the seed-paired gap reduction against every baseline with the step from which
          SST stays ahead (``headline.paired``), and the RMT+SST row; measured numbers in
          ``jaxlab/methods/sst/README.md``

A byte-level decoder (:class:`jaxlab.lm.transformer.Transformer`) on the shipped KJV corpus, with
rank r ≈ 6% of the width (the paper's LLaMA-1.3B ratio, Zhao et al., ICML 2025, Table 4), trained
at equal steps by full-rank AdamW, LoRA, ReLoRA*, GaLore and SST (:mod:`jaxlab.methods.sst`): one
recipe (schedule shape, clipping, batches, steps, paired seeds) with one learning rate per method,
the best of ``lr_grid`` on short seed-0 runs (:func:`~jaxlab.methods.sst.tuning.choose_rates`;
GaLore, at its paper's scale α = 0.25, searches the grid divided by α: its projected matrices
take the same Adam steps α·lr, its embeddings and weight decay the larger rate, as in GaLore's
recipe, :func:`~jaxlab.methods.sst.tuning.method_rates`);
SST follows the paper's iteration schedule (App. F) scaled to hold 4 rounds
(:func:`~jaxlab.methods.sst.config.scaled_iteration`); only how the attention and MLP maps are
trained differs (embeddings and the output head train at full rank in every run, as in the
paper). The gradient-norm traces show ReLoRA*'s drop after each merge (B = 0 makes A's gradient
vanish). An extra row trains the matched Residual Matrix Transformer (:mod:`jaxlab.methods.rmt`)
with SST on its MLP maps (its attention reads and writes the residual matrix through keys, not
linear maps), at the Transformer's rate of the same method.
``--set preset=paper`` / ``paper_130m`` give LLaMA-1.3B / 130M shapes (GaLore's protocol: 100K /
20K steps of 512 rows of 256 tokens) for accelerators.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

from jaxlab.core.config import TrainConfig, check, to_dict
from jaxlab.core.errors import ConfigError
from jaxlab.core.experiment import select_preset
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import MeshConfig
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import curves_figure, save_figure
from jaxlab.core.scaling import mean_sd
from jaxlab.core.sweep import Run, check_seeds, read_curve, sweep
from jaxlab.core.timing import step_seconds
from jaxlab.lm.task import LMTask, fit_vocab
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.methods.rmt.scaling import matched_pair
from jaxlab.methods.sst import METHODS, LowRankTask, SSTConfig
from jaxlab.methods.sst.config import scaled_iteration
from jaxlab.methods.sst.tuning import choose_rates, method_rates
from jaxlab.nn.spectral import Spectral

LOW_RANK = ("lora", "relora", "galore")
PAPER = {"gap_reduction_llama_1.3b": 0.974, "trainable_fraction_llama_1.3b": 0.187}


@dataclasses.dataclass(frozen=True)
class Config:
    model: TransformerConfig
    rmt: RMTConfig
    train: TrainConfig
    sst: SSTConfig
    mesh: MeshConfig = MeshConfig()
    methods: tuple[str, ...] = METHODS
    rmt_methods: tuple[str, ...] = ("full", "sst")  # () skips the RMT rows
    seeds: tuple[int, ...] = (0,)
    data: str = "kjv"
    time_rounds: int = 5  # 0 skips the step timing
    lr_grid: tuple[float, ...] = ()  # () trains every arm at train.learning_rate
    grid_steps: int = 0  # the grid runs' length (seed seeds[0]); 0 means train.steps

    def __post_init__(self) -> None:
        bad = [m for m in (*self.methods, *self.rmt_methods) if m not in METHODS]
        check(not bad, f"methods={bad} are not methods; choose from {list(METHODS)}")
        check_seeds(self.seeds)
        check(self.time_rounds >= 0, "time_rounds must be >= 0 (0 skips the timing)")
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
        for model in (self.model, self.rmt):  # a bad data source or vocabulary fails here
            fit_vocab(model, self.data)
        # The rank must fit every map SST converts: found here, not after the baselines trained.
        for name, model, methods in (("model", self.model, self.methods),
                                     ("rmt", self.rmt, self.rmt_methods)):  # fmt: skip
            if "sst" not in methods:
                continue
            for d_in, d_out in model.linear_shapes():
                try:
                    Spectral.validate(d_in, d_out, rank=self.sst.rank)
                except ConfigError as err:
                    raise ConfigError(f"sst.rank for {name}'s maps: {err}") from None


def _pair(width: int, layers: int, head_dim: int, seq_len: int, d_ff: int = 0):
    """The matched Transformer / RMT pair (RMT recipe, Dk = 4 R) with an optional MLP width."""
    pair = matched_pair(
        width, layers, head_dim=head_dim, d_key=4 * (width // head_dim), seq_len=seq_len,
        vocab_size=256,
    )  # fmt: skip
    return tuple(dataclasses.replace(c, d_ff=d_ff) for c in pair) if d_ff else pair


def _config(pair, train: TrainConfig, sst: SSTConfig, **kw) -> Config:
    return Config(model=pair[0], rmt=pair[1], train=train, sst=sst, **kw)


def _default() -> Config:
    """Width 64 (r = 4, 6.25%), 2 layers, 32-byte contexts: small enough for 3,000 steps of every
    arm, two seeds and the rate grid in the issue's budget; T₃ from :func:`scaled_iteration` so
    that the run holds 4 rounds of ⌈64/4⌉ = 16 iterations (T₃ = 46, warm-up 5)."""
    steps, width, rank = 3000, 64, 4
    t3, warmup = scaled_iteration(steps, k=width, rank=rank, rounds=4)
    return _config(
        _pair(width, 2, 16, 32),
        TrainConfig(
            steps=steps,
            batch_size=16,
            learning_rate=3e-3,
            warmup_steps=100,
            log_every=25,
            eval_every=250,
            checkpoint_every=1000,
            eval_batches=8,
            tensorboard=False,
        ),
        SSTConfig(
            rank=rank,
            resample_every=t3,
            iteration_warmup=warmup,
            relora_every=500,
            relora_warmup=50,
            galore_every=200,
        ),
        seeds=(0, 1),
        lr_grid=(1e-3, 3e-3, 1e-2, 3e-2, 1e-1),
        grid_steps=600,
        time_rounds=3,
    )


PRESETS = {
    "default": _default,
    # One layer (the hooks still redraw or merge every map of a block), one eval batch.
    "smoke": lambda: _config(
        _pair(32, 1, 16, 32),
        TrainConfig(
            steps=20,
            batch_size=8,
            learning_rate=1e-2,
            warmup_steps=2,
            log_every=5,
            eval_every=10,
            checkpoint_every=20,
            eval_batches=1,
            tensorboard=False,
        ),
        SSTConfig(
            rank=2,
            resample_every=4,
            iteration_warmup=1,
            relora_every=10,
            relora_warmup=2,
            galore_every=10,
        ),
        methods=("full", "sst", "relora"),
        rmt_methods=("sst",),
        lr_grid=(1e-2,),  # the grid's path at no extra compile: its run is seed 0's run
        # No step timing (a third of the smoke's time): rmt_scaling's smoke runs the same
        # core.timing.step_seconds; the headline's ratios are then None.
        time_rounds=0,
    ),  # fmt: skip
    # LLaMA-1.3B / 130M shapes (d_model 2048 / 768, 24 / 12 layers, 32 / 12 heads, FFN 5461 /
    # 2048) with r = 6% of the width; byte vocabulary unless data= names a tokenized corpus.
    "paper": lambda: _config(
        _pair(2048, 24, 64, 256, d_ff=5461),
        TrainConfig(
            steps=100_000,
            batch_size=512,
            learning_rate=1e-3,
            warmup_steps=10_000,
            log_every=100,
            eval_every=2000,
            checkpoint_every=2000,
            eval_batches=32,
        ),
        SSTConfig(
            rank=128,
            resample_every=200,
            relora_every=5000,
            relora_warmup=100,
            galore_every=200,
            galore_scale=0.25,
        ),
        mesh=MeshConfig(data=-1, fsdp=8),
        time_rounds=0,
    ),  # fmt: skip
    "paper_130m": lambda: _config(
        _pair(768, 12, 64, 256, d_ff=2048),
        TrainConfig(
            steps=20_000,
            batch_size=512,
            learning_rate=1e-3,
            warmup_steps=2000,
            log_every=100,
            eval_every=1000,
            checkpoint_every=1000,
            eval_batches=32,
        ),
        SSTConfig(
            rank=48,
            resample_every=200,
            relora_every=5000,
            relora_warmup=100,
            galore_every=200,
            galore_scale=0.25,
        ),
        mesh=MeshConfig(data=-1, fsdp=8),
        time_rounds=0,
    ),  # fmt: skip
}


def get_config(preset: str = "default") -> Config:
    return select_preset("sst_pretrain", PRESETS, preset)


def _model(cfg: Config, arch: str) -> TransformerConfig | RMTConfig:
    """The architecture's config with the data's vocabulary (a shard corpus's; bytes: 256)."""
    return fit_vocab(cfg.model if arch == "transformer" else cfg.rmt, cfg.data)


def _tasks(cfg: Config, arch: str, method: str, seed: int) -> LowRankTask:
    model_cfg = _model(cfg, arch)
    cls = Transformer if arch == "transformer" else RMT
    build = lambda r: cls(model_cfg, rngs=r)  # noqa: E731
    inner = LMTask(build=build, seq_len=model_cfg.seq_len, source=cfg.data)
    return LowRankTask(inner, dataclasses.replace(cfg.sst, method=method, seed=seed))


def _run(cfg: Config, arch: str, method: str, seed: int, lr: float, steps: int = 0) -> Run:
    """One architecture and method with one seed at rate ``lr`` (for ``steps`` steps if given):
    its config and its training (core.sweep)."""
    task = _tasks(cfg, arch, method, seed)
    train = dataclasses.replace(cfg.train, seed=seed, learning_rate=lr)
    if steps:
        train = dataclasses.replace(train, steps=steps, checkpoint_every=steps)
    record = {"arch": arch, "method": method, "train": to_dict(train), "sst": to_dict(task.sst)}
    model = to_dict(_model(cfg, arch))
    full = {**record, "model": model, "data": cfg.data, "mesh": to_dict(cfg.mesh)}

    def fit(workdir: pathlib.Path) -> dict:
        run_training(task, train, workdir, mesh_cfg=cfg.mesh, config_record=record, verbose=False)
        eval_steps, eval_loss = read_curve(workdir, "eval_loss", x="step")
        grad_norm_steps, grad_norm = read_curve(workdir, "grad_norm", x="step")
        return {
            "seed": seed,
            "eval_steps": eval_steps,
            "eval_ppl": [math.exp(v) for v in eval_loss],
            "final_ppl": math.exp(eval_loss[-1]),
            "grad_norm_steps": grad_norm_steps,
            "grad_norm": grad_norm,
            **task.memory(train),
        }

    return Run(full, fit)


def _rates(cfg: Config, workdir: pathlib.Path) -> tuple[dict[str, float], dict]:
    """Each method's learning rate: the grid's best on a short run with seed ``seeds[0]`` (scored
    by the final validation perplexity), or ``train.learning_rate`` without a grid; GaLore's grid
    or rate is divided by its scale α (:func:`method_rates`). The RMT arms
    take the Transformer's rate of the same method (the budget has no room for a second grid)."""
    alpha = cfg.sst.galore_scale  # GaLore's rates are the others' divided by α (method_rates)
    if not cfg.lr_grid:
        return {m: method_rates((cfg.train.learning_rate,), m, alpha)[0] for m in METHODS}, {}
    steps = cfg.grid_steps or cfg.train.steps
    best, table = {}, {}
    for m in dict.fromkeys((*cfg.methods, *cfg.rmt_methods)):
        rates, scores = choose_rates(
            workdir / "lr_grid", (m,), method_rates(cfg.lr_grid, m, alpha), cfg.seeds[0],
            lambda m, lr, s: _run(cfg, "transformer", m, s, lr, steps),
            score=lambda result: result["final_ppl"],
        )  # fmt: skip
        best.update(rates)
        table.update(scores)
    for method, lr in best.items():
        print(f"{method}: learning rate {lr:g} (grid {table[method]})")
    return best, table


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    arms = {f"{arch}_{m}": (arch, m) for arch, ms in
            (("transformer", cfg.methods), ("rmt", cfg.rmt_methods)) for m in ms}  # fmt: skip
    rates, grid = _rates(cfg, workdir)
    swept = sweep(
        workdir, list(arms), cfg.seeds,
        lambda arm, s: _run(cfg, *arms[arm], s, rates[arms[arm][1]]),
    )  # fmt: skip
    results: dict[str, dict] = {}
    with MetricWriter(workdir, tensorboard=False) as writer:
        for i, (arm, (arch, method)) in enumerate(arms.items()):
            name = f"{arch}/{method}"
            seeds = swept[arm]
            ppl = mean_sd([r["final_ppl"] for r in seeds])
            results[name] = {
                "val_ppl": ppl,
                "learning_rate": rates[method],
                **{k: seeds[0][k] for k in ("trainable_params", "optimizer_state_bytes")},
                "runs": seeds,
            }
            writer.write(i, {f"{arch}_{method}_val_ppl": ppl["mean"]})
            print(f"{name}: validation perplexity {ppl['mean']:.4f} (sd {ppl['sd']:.4f})")
    if cfg.time_rounds:
        tasks = {f"transformer/{m}": _tasks(cfg, "transformer", m, 0) for m in cfg.methods}
        batch = next(iter(tasks.values())).eval_batches(cfg.train.batch_size, 1)[0]
        secs = step_seconds(
            tasks, batch, cfg.train, mesh_cfg=cfg.mesh, repeats=cfg.time_rounds, calls=3
        )
        for name, t in secs.items():
            results[name]["seconds_per_step"] = {
                "train_step": t.step.median,
                "hooks_per_step": t.hooks_per_step,
            }
    _plots(results, workdir)
    headline = {**_headline(results), **_paired(results)}
    return {"methods": results, "headline": headline, "lr_grid": grid, "paper": PAPER}


def _gap(sst: float, full: float, low: float) -> float | None:
    """The perplexity-gap reduction 1 − (SST − full) / (low-rank − full); None without a gap."""
    return 1 - (sst - full) / (low - full) if low > full else None


def _paired(results: dict) -> dict:
    """Seed-paired gap reductions (seed i of SST against seed i of full rank and of the
    baseline) against every low-rank baseline, with their mean and sample sd, and the crossover:
    the first eval step from which SST's seed-mean perplexity stays below the baseline's."""
    names = {m: f"transformer/{m}" for m in ("full", "sst", *LOW_RANK)}
    if not {names["full"], names["sst"]} <= set(results):
        return {}
    runs = {m: results[n]["runs"] for m, n in names.items() if n in results}
    out = {}
    for base in (m for m in LOW_RANK if m in runs):
        per_seed = [
            _gap(s["final_ppl"], f["final_ppl"], b["final_ppl"])
            for s, f, b in zip(runs["sst"], runs["full"], runs[base], strict=True)
        ]
        curve = [sum(r["eval_ppl"][i] for r in runs["sst"]) / len(runs["sst"])
                 - sum(r["eval_ppl"][i] for r in runs[base]) / len(runs[base])
                 for i in range(len(runs["sst"][0]["eval_steps"]))]  # fmt: skip
        ahead = [d < 0 for d in curve]
        cross = next((i for i in range(len(ahead)) if all(ahead[i:])), None)
        out[base] = {
            "gap_reduction_per_seed": per_seed,
            "gap_reduction": mean_sd(per_seed) if None not in per_seed else None,
            "sst_minus_baseline_ppl": curve,
            "sst_ahead_from_step": None if cross is None else runs["sst"][0]["eval_steps"][cross],
        }
    return {"paired": out}


def _relative(results: dict, arch: str, key: str) -> dict[str, float]:
    full = results.get(f"{arch}/full")
    if full is None:
        return {}
    return {
        name.split("/")[1]: r[key] / full[key]
        for name, r in results.items()
        if name.startswith(arch + "/") and key in r
    }


def _headline(results: dict) -> dict:
    ppl = {name: r["val_ppl"]["mean"] for name, r in results.items()}
    out = {"val_ppl": ppl}
    low = {m: ppl[f"transformer/{m}"] for m in LOW_RANK if f"transformer/{m}" in ppl}
    if low and {"transformer/sst", "transformer/full"} <= set(ppl):
        best = min(low, key=low.get)
        full, sst = ppl["transformer/full"], ppl["transformer/sst"]
        denom = low[best] - full
        out["gap_reduction"] = {
            "against": best,
            "value": 1 - (sst - full) / denom if denom > 0 else None,
        }
    out["trainable_fraction"] = _relative(results, "transformer", "trainable_params")
    out["optimizer_state_fraction"] = _relative(results, "transformer", "optimizer_state_bytes")
    if "transformer/full" in results and "seconds_per_step" in results["transformer/full"]:
        base = results["transformer/full"]["seconds_per_step"]["train_step"]
        out["step_time_ratio"] = {
            name.split("/")[1]: r["seconds_per_step"]["train_step"] / base
            for name, r in results.items()
            if "seconds_per_step" in r
        }
        out["hooks_per_step_ratio"] = {
            name.split("/")[1]: r["seconds_per_step"]["hooks_per_step"] / base
            for name, r in results.items()
            if "seconds_per_step" in r and r["seconds_per_step"]["hooks_per_step"]
        }
    if {"rmt/full", "rmt/sst"} <= set(ppl):
        out["rmt"] = {"full": ppl["rmt/full"], "sst": ppl["rmt/sst"]}
        out["rmt_optimizer_state_fraction"] = _relative(results, "rmt", "optimizer_state_bytes")
    return out


def _plots(results: dict, workdir: pathlib.Path) -> None:
    fig = curves_figure(
        {n: (r["runs"][0]["eval_steps"], r["runs"][0]["eval_ppl"]) for n, r in results.items()},
        xlabel="step",
        ylabel="validation perplexity (bytes)",
        title="sst_pretrain (seed 0)",
        logy=True,
    )
    save_figure(fig, workdir / "val_ppl.png")
    fig = curves_figure(
        {
            n: (r["runs"][0]["grad_norm_steps"], r["runs"][0]["grad_norm"])
            for n, r in results.items()
            if n.startswith("transformer/")
        },
        xlabel="step",
        ylabel="gradient norm (log window mean)",
        title="sst_pretrain: gradient norms (seed 0)",
        logy=True,
    )
    save_figure(fig, workdir / "grad_norm.png")
