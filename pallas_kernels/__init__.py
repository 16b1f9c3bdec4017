"""Pallas kernels for jaxlab's hot paths (flash attention, tiled matmul).

One file per op, each with its jnp reference beside the kernel. The kernels themselves land with the
kernels issue; until then this package is intentionally empty and the attention dispatch in
``jaxlab.nn.attention`` reports ``impl="pallas"`` as unavailable.
"""
