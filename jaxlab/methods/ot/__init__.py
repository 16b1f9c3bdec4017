"""Moved to :mod:`jaxlab.methods.qn_ot` and :mod:`jaxlab.ot`; this module re-exports the old names.

SPLR and its baselines (``solve``, ``Method``, ``entropic_ot_value``) now live in
:mod:`jaxlab.methods.qn_ot`, and the parts every OT method shares (the dual, Sinkhorn with warm
starts, the line search, the linear solves, the output type ``OTOutput``) in :mod:`jaxlab.ot`.
Import from there in new code; the submodules of the old package are gone.
"""

from jaxlab.methods.qn_ot import Method, OTOutput, entropic_ot_value, solve

__all__ = ["Method", "OTOutput", "entropic_ot_value", "solve"]
