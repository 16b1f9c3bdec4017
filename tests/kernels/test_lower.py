"""``python -m pallas_kernels.lower``: every kernel lowers natively for GPU (Triton) and TPU
(Mosaic) on this CPU machine.

The whole table runs here, in process (it exports from shape structs only, so it is quick). The
other tests check that the command reports what the real lowerings reject, that a case table
covers what issue 12 asks for, and that its MLP shapes are the jaxlab presets' (pallas_kernels does
not import jaxlab, so the list is a pinned copy).
"""

import io

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plmgpu

from pallas_kernels import lower


def _lowered_here(case) -> bool:
    """The table without the matmul's three larger MLP widths (a quarter of its cases): they lower
    the same kernels on a larger grid, and ``python -m pallas_kernels.lower`` still lowers all of
    them."""
    first = f"x(2,100,{lower.MLP_WIDTHS[0][0]})"
    wide = f"x(2,100,{lower.MLP_WIDTHS[0][1]})"
    return not case.label.startswith("matmul") or first in case.label or wide in case.label


SUITE_CASES = [case for case in lower.cases() if _lowered_here(case)]


@pytest.fixture(scope="module")
def table_output():
    out = io.StringIO()
    failures = lower.run_cases(SUITE_CASES, out=out)
    return failures, out.getvalue().splitlines()


def test_every_kernel_lowers_for_gpu_and_tpu(table_output):
    failures, lines = table_output
    assert failures == 0, "\n".join(line for line in lines if "FAIL" in line)
    assert len(lines) == len(SUITE_CASES) + 1  # one line per case and the summary
    assert 0 < len(SUITE_CASES) < len(lower.cases())
    for kernel in lower.KERNELS:
        for platform in lower.PLATFORMS:
            for direction in ("fwd",) if kernel in lower.FORWARD_ONLY else ("fwd", "bwd"):
                mine = [ln for ln in lines if ln.split()[:3] == [kernel, direction, platform]]
                assert mine and all(" ok (" in ln for ln in mine), (kernel, platform, direction)


def test_backward_cases_lower_the_backward_kernels(table_output):
    """Forward + dK/dV + dQ for attention; the forward and both products for the GELU matmul;
    the two forward and the three backward kernels for the chunkwise mLSTM."""
    _, lines = table_output
    attention_bwd = [ln for ln in lines if ln.startswith("flash_attention  bwd")]
    assert attention_bwd and all(ln.endswith("ok (3 kernels)") for ln in attention_bwd)
    gelu_bwd = [ln for ln in lines if ln.startswith("matmul           bwd") and " gelu " in ln]
    assert gelu_bwd and all(ln.endswith("ok (3 kernels)") for ln in gelu_bwd)
    mlstm_bwd = [ln for ln in lines if ln.startswith("mlstm_chunkwise  bwd")]
    assert mlstm_bwd and all(ln.endswith("ok (5 kernels)") for ln in mlstm_bwd)


def test_table_covers_the_issue():
    labels = [case.label for case in lower.cases()]
    for platform in lower.PLATFORMS:
        attention = [x for x in labels if x.startswith("flash_attention") and f" {platform} " in x]
        for needle in (",64)", ",128)", "bf16", "f32", "causal", "full", "segments", "alibi",
                       ",200,", ",2,64)", "kv(1,320,"):  # fmt: skip
            assert any(needle in x for x in attention), (platform, needle)
        matmuls = [x for x in labels if x.startswith("matmul") and f" {platform} " in x]
        assert any("w(1024,4096) bf16 gelu" in x for x in matmuls)
        assert any("w(4096,1024) f32 linear" in x for x in matmuls)


def test_mlp_widths_are_the_paper_presets():
    from jaxlab.lm.transformer import TransformerConfig
    from jaxlab.methods.rmt import RMTConfig

    rmt = {(c.width, c.d_ff) for c in map(RMTConfig.paper, ("46m", "134m", "206m", "305m"))}
    lm = {
        (c.d_model, c.ff_dim) for c in map(TransformerConfig.paper, ("49m", "160m", "260m", "405m"))
    }
    assert set(lower.MLP_WIDTHS) == rmt | lm


def _tiny_copy(block_shape, compiler_params=None):
    def copy(x):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]

        spec = pl.BlockSpec(block_shape, lambda i, j: (i, j))
        grid = (x.shape[0] // block_shape[0], x.shape[1] // block_shape[1])
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(
            kernel, grid=grid, in_specs=[spec], out_specs=spec, out_shape=out,
            compiler_params=compiler_params,
        )(x)  # fmt: skip

    return copy


@pytest.mark.filterwarnings("ignore:Using ``pl.pallas_call`` for Mosaic GPU:DeprecationWarning")
def test_failures_are_reported_with_the_lowering_error():
    """The check has teeth: Mosaic's (8, 128) tiling rule, a GPU kernel that is not Triton (Mosaic
    GPU's parameters: JAX 0.10 lowers it to its own custom call, JAX 0.11 refuses it here), and a
    function with no kernel at all each fail, with the error's first line; skips do not fail."""
    x = (jax.ShapeDtypeStruct((16, 256), jnp.float32),)
    bad = [
        lower.Case("copy", "fwd", "tpu", "block (8, 64)", _tiny_copy((8, 64)), x),
        lower.Case(
            "copy", "fwd", "cuda", "Mosaic GPU", _tiny_copy((8, 64), plmgpu.CompilerParams()), x
        ),
        lower.Case("copy", "fwd", "tpu", "plain jnp", lambda a: a * 2, x),
    ]
    skipped = lower.Case("copy", "fwd", "tpu", "skipped", lambda a: a, x, skip="a JAX bug")
    out = io.StringIO()
    assert lower.run_cases([*bad, skipped], out=out) == 3
    lines = out.getvalue().splitlines()
    assert "divisible by 8 and 128" in lines[0]
    assert " FAIL " in lines[1]
    if "no __gpu$xla.gpu.triton kernel" in lines[1]:  # lowered, to another custom call
        assert "mosaic_gpu" in lines[1]
    assert "custom calls: none" in lines[2]
    assert lines[3].endswith("skip: a JAX bug")
    assert lines[4].startswith("4 cases: 0 ok, 3 failed, 1 skipped")


def test_main_selects_and_exits_non_zero_on_failure(monkeypatch, capsys):
    assert lower.main(["--platform=tpu", "--kernel=matmul", "--match=w(384,1536) f32 relu"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 4 and printed[-1].startswith("2 cases: 2 ok")  # header, fwd, bwd, sum
    scalar = (jax.ShapeDtypeStruct((), jnp.float32),)
    broken = lambda platform: [lower.Case("k", "fwd", platform, "x", lambda a: a, scalar)]  # noqa: E731
    monkeypatch.setitem(lower.KERNELS, "broken", broken)
    assert lower.main(["--platform=cuda", "--kernel=broken"]) == 1
    assert lower.main(["--match=no such case"]) == 2
