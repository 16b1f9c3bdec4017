"""Scale check without a pod: compile the paper-size train steps for a simulated 64-device mesh.

``python -m jaxlab.methods.rmt.aot [--devices 64] [--pairs 405m:305m] [--out FILE]`` simulates the
devices on the CPU (it sets ``--xla_force_host_platform_device_count`` before JAX starts, so run it
as its own process), builds a (data, fsdp) mesh, and compiles the transformer and RMT train steps
ahead of time with :func:`jaxlab.core.aot.compile_train_step` — nothing is executed. It prints
per-device parameter + optimizer bytes against the total, which is about 1/devices when FSDP
shards every large array.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--fsdp", type=int, default=64)
    parser.add_argument("--pairs", default="405m:305m", help="transformer:rmt presets, comma-sep")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.devices}"
    )
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import jax.numpy as jnp

    from jaxlab.core.aot import compile_train_step
    from jaxlab.core.config import TrainConfig
    from jaxlab.core.mesh import AxisRules, MeshConfig, make_mesh
    from jaxlab.core.optim import make_optimizer
    from jaxlab.methods.rmt import RMT, RMTConfig
    from jaxlab.nn.lm_task import LMTask
    from jaxlab.nn.transformer import Transformer, TransformerConfig

    mesh = make_mesh(MeshConfig(data=-1, fsdp=args.fsdp))
    tx = make_optimizer(TrainConfig())
    results = {}
    for pair in args.pairs.split(","):
        t_size, r_size = pair.split(":")
        for name, cfg, cls in (
            (f"transformer_{t_size}", TransformerConfig.paper(t_size), Transformer),
            (f"rmt_{r_size}", RMTConfig.paper(r_size), RMT),
        ):
            task = LMTask(build=lambda rngs, c=cfg, k=cls: k(c, rngs=rngs), seq_len=cfg.seq_len)
            shape = (args.batch_size, cfg.seq_len)
            names = ("inputs", "targets", "segment_ids", "positions")
            batch = {k: (shape, jnp.int32) for k in names}
            res = compile_train_step(task, tx, mesh, AxisRules(), batch)
            results[name] = res
            print(
                f"{name}: state {res['state_bytes'] / 2**30:.2f} GiB total, "
                f"{res['state_bytes_per_device'] / 2**20:.1f} MiB per device "
                f"(= 1/{1 / res['sharded_fraction']:.1f} of the total on {res['num_devices']} "
                f"devices); XLA per device: args {res['argument_bytes_per_device'] / 2**20:.1f} "
                f"MiB, temp {res['temp_bytes_per_device'] / 2**20:.1f} MiB; compiled in "
                f"{res['compile_seconds']:.1f} s",
                flush=True,
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
