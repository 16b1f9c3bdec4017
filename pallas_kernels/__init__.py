"""Pallas kernels for jaxlab's hot paths: flash and MLR attention, a matmul, chunkwise mLSTM.

One file per op, each holding the kernel bodies, the public wrapper (differentiable through
``jax.custom_vjp``), a frozen ``BlockSizes`` dataclass (exported here under the op's name) and a
plain-jnp ``*_reference`` beside the kernel. Kernels lower natively to GPUs (Triton) and TPUs
(Mosaic) and run in the Pallas interpreter on CPU (``interpret=None`` picks that by itself);
``python -m pallas_kernels.lower`` lowers them all for GPU and TPU from any machine. This
package imports nothing from ``jaxlab``; user errors raise :class:`KernelConfigError` (a
``ValueError``), which ``jaxlab.nn.attention`` re-raises as ``ConfigError``; :func:`check_qkv` is
the q/k/v check of every attention entry point, here and in ``jaxlab.nn``. See ``README.md`` here
for backends, tolerances and measured numbers.
"""

from pallas_kernels import fit
from pallas_kernels._common import KernelConfigError, check_qkv
from pallas_kernels.flash_attention import BlockSizes as FlashAttentionBlockSizes
from pallas_kernels.flash_attention import flash_attention, flash_attention_reference
from pallas_kernels.matmul import ACTIVATIONS, matmul, matmul_reference
from pallas_kernels.matmul import BlockSizes as MatmulBlockSizes
from pallas_kernels.mlr_attention import BlockSizes as MLRAttentionBlockSizes
from pallas_kernels.mlr_attention import mlr_attention, mlr_attention_reference
from pallas_kernels.mlstm_chunkwise import BlockSizes as MLSTMBlockSizes
from pallas_kernels.mlstm_chunkwise import mlstm_chunkwise, mlstm_chunkwise_reference

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
