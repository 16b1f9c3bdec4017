"""Reusable NNX layers with explicit arguments, the attention dispatch and the baseline Transformer."""
