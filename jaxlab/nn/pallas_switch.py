"""The one repo-wide switch that lets ``"auto"`` dispatches pick the Pallas kernels.

Every ``"auto"`` choice between an XLA path and a Pallas kernel asks :func:`pallas_ready`: the
attention dispatch (:func:`jaxlab.nn.attention.default_impl`), MLR attention
(:func:`jaxlab.nn.mlr_attention.mlr_attention`), the dense matmul of the linear maps
(:func:`jaxlab.nn.linear.default_matmul_impl`) and the mLSTM cell
(:func:`jaxlab.methods.xlstm.mlstm`). It lives in a module of its own, not beside one of them,
because it is global: one environment variable, ``JAXLAB_PALLAS`` (:data:`PALLAS_ENV`, read at
each call), flips them all. ``on`` lets ``auto`` pick Pallas on GPUs and TPUs, ``off`` never, and
``auto`` (or unset) follows :data:`PALLAS_VERIFIED_ON_HARDWARE`, the project's default, which stays
off until the native kernels have passed ``scripts/gpu_bench.sh`` on hardware. The CPU never picks
Pallas (it only interprets there).
"""

from __future__ import annotations

import jax

from jaxlab.core.environment import PALLAS, env_switch

__all__ = ["PALLAS_ENV", "PALLAS_VERIFIED_ON_HARDWARE", "pallas_ready"]

# The default of JAXLAB_PALLAS=auto. Flip to True once scripts/gpu_bench.sh's native tests pass on
# a GPU/TPU; until then users opt in with JAXLAB_PALLAS=on, no code edit needed.
PALLAS_VERIFIED_ON_HARDWARE = False
# Environment variable that overrides the switch above: auto (follow it), on, off.
PALLAS_ENV = PALLAS


def pallas_ready(platform: str | None = None) -> bool:
    """Whether ``"auto"`` dispatches pick Pallas on ``platform`` (default
    ``jax.default_backend()``).

    Never on the CPU; on a GPU or TPU as :data:`PALLAS_ENV` (``JAXLAB_PALLAS``, read at each call)
    says: ``on`` (or another boolean true) yes, ``off`` no, ``auto`` or unset as
    :data:`PALLAS_VERIFIED_ON_HARDWARE`.

    Raises:
      ConfigError: ``JAXLAB_PALLAS`` holds anything else.
    """
    setting = env_switch(PALLAS_ENV)
    platform = jax.default_backend() if platform is None else platform
    if platform not in ("gpu", "cuda", "rocm", "tpu"):
        return False
    return PALLAS_VERIFIED_ON_HARDWARE if setting == "auto" else setting == "on"
