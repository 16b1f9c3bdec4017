"""DRRho-CLIP (Wei et al., ICML 2025): contrastive image–text training steered by a reference model.

See ``README.md`` beside this file for what is implemented and the results measured. ``losses``
holds the contrastive objectives (CLIP, GCL, DRRho and its surrogate), ``risk`` the general DRRho
risk for per-example losses.
"""
