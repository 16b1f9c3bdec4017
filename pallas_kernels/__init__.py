"""Pallas kernels for jaxlab's hot paths: flash and MLR attention, a matmul, chunkwise mLSTM.

One file per op, each holding the kernel bodies, the public wrapper (differentiable through
``jax.custom_vjp``), a frozen ``BlockSizes`` dataclass (exported here under the op's name) and a
plain-jnp ``*_reference`` beside the kernel. Kernels lower natively to GPUs (Triton) and TPUs
(Mosaic) and run in the Pallas interpreter on CPU (``interpret=None`` picks that by itself);
``python -m pallas_kernels.lower`` lowers them all for GPU and TPU from any machine. This
package imports nothing from ``jaxlab``; user errors raise :class:`KernelConfigError` (a
``ValueError``), which ``jaxlab.nn.attention`` re-raises as ``ConfigError``; :func:`check_qkv` is
the q/k/v check of every attention entry point, here and in ``jaxlab.nn``. Importing the package
loads neither Pallas nor a kernel: each kernel module is imported on the first use of one of its
names. See ``README.md`` here for backends, tolerances and measured numbers.
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING

from pallas_kernels import fit
from pallas_kernels._checks import ACTIVATIONS, KernelConfigError, check_qkv

if TYPE_CHECKING:  # _LAZY's names as imports, for type checkers and docs/gen_api.py
    from pallas_kernels.flash_attention import BlockSizes as FlashAttentionBlockSizes
    from pallas_kernels.flash_attention import flash_attention, flash_attention_reference
    from pallas_kernels.matmul import BlockSizes as MatmulBlockSizes
    from pallas_kernels.matmul import matmul, matmul_reference
    from pallas_kernels.mlr_attention import BlockSizes as MLRAttentionBlockSizes
    from pallas_kernels.mlr_attention import mlr_attention, mlr_attention_reference
    from pallas_kernels.mlstm_chunkwise import BlockSizes as MLSTMBlockSizes
    from pallas_kernels.mlstm_chunkwise import mlstm_chunkwise, mlstm_chunkwise_reference

# The kernels' names, each imported from its module on first use (PEP 562): importing a kernel
# module loads Pallas with its Triton and Mosaic lowerings, which a run that calls no kernel (most
# CPU runs) need not wait for (pallas_kernels._checks).
_LAZY = {
    "FlashAttentionBlockSizes": ("flash_attention", "BlockSizes"),
    "flash_attention": ("flash_attention", "flash_attention"),
    "flash_attention_reference": ("flash_attention", "flash_attention_reference"),
    "MatmulBlockSizes": ("matmul", "BlockSizes"),
    "matmul": ("matmul", "matmul"),
    "matmul_reference": ("matmul", "matmul_reference"),
    "MLRAttentionBlockSizes": ("mlr_attention", "BlockSizes"),
    "mlr_attention": ("mlr_attention", "mlr_attention"),
    "mlr_attention_reference": ("mlr_attention", "mlr_attention_reference"),
    "MLSTMBlockSizes": ("mlstm_chunkwise", "BlockSizes"),
    "mlstm_chunkwise": ("mlstm_chunkwise", "mlstm_chunkwise"),
    "mlstm_chunkwise_reference": ("mlstm_chunkwise", "mlstm_chunkwise_reference"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value  # once: later lookups find it without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package's module type. Four kernel modules share their name with their kernel, which
    is what the name means here; the import system binds each submodule on its package once it is
    loaded (by whoever imports it first), so that binding is turned into the kernel."""

    def __setattr__(self, name: str, value) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            value = getattr(value, _LAZY[name][1])
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "ACTIVATIONS",
    "FlashAttentionBlockSizes",
    "KernelConfigError",
    "MLRAttentionBlockSizes",
    "MLSTMBlockSizes",
    "MatmulBlockSizes",
    "check_qkv",
    "fit",
    "flash_attention",
    "flash_attention_reference",
    "matmul",
    "matmul_reference",
    "mlr_attention",
    "mlr_attention_reference",
    "mlstm_chunkwise",
    "mlstm_chunkwise_reference",
]
