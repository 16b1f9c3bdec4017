"""Scale check without a pod: compile the paper-size train steps for a simulated many-device mesh.

:func:`compile_paper_pairs` builds a (data, fsdp) mesh over the process's devices and compiles the
transformer and RMT train steps of the paper presets ahead of time with
:func:`jaxlab.lm.task.compile_lm_train_step` — nothing is executed — returning per-device
parameter + optimizer bytes against the total (about 1/devices when FSDP shards every large array)
and XLA's per-device memory. The experiment ``python experiments/run.py --exp=rmt_aot`` runs it
through :func:`jaxlab.core.aot.run_with_devices` (a child process with the simulated devices);
``python -m jaxlab.methods.rmt.aot`` is kept as a thin command-line wrapper around the same.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from jaxlab.core.mesh import MeshConfig
from jaxlab.lm.task import compile_lm_train_step
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt.config import RMTConfig
from jaxlab.methods.rmt.model import RMT

__all__ = ["compile_paper_pairs", "describe", "main"]


def compile_paper_pairs(
    pairs: Sequence[str],
    *,
    fsdp: int,
    batch_size: int,
    overrides: Mapping[str, Any] | None = None,
    verbose: bool = True,
) -> dict[str, dict[str, float]]:
    """Compiles each ``"transformer:rmt"`` preset pair (e.g. ``"405m:305m"``) on this process's
    devices, as a mesh with ``fsdp`` and data parallelism over the rest.

    Args:
      pairs: preset pairs, transformer size first.
      fsdp: size of the mesh's fsdp axis.
      batch_size: global batch of the compiled step.
      overrides: config fields applied to both presets (e.g. fewer layers for a fast check).
      verbose: print one line per model.

    Returns:
      ``{"transformer_405m": figures, "rmt_305m": figures, ...}`` with the figures of
      :func:`jaxlab.core.aot.compile_train_step`.
    """
    mesh = MeshConfig(data=-1, fsdp=fsdp)
    results = {}
    for pair in pairs:
        t_size, r_size = pair.split(":")
        for name, cls, cfg in (
            (
                f"transformer_{t_size}",
                Transformer,
                TransformerConfig.paper(t_size, **overrides or {}),
            ),
            (f"rmt_{r_size}", RMT, RMTConfig.paper(r_size, **overrides or {})),
        ):
            results[name] = compile_lm_train_step(cls, cfg, batch_size=batch_size, mesh_cfg=mesh)
            if verbose:
                print(describe(name, results[name]), flush=True)
    return results


def describe(name: str, res: Mapping[str, float]) -> str:
    """One line of a model's compiled-step figures."""
    return (
        f"{name}: state {res['state_bytes'] / 2**30:.2f} GiB total, "
        f"{res['state_bytes_per_device'] / 2**20:.1f} MiB per device "
        f"(= 1/{1 / res['sharded_fraction']:.1f} of the total on {res['num_devices']} "
        f"devices); XLA per device: args {res['argument_bytes_per_device'] / 2**20:.1f} "
        f"MiB, temp {res['temp_bytes_per_device'] / 2**20:.1f} MiB; compiled in "
        f"{res['compile_seconds']:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxlab.methods.rmt.aot [--devices 64] [--pairs 405m:305m] [--out FILE]``."""
    from jaxlab.core.aot import run_with_devices
    from jaxlab.methods.rmt import aot  # by module name, not __main__, so the job pickles

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--fsdp", type=int, default=64)
    parser.add_argument("--pairs", default="405m:305m", help="transformer:rmt presets, comma-sep")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    job = functools.partial(
        aot.compile_paper_pairs, args.pairs.split(","), fsdp=args.fsdp, batch_size=args.batch_size
    )
    results = run_with_devices(job, args.devices)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
