"""WARMPOT: partial domain adaptation by partial optimal transport (Naram et al., ICML 2025).

Partial transport itself lives in the shared library (:func:`jaxlab.ot.partial.partial_ot`, re-
exported here); this package holds the method on top of it: the WARMPOT cost, source weights and
loss as functions of arrays (:mod:`.loss`; :func:`warmpot_loss` re-exported here), the networks
(:mod:`.model`), training with its baselines (:mod:`.train`) and the configuration
(:mod:`.config`). See ``README.md`` for how to use it and results beside the paper's.
"""

from jaxlab.methods.warmpot.loss import WarmpotTerms, warmpot_loss
from jaxlab.ot.partial import PartialOTOutput, partial_ot

__all__ = ["PartialOTOutput", "WarmpotTerms", "partial_ot", "warmpot_loss"]
