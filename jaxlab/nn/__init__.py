"""Reusable NNX layers with explicit arguments: linear maps (dense and structured), the spectral
layer, initialisation rules, norms, MLP, embeddings and the attention dispatch.

Layers only: ``nn`` imports nothing above :mod:`jaxlab.core` (``tests/test_layout.py`` checks it).
The language-model machinery built from these layers (the config every LM shares, the baseline
Transformer, the language-modelling Task, generation and caches) lives in :mod:`jaxlab.lm`.
"""
