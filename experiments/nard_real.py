"""On real multi-output data NARD predicts held-out outputs like the baselines, with fewer features.

Command: ``python experiments/run.py --exp=nard_real`` (``--smoke``).

Data (offline, :mod:`jaxlab.data.nard_real`): scikit-learn's Linnerud (d = 3, m = 3, N = 20,
leave-one-out) and a diabetes-based set (m = 6 serum measurements; inputs 5 clinical variables,
their 14 squares and products and 20 seeded noise distractors, d = 39, N = 442, 5-fold). For each
method (four NARD variants at λ = 0.1, float64, on data standardised with training statistics and
so without an intercept, and the three baselines run to their own tolerances)
the experiment reports the held-out MSE on standardised outputs and the fraction of the folds' fits
that converged, then fits all the data to list the selected features (and how many are distractors),
the iterations, whether that fit converged, its seconds to convergence and per iteration (NARD's
include its statistics, exclude compilation), and the learned output network as partial correlations
``−Ω_ij / sqrt(Ω_ii Ω_jj)`` (``network_<data>.png``; MSEs in ``heldout_mse.png``).
``summary.json``'s ``headline`` holds the MSEs and feature counts per dataset.

Presets: ``default`` both datasets, all methods; ``smoke`` Linnerud, 3-fold, three methods.

Measured results live in the run's ``summary.json`` and in ``jaxlab/methods/nard/README.md``.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import numpy as np

from jaxlab.core.config import check
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter
from jaxlab.core.plots import bars_figure, matrix_figure, save_figure
from jaxlab.data.nard_real import DATASETS, load
from jaxlab.methods.nard.api import METHODS
from jaxlab.methods.nard.baselines import BASELINES
from jaxlab.methods.nard.evaluate import fit_any, heldout_mse, standardise
from jaxlab.methods.nard.output import partial_correlations


@dataclasses.dataclass(frozen=True)
class Config:
    datasets: tuple[str, ...] = DATASETS
    methods: tuple[str, ...] = METHODS + BASELINES
    lam: float = 0.1
    folds: int = 5
    n_noise: int = 20
    linnerud_loo: bool = True  # leave-one-out on Linnerud's 20 samples instead of `folds`

    def __post_init__(self):
        check(all(d in DATASETS for d in self.datasets), f"datasets must be among {DATASETS}")
        bad = [x for x in self.methods if x not in METHODS + BASELINES]
        check(not bad, f"unknown methods {bad}; choose from {METHODS + BASELINES}")
        check(
            0 <= self.lam < float("inf") and self.folds >= 2 and self.n_noise >= 0,
            "need a finite lam >= 0, folds >= 2, n_noise >= 0",
        )


PRESETS = {
    "default": lambda: Config(),
    "smoke": lambda: Config(
        datasets=("linnerud",),
        methods=("nard", "surrogate", "mtlasso"),
        folds=3,
        linnerud_loo=False,
    ),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("nard_real", PRESETS, preset)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    summary: dict = {}
    step = 0
    with jax.enable_x64(True), MetricWriter(workdir, tensorboard=False) as writer:
        for name in cfg.datasets:
            data = load(name, n_noise=cfg.n_noise)
            loo = name == "linnerud" and cfg.linnerud_loo
            folds = data.X.shape[1] if loo else cfg.folds
            x_all, _ = standardise(data.X, data.X)
            y_all, _ = standardise(data.Y, data.Y)
            res = {}
            for method in cfg.methods:
                # Standardised with training statistics, the data are centred already: NARD
                # fits no intercept, as the baselines.
                kw = {"fit_intercept": False} if method in METHODS else {}
                held = heldout_mse(method, data.X, data.Y, cfg.lam, folds=folds, **kw)
                fitted = fit_any(method, x_all, y_all, cfg.lam, **kw)
                sel = fitted.selected
                feats = [f for f, s in zip(data.features, sel, strict=True) if s]
                res[method] = {
                    "heldout_mse": held.mse,
                    "folds_converged": held.converged,
                    "n_selected": len(feats),
                    "n_noise_selected": int(np.sum(sel & data.noise)),
                    "selected": feats,
                    "converged": fitted.converged,
                    "n_iter": fitted.n_iter,
                    "seconds": fitted.seconds,
                    "seconds_per_iter": fitted.seconds_per_iter,
                }
                if fitted.precision is not None:
                    res[method]["precision"] = np.round(fitted.precision, 4).tolist()
                if method == "nard":
                    fig = matrix_figure(
                        partial_correlations(fitted.precision),
                        labels=data.outputs,
                        title=f"NARD output network ({name}): partial correlations",
                        vmin=-1,
                        vmax=1,
                    )
                    save_figure(fig, workdir / f"network_{name}.png")
                row = {k: v for k, v in res[method].items() if k not in ("selected", "precision")}
                writer.write(step, {"dataset": name, "method": method, **row})
                step += 1
                print(
                    f"{name:9s} {method:21s} mse={held.mse:.4f} selected={len(feats)} "
                    f"converged={fitted.converged} (folds {held.converged:.2f}) "
                    f"s={fitted.seconds:.4f}",
                    flush=True,
                )
            summary[name] = res
    fig = bars_figure(
        {
            f"{name}: held-out MSE": {m: v["heldout_mse"] for m, v in r.items()}
            for name, r in summary.items()
        },
    )
    save_figure(fig, workdir / "heldout_mse.png")
    keys = ("heldout_mse", "n_selected", "n_noise_selected", "converged", "folds_converged")
    headline = {
        name: {key: {m: v[key] for m, v in r.items()} for key in keys}
        for name, r in summary.items()
    }
    return {"headline": headline, **summary}
