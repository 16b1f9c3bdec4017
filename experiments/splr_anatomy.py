"""Where one SPLR iteration spends its time, phase by phase, beside the C++ SPLR (issue 32).

Command: ``python experiments/run.py --exp=splr_anatomy`` (``--smoke`` for the CI size). The
measured table: the method README, jaxlab/methods/qn_ot/README.md, written from ``summary.json``.

For each converging case of ``ot_benchmark`` (Synthetic I n = 200 and the MNIST pair, η ∈ {1e-2,
1e-3}; Synthetic I n = 200, η = 1e-3 is also the issue's warm-solve case) SPLR runs to half its
iteration count, and on that iterate the dual evaluation, the top-ρ threshold, the assembly of
``H_Ω`` as triplets, the CG solve and the line search are timed as separate jitted functions,
interleaved with the whole SPLR solve and ``regot.sinkhorn_splr`` on the same input
(:func:`jaxlab.methods.qn_ot.anatomy.splr_anatomy`), with the trips of each nested loop (threshold
passes, CG steps, line-search evaluations), the cost of one trip, and a scalar-body loop of as many
trips for the loops' own overhead. ``metrics.jsonl`` has one row per case (milliseconds; regot's
phases as it prints them with ``verbose=2``); ``summary.json`` holds the rows and the SPLR/regot
ratios.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax

from jaxlab.core.config import check
from jaxlab.core.experiment import select_preset
from jaxlab.core.metrics import MetricWriter
from jaxlab.data.ot_problems import make_problem, parse_problem_spec
from jaxlab.methods.qn_ot.anatomy import PHASES, splr_anatomy


@dataclasses.dataclass(frozen=True)
class Config:
    problems: tuple[str, ...] = ("synthetic1:200", "mnist:784")
    etas: tuple[float, ...] = (1e-2, 1e-3)
    tol: float = 1e-8
    max_iter: int = 1000
    repeats: int = 5  # interleaved timed rounds after one warm-up
    seed: int = 0

    def __post_init__(self):
        check(len(self.problems) > 0, "problems is empty; name at least one, e.g. synthetic1:200")
        for spec in self.problems:
            parse_problem_spec(spec)
        check(len(self.etas) > 0 and all(e > 0 for e in self.etas), "etas must be positive")
        check(self.tol > 0 and self.max_iter >= 1 and self.repeats >= 1, "tol, max_iter, repeats")


PRESETS = {
    "default": lambda: Config(),
    # n = 80: 159 unknowns, above the Cholesky cut-off, so the CG path is what is timed.
    "smoke": lambda: Config(problems=("synthetic1:80",), etas=(1e-2,), repeats=1),
}


def get_config(preset: str = "default") -> Config:
    return select_preset("splr_anatomy", PRESETS, preset)


def run(cfg: Config, workdir: pathlib.Path) -> dict:
    cases = {}
    with jax.enable_x64(True), MetricWriter(workdir, tensorboard=False) as writer:
        step = 0
        for spec in cfg.problems:
            problem = make_problem(*parse_problem_spec(spec), seed=cfg.seed)
            for eta in cfg.etas:
                case = f"{problem.name}_eta{eta:g}"
                row = splr_anatomy(
                    problem, eta, tol=cfg.tol, max_iter=cfg.max_iter, repeats=cfg.repeats
                )
                writer.write(step, {"case": case, **row})
                step += 1
                cases[case] = row
                phases = " ".join(f"{p} {row[p]:.2f}" for p in PHASES)
                print(
                    f"{case:28s} ms: {phases} | sum {row['phases_sum']:.2f} "
                    f"splr/it {row['splr_per_iter']:.2f} regot/it {row['regot_per_iter']:.2f} "
                    f"ratio {row['splr_over_regot_seconds']:.2f} "
                    f"ls evals/it {row['ls_evals_per_iter']:.2f} | trips: threshold "
                    f"{row['threshold_trips']} x {row['threshold_trip']:.3f} cg "
                    f"{row['cg_steps']} x {row['cg_step']:.3f} ls {row['ls_evals_here']} x "
                    f"{row['ls_eval']:.3f} empty {row['empty_loop_trip']:.4f}",
                    flush=True,
                )
    return {
        "cases": cases,
        "splr_over_regot_seconds": {c: r["splr_over_regot_seconds"] for c, r in cases.items()},
        "timing": {"warmup": 1, "repeats": cfg.repeats, "statistic": "median", "unit": "ms"},
    }
