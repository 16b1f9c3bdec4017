"""Reusable NNX layers with explicit arguments, attention dispatch, and the baseline Transformer."""
