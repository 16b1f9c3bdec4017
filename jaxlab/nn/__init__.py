"""Reusable NNX layers with explicit arguments: linear maps (dense and structured), norms, MLP,
embeddings, the attention dispatch, the config every LM shares, the baseline Transformer and the
language-modelling task."""
