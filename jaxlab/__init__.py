"""jaxlab: eight ICML 2025 methods as pure functional JAX/Flax modules.

Subpackages: ``jaxlab.core`` (configs, training loop, checkpoints, metrics, mesh, FLOPs, scaling
fits), ``jaxlab.data`` (grain pipelines and shipped datasets), ``jaxlab.nn`` (layers, attention
dispatch, baseline Transformer) and ``jaxlab.methods`` (one package per paper). Importing ``jaxlab``
is cheap: subpackages are imported on use.
"""

__version__ = "0.1.0"
