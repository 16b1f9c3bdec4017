"""DRRho-CLIP (Wei et al., ICML 2025): contrastive image–text training steered by a reference model.

See ``README.md`` beside this file for what is implemented and the results measured. ``losses``
holds the contrastive objectives (CLIP, GCL, DRRho and its surrogate), ``risk`` the general DRRho
risk for per-example losses, ``jest`` the JEST baseline's joint example selection, ``distributed``
the sharded losses, ``model`` the towers, ``task`` the Task for the shared loop and ``pipeline`` the
steps the experiments share.
"""

from jaxlab.methods.drrho_clip.losses import clip_loss, drrho_loss, drrho_surrogate, gcl_loss
from jaxlab.methods.drrho_clip.model import CLIPConfig, CLIPModel
from jaxlab.methods.drrho_clip.risk import drrho_risk_cvar, drrho_risk_kl
from jaxlab.methods.drrho_clip.task import CLIPTask, LossConfig

__all__ = [
    "CLIPConfig",
    "CLIPModel",
    "CLIPTask",
    "LossConfig",
    "clip_loss",
    "drrho_loss",
    "drrho_risk_cvar",
    "drrho_risk_kl",
    "drrho_surrogate",
    "gcl_loss",
]
