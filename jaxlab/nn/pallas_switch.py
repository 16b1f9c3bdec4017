"""The one repo-wide switch that lets ``"auto"`` dispatches pick the Pallas kernels.

Every ``"auto"`` choice between an XLA path and a Pallas kernel asks :func:`pallas_ready`: the
attention dispatch (:func:`jaxlab.nn.attention.default_impl`), MLR attention
(:func:`jaxlab.nn.mlr_attention.mlr_attention`), the dense matmul of the linear maps
(:func:`jaxlab.nn.linear.default_matmul_impl`) and the mLSTM cell
(:func:`jaxlab.methods.xlstm.mlstm`). It lives in a module of its own, not beside one of them,
because it is global: one environment variable, ``JAXLAB_PALLAS`` (:data:`PALLAS_ENV`, read at
each call), flips them all. ``on`` lets ``auto`` pick Pallas on GPUs and TPUs, ``off`` never, and
``auto`` (or unset) follows :data:`PALLAS_VERIFIED_ON_HARDWARE`, the project's default: per
platform and kernel, yes only where a measured ratio from ``scripts/gpu_bench.sh`` on that hardware
says the kernel is at least as fast as the path ``auto`` takes without it. The CPU never picks
Pallas (it only interprets there).
"""

from __future__ import annotations

import jax

from jaxlab.core.environment import PALLAS, env_switch
from jaxlab.core.errors import ConfigError

__all__ = ["KERNELS", "PALLAS_ENV", "PALLAS_VERIFIED_ON_HARDWARE", "pallas_ready"]

# The default of JAXLAB_PALLAS=auto, per platform and kernel: True only where the Pallas kernel
# was measured at least as fast as the path "auto" takes without it (cuDNN or XLA), on that
# platform's hardware, by scripts/gpu_bench.sh; the measurements and the hardware they came from
# are in pallas_kernels/README.md ("GPU"). No TPU has been measured. Users opt in with
# JAXLAB_PALLAS=on.
PALLAS_VERIFIED_ON_HARDWARE: dict[str, dict[str, bool]] = {
    "gpu": {"flash_attention": False, "matmul": False, "mlstm": True, "mlr_attention": False},
    "tpu": {"flash_attention": False, "matmul": False, "mlstm": False, "mlr_attention": False},
}
KERNELS = ("flash_attention", "matmul", "mlstm", "mlr_attention")
# Environment variable that overrides the switch above: auto (follow it), on, off.
PALLAS_ENV = PALLAS


def pallas_ready(platform: str | None = None, kernel: str | None = None) -> bool:
    """Whether ``"auto"`` dispatches pick Pallas on ``platform`` (default
    ``jax.default_backend()``) for ``kernel`` (one of :data:`KERNELS`; None: every kernel).

    Never on the CPU; on a GPU or TPU as :data:`PALLAS_ENV` (``JAXLAB_PALLAS``, read at each call)
    says: ``on`` (or another boolean true) yes, ``off`` no, ``auto`` or unset as
    :data:`PALLAS_VERIFIED_ON_HARDWARE` says for that kernel (for ``kernel=None``, only if it says
    yes for all of them).

    Raises:
      ConfigError: ``JAXLAB_PALLAS`` holds anything else, or ``kernel`` is unknown.
    """
    setting = env_switch(PALLAS_ENV)
    if kernel is not None and kernel not in KERNELS:
        raise ConfigError(f"pallas_ready: unknown kernel {kernel!r}; choose one of {KERNELS}")
    platform = jax.default_backend() if platform is None else platform
    if platform not in ("gpu", "cuda", "rocm", "tpu"):
        return False
    if setting != "auto":
        return setting == "on"
    verified = PALLAS_VERIFIED_ON_HARDWARE["tpu" if platform == "tpu" else "gpu"]
    return all(verified.values()) if kernel is None else verified[kernel]
