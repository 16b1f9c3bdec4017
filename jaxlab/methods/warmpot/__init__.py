"""WARMPOT: partial domain adaptation by partial optimal transport (Naram et al., ICML 2025).

Partial transport itself lives in the shared library (:func:`jaxlab.ot.partial.partial_ot`, re-
exported here); this package holds the method on top of it: the WARMPOT cost, source weights and
loss (:mod:`.loss`), the networks (:mod:`.model`), training with its baselines (:mod:`.train`) and
the configuration (:mod:`.config`). See ``README.md`` for results beside the paper's.
"""

from jaxlab.ot.partial import PartialOTOutput, partial_ot

__all__ = ["PartialOTOutput", "partial_ot"]
