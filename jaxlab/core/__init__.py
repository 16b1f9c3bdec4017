"""Method-agnostic machinery: configs, experiments, training loop, checkpoints, metrics, meshes.

Nothing here imports from ``jaxlab.methods``; methods plug into
:func:`jaxlab.core.loop.run_training` through the :class:`jaxlab.core.loop.Task` protocol.
"""
