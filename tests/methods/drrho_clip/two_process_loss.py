"""One of two ``jax.distributed`` processes computing the sharded DRRho loss and its gradient.

Run by ``test_distributed.py`` (not collected by pytest): each process feeds its half of a seeded
global batch with ``make_array_from_process_local_data``; process 0 writes the value and the
gathered gradients to ``argv[1]``.
"""

import sys

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from jaxlab.core.mesh import MeshConfig, make_mesh, maybe_initialize_distributed
from jaxlab.methods.drrho_clip.distributed import sharded_drrho_loss


def global_inputs(batch: int = 16, dim: int = 6, ref_dim: int = 5):
    rng = np.random.default_rng(0)
    out = [rng.normal(size=(batch, k)).astype(np.float32) for k in (dim, dim, ref_dim, ref_dim)]
    return [x / np.linalg.norm(x, axis=1, keepdims=True) for x in out]


def main(path: str) -> None:
    assert maybe_initialize_distributed() and jax.process_count() == 2
    mesh = make_mesh(MeshConfig())  # data axis over all 8 devices of both processes
    sharding = NamedSharding(mesh, PartitionSpec(("data", "fsdp"), None))
    arrays = []
    for x in global_inputs():
        half = x.shape[0] // 2
        local = x[jax.process_index() * half : (jax.process_index() + 1) * half]
        arrays.append(jax.make_array_from_process_local_data(sharding, local, x.shape))

    def loss(img, txt, ref_img, ref_txt):
        return sharded_drrho_loss(img, txt, ref_img, ref_txt, mesh=mesh, tau=0.1, eps=1e-3)

    value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(*arrays)
    grads = [multihost_utils.process_allgather(g, tiled=True) for g in grads]
    if jax.process_index() == 0:
        np.savez(path, value=np.asarray(value), g_img=grads[0], g_txt=grads[1])


if __name__ == "__main__":
    main(sys.argv[1])
