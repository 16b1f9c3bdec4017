"""The kernel measurements kernels_bench reports: errors against references, compiled memory.

``max_errors`` must report zero for a function against itself and the exact perturbation for a
shifted one (output and every gradient); ``correctness_rows`` must find every kernel within float32
rounding of its reference; ``memory_rows`` must see the XLA reference's T² logits (temporaries x4
when T doubles) and the chunked path's linear growth.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.testing.kernel_checks import correctness_rows, max_errors, memory_rows


def test_max_errors_is_zero_on_itself_and_exact_on_a_known_error():
    x = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    w = jnp.linspace(0.5, 2.0, 20).reshape(4, 5)
    ref = lambda x, w: jnp.tanh(x @ w)  # noqa: E731
    errors, size = max_errors(ref, ref, [x, w], "float32")
    assert errors == [0.0, 0.0, 0.0] and size > 0
    # fn = ref + 0.25·Σx: the output is off by 0.25·Σx and dL/dx by 0.25·Σ(cotangent) everywhere.
    errors, _ = max_errors(lambda x, w: ref(x, w) + 0.25 * jnp.sum(x), ref, [x, w], "float32")
    assert errors[0] == pytest.approx(0.25 * abs(float(jnp.sum(x))), abs=1e-6)
    assert errors[1] > 0 and errors[2] == 0.0


def test_every_kernel_matches_its_reference_in_float32():
    rows = correctness_rows(16, ("float32",))
    kernels = ["flash_attention", "xla_chunked_attention", "xla_attention", "matmul"]
    assert [r["kernel"] for r in rows] == kernels
    for row in rows:
        errs = [v for k, v in row.items() if k.startswith("err_")]
        assert len(errs) == (3 if row["kernel"] == "matmul" else 4)
        assert max(errs) < 1e-4 * row["ref_max_abs"], row


def test_memory_rows_quadratic_reference_and_linear_chunked_path():
    rows = memory_rows((512, 1024), heads=2, head_dim=16)
    assert [r["T"] for r in rows] == [512, 1024]
    slope = {k[:-4]: np.log2(rows[1][k] / rows[0][k]) for k in rows[0] if k.endswith("_mib")}
    assert set(slope) == {"xla_fwd", "xla_fwd_bwd", "chunked_fwd", "chunked_fwd_bwd"}
    assert slope["xla_fwd"] > 1.7 and slope["xla_fwd_bwd"] > 1.7
    assert slope["chunked_fwd"] < 1.3 and slope["chunked_fwd_bwd"] < 1.3
