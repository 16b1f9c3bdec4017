"""jaxlab: eight ICML 2025 methods as pure functional JAX/Flax modules.

Subpackages, from the ground floor up: ``jaxlab.core`` (configs, training loop, checkpoints,
metrics, mesh, FLOPs, scaling fits); ``jaxlab.data`` (grain pipelines and shipped datasets),
``jaxlab.nn`` (layers: linear maps, attention dispatch, norms) and ``jaxlab.ot`` (optimal
transport on ott-jax's types); ``jaxlab.lm`` (the language-model machinery: config, baseline
Transformer, Task, generation); ``jaxlab.methods`` (one package per paper); ``jaxlab.testing``
(helpers for tests). Importing ``jaxlab`` is cheap: subpackages are imported on use.
"""

__version__ = "0.1.0"
