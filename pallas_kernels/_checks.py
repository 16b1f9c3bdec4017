"""What ``jaxlab.nn`` needs of the kernels without loading Pallas: the error type, the q/k/v check
and the matmul epilogues.

Importing ``jax.experimental.pallas`` (with its Triton and Mosaic lowerings) takes a noticeable part
of a short run's start-up, and a CPU run that never calls a kernel does not need it. So
:mod:`pallas_kernels` imports this module when it is imported and each kernel module only when one
of its names is first used; ``jaxlab.nn``'s entry points check their inputs and name the
activations through the names here. Imports only ``jax``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

__all__ = ["ACTIVATIONS", "KernelConfigError", "check_qkv"]

# The matmul's epilogues (pallas_kernels.matmul), applied to its float32 accumulator, and the
# activations jaxlab.nn.linear_map accepts. "gelu" is the tanh form, jax.nn.gelu's default.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": jax.nn.gelu,
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


class KernelConfigError(ValueError):
    """A kernel called with block sizes or shapes it cannot take; the message says what to change.

    ``jaxlab.nn.attention`` re-raises it as ``jaxlab.core.errors.ConfigError`` (pallas_kernels does
    not import jaxlab).
    """


def check_qkv(
    owner: str,
    q,
    k,
    v,
    *,
    causal: bool = False,
    segment_ids=None,
    alibi_slopes=None,
    grouped: bool = True,
) -> None:
    """Raises a one-line :class:`KernelConfigError`, prefixed ``owner``, unless q, k, v fit.

    The one check of every attention entry point (the two kernels here and ``jaxlab.nn``'s
    ``dot_product_attention`` and ``mlr_attention``, which re-raise it as ``ConfigError``).
    ``grouped``: ``(B, T, H, E)`` queries against ``(B, S, K, E)`` keys and values with ``K``
    dividing ``H`` (grouped-query attention); queries sit at the end of the keys, so ``causal``
    needs ``T <= S`` (with more queries than keys the first ``T - S`` would see no key). Not
    ``grouped`` (MLR): ``k`` shaped like ``q`` and ``v`` of any head width. ``segment_ids`` must
    be ``(B, T)`` with as many keys as queries, ``alibi_slopes`` ``(H,)``.
    """
    if grouped:
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
            raise KernelConfigError(
                f"{owner} expects (B, T, H, E) arrays, got q{q.shape} k{k.shape} v{v.shape}"
            )
        if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
            raise KernelConfigError(
                f"{owner}: q{q.shape}, k{k.shape}, v{v.shape} do not fit together"
            )
        if k.shape[2] == 0:
            raise KernelConfigError(f"{owner}: k and v need at least one head, got k{k.shape}")
        if q.shape[2] % k.shape[2]:
            raise KernelConfigError(
                f"{owner}: {q.shape[2]} query heads are not a multiple of {k.shape[2]} kv heads"
            )
    elif q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise KernelConfigError(
            f"{owner}: q{q.shape}, k{k.shape}, v{v.shape} must be (B, T, H, M) queries and keys "
            "and (B, T, H, E) values"
        )
    T, S = q.shape[1], k.shape[1]
    if causal and T > S:
        raise KernelConfigError(
            f"{owner}: causal attention needs at least as many keys as queries; got T={T} "
            f"queries and S={S} keys"
        )
    if segment_ids is not None and segment_ids.shape != q.shape[:2]:
        raise KernelConfigError(
            f"{owner}: segment_ids{segment_ids.shape} must be (B, T)={q.shape[:2]}"
        )
    if segment_ids is not None and T != S:
        raise KernelConfigError(
            f"{owner}: segment_ids need as many keys as queries; got T={T} queries and S={S} keys"
        )
    if alibi_slopes is not None and alibi_slopes.shape != (q.shape[2],):
        raise KernelConfigError(
            f"{owner}: alibi_slopes{alibi_slopes.shape} must be (H,)=({q.shape[2]},)"
        )
