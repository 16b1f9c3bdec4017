"""NARD's cheaper variants match its support recovery in less time: to convergence and per step.

Command: ``python experiments/run.py --exp=nard_synthetic`` (``--smoke``; ``--set preset=paper``).

Data: :func:`jaxlab.data.nard_synthetic.make_problem` (X ~ N(0, 1), p = 10 active features with
coefficients ±U(0.5, 1.5), chain-structured Ω, E ~ N(0, Ω⁻¹); no intercept), m = 20, N = 200. For
each d and seed the four NARD algorithms (float64, λ = 0.15, ``fit_intercept=False`` like the
baselines) and the baselines (per-output ``ARDRegression``, ``MultiTaskLassoCV``, two-stage
``LassoCV`` + graphical lasso) are scored on TPR/FPR of the support,
Ω's relative and edge errors, coefficient RMSE, iterations, whether they converged, and time:
seconds to convergence and seconds per iteration, both including the sufficient statistics (the
d×d Gram matrix for ``nard`` and ``sequential``; the surrogate methods never form it) and excluding
compilation. The baselines run to their own tolerances (``ard_tol``, scikit-learn's lasso
tolerance) within generous caps and report whether they converged. Both times against d are fitted
on log-log axes (``timing.png``); TPR, FPR and the fraction of seeds converged are in ``rates.png``;
``summary.json``'s ``headline`` holds the numbers at the largest d.

Presets: ``default`` the issue's grid d ∈ {200, 500, 1000, 2000} × 2 seeds; ``paper`` the same
grid × 3 seeds (the issue's); ``smoke`` d = 40, m = 5, N = 60, 1 seed (no slope).

Measured results live in the run's ``summary.json`` and in ``jaxlab/methods/nard/README.md``.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax

from jaxlab.core.config import check
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import panels_figure, save_figure
from jaxlab.core.sweep import check_seeds
from jaxlab.data.nard_synthetic import make_problem
from jaxlab.methods.nard.api import METHODS
from jaxlab.methods.nard.baselines import BASELINES
from jaxlab.methods.nard.evaluate import score_fit
from jaxlab.methods.nard.report import (
    aggregate,
    headline,
    rates_panels,
    timing_panels,
    timing_slopes,
)

KEYS = (
    "tpr",
    "fpr",
    "omega_rel_error",
    "edge_error",
    "coef_rmse",
    "seconds",
    "seconds_per_iter",
    "stats_seconds",
    "n_iter",
    "converged",
)


@dataclasses.dataclass(frozen=True)
class Config:
    ds: tuple[int, ...] = (200, 500, 1000, 2000)
    m: int = 20
    n: int = 200
    p: int = 10
    seeds: tuple[int, ...] = (0, 1)
    lam: float = 0.15
    methods: tuple[str, ...] = METHODS + BASELINES
    ard_iter: int = 1000  # per output; ARD stops earlier on ard_tol
    ard_tol: float = 1e-3  # scikit-learn's default, on sum |Δw| between iterations
    lasso_iter: int = 10000  # coordinate-descent cap of every lasso fit

    def __post_init__(self):
        check(len(self.ds) >= 1 and min(self.ds) >= self.p, "ds must be sizes >= p")
        check(self.m >= 2 and self.n >= 2, "need m >= 2 outputs and n >= 2 samples")
        check_seeds(self.seeds)
        check(self.lam >= 0 and self.lam < float("inf"), "lam must be a finite number >= 0")
        check(self.ard_iter >= 1 and self.lasso_iter >= 1, "ard_iter and lasso_iter must be >= 1")
        check(0 < self.ard_tol < float("inf"), "ard_tol must be a finite number > 0")
        bad = [x for x in self.methods if x not in METHODS + BASELINES]
        check(not bad, f"unknown methods {bad}; choose from {METHODS + BASELINES}")


PRESETS = {
    "default": lambda: Config(),
    "paper": lambda: Config(seeds=(0, 1, 2)),
    "smoke": lambda: Config(ds=(40,), m=5, n=60, p=3, seeds=(0,)),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("nard_synthetic", PRESETS, preset)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    rows = []
    baseline_kw = {"ard_iter": cfg.ard_iter, "ard_tol": cfg.ard_tol, "lasso_iter": cfg.lasso_iter}
    with jax.enable_x64(True), MetricWriter(workdir, tensorboard=False) as writer:
        for d in cfg.ds:
            for seed in cfg.seeds:
                problem = make_problem(d, cfg.m, cfg.n, cfg.p, seed=seed)
                for method in cfg.methods:
                    # The generator has no intercept and the baselines fit none: the same
                    # recipe for NARD (and the README's numbers), so no centring.
                    kw = {"fit_intercept": False} if method in METHODS else baseline_kw
                    row = {
                        "d": d,
                        "seed": seed,
                        "method": method,
                        **score_fit(method, problem, cfg.lam, **kw),
                    }
                    writer.write(len(rows), row)
                    rows.append(row)
                    print(
                        f"d={d} seed={seed} {method:21s} tpr={row['tpr']:.2f} "
                        f"fpr={row['fpr']:.3f} iters={row['n_iter']} "
                        f"converged={bool(row['converged'])} s={row['seconds']:.4f} "
                        f"s/it={row['seconds_per_iter']:.5f}",
                        flush=True,
                    )
    table = aggregate(rows, KEYS)
    slopes = {key: timing_slopes(table, key=key) for key in ("seconds_per_iter", "seconds")}
    top = {key: timing_slopes(table, 2, key=key) for key in ("seconds_per_iter", "seconds")}
    title = f"NARD synthetic: m={cfg.m}, N={cfg.n}, p={cfg.p}, {len(cfg.seeds)} seed(s)"
    kw = {"xlabel": "number of features d", "title": title, "logx": True}
    fig = panels_figure(timing_panels(table, slopes), logy=True, **kw)
    save_figure(fig, workdir / "timing.png")
    fig = panels_figure(rates_panels(table), **kw)
    save_figure(fig, workdir / "rates.png")
    return {
        "headline": headline(table),
        "table": table,
        "timing_slope": slopes,
        "timing_slope_largest_two_d": top,
    }
