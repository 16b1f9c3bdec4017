"""Measurements of the fast paths against their references: errors, and compiled memory.

Two measurements the ``kernels_bench`` experiment reports and the tests call. (1) Correctness:
:func:`max_errors` runs a fast path in a low precision and its reference in float32 on the same
inputs and output cotangent, and returns the largest absolute error of the output and of every
input gradient; :func:`correctness_rows` applies it to each kernel (Pallas flash attention, the
chunked XLA attention and the XLA reference itself against
:func:`pallas_kernels.flash_attention_reference`; the Pallas matmul against its reference). On CPU
the Pallas kernels run in interpret mode, on a GPU/TPU natively. (2) Memory: :func:`memory_rows`
reads the compiled ``memory_analysis()`` temporaries of the XLA reference attention and the
chunked path, forward and forward+backward, for each sequence length: compiled only, never
executed, so lengths that would not fit in memory can still be measured. These are checks, not
layers, so they live with the testing helpers rather than in ``nn``; not in ``pallas_kernels``
because they compare the kernels with ``nn``'s attention paths (the kernels package never imports
jaxlab).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

import pallas_kernels as pk
from jaxlab.nn.attention import xla_attention, xla_chunked_attention

__all__ = ["correctness_rows", "max_errors", "memory_rows"]


def max_errors(
    fn: Callable, reference: Callable, args: Sequence[jax.Array], dtype: str
) -> tuple[list[float], float]:
    """Max ``|fn − reference|`` of the output and of each input gradient, and the reference's size.

    ``args`` are float32 values already representable in ``dtype``; ``fn`` runs in ``dtype``, the
    reference in float32 (the truth), both on the same inputs and the same output cotangent.

    Returns:
      The errors (the output's first, then one per argument's gradient) and the largest absolute
      value among the reference's output and gradients (errors are relative to it).
    """
    low = lambda *a: fn(*(t.astype(dtype) for t in a)).astype(jnp.float32)  # noqa: E731
    cotangent = jax.random.normal(jax.random.key(1), jax.eval_shape(reference, *args).shape)

    def run(f):
        out, vjp = jax.vjp(f, *args)
        return (out, *vjp(cotangent))

    with jax.default_matmul_precision("highest"):
        got, want = jax.jit(lambda: run(low))(), jax.jit(lambda: run(reference))()
    errors = [float(jnp.max(jnp.abs(g - w))) for g, w in zip(got, want, strict=True)]
    return errors, max(float(jnp.max(jnp.abs(w))) for w in want)


def correctness_rows(T: int, dtypes: tuple[str, ...]) -> list[dict]:
    """Each kernel in each of ``dtypes`` against its float32 reference (GQA 4:2, D=32, length T).

    Returns:
      One row per (dtype, kernel): ``kernel``, ``dtype``, ``case``, the ``err_*`` of
      :func:`max_errors` (``err_out`` and one per input gradient) and ``ref_max_abs``.
    """
    keys = jax.random.split(jax.random.key(0), 5)
    seg = (jnp.arange(T)[None] >= T // 2).astype(jnp.int32).repeat(2, 0)
    opts = dict(causal=True, segment_ids=seg, alibi_slopes=2.0 ** -jnp.arange(1.0, 5.0))
    attention = {
        "flash_attention": lambda *a: pk.flash_attention(*a, **opts),
        "xla_chunked_attention": lambda *a: xla_chunked_attention(*a, chunk_size=32, **opts),
        "xla_attention": lambda *a: xla_attention(*a, **opts),  # the reference's own rounding
    }
    rows = []
    for dtype in dtypes:
        rounded = lambda x, dt=dtype: x.astype(dt).astype(jnp.float32)  # noqa: E731
        qkv = [
            rounded(jax.random.normal(kk, (2, T, h, 32)))
            for kk, h in zip(keys, (4, 2, 2), strict=False)
        ]
        ref = lambda *a: pk.flash_attention_reference(*a, **opts)  # noqa: E731
        for kernel, fn in attention.items():
            errors, size = max_errors(fn, ref, qkv, dtype)
            errs = dict(zip(("err_out", "err_dq", "err_dk", "err_dv"), errors, strict=True))
            errs["ref_max_abs"] = size  # the largest reference value: errors are relative to it
            rows.append(
                dict(kernel=kernel, dtype=dtype, case="causal+segments+alibi, GQA 4:2", **errs)
            )
        xw = [rounded(jax.random.normal(keys[3], (2, T, 48))),
              rounded(jax.random.normal(keys[4], (48, 80)))]  # fmt: skip
        errors, size = max_errors(
            lambda x, w: pk.matmul(x, w, activation="gelu"),
            lambda x, w: pk.matmul_reference(x, w, activation="gelu"),
            xw,
            dtype,
        )
        errs = dict(zip(("err_out", "err_dx", "err_dw"), errors, strict=True), ref_max_abs=size)
        rows.append(dict(kernel="matmul", dtype=dtype, case="gelu, (2T, 48) @ (48, 80)", **errs))
    return rows


def memory_rows(lens: Sequence[int], heads: int, head_dim: int) -> list[dict]:
    """Compiled temporaries (MiB) of causal XLA reference vs chunked attention, B=1, per length.

    Returns:
      One row per length: ``T`` and ``{xla,chunked}_{fwd,fwd_bwd}_mib``.
    """
    rows = []
    for T in lens:
        spec = jax.ShapeDtypeStruct((1, T, heads, head_dim), jnp.float32)
        row = dict(T=T)
        for name, attn in (("xla", xla_attention), ("chunked", xla_chunked_attention)):
            fwd = lambda q, k, v, attn=attn: attn(q, k, v, causal=True)  # noqa: E731
            train = jax.grad(lambda q, k, v, f=fwd: jnp.sum(f(q, k, v)), argnums=(0, 1, 2))
            for mode, fn in (("fwd", fwd), ("fwd_bwd", train)):
                stats = jax.jit(fn).lower(spec, spec, spec).compile().memory_analysis()
                row[f"{name}_{mode}_mib"] = stats.temp_size_in_bytes / 2**20
        rows.append(row)
    return rows
