"""The package's names: the light ones at import, each kernel's on first use (start-up time)."""

import importlib
import os
import subprocess
import sys

import pytest

import pallas_kernels as pk

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_cpu_model_runs_without_loading_pallas():
    """Attention, linear layers, MLR and the mLSTM cell on their XLA paths check their inputs
    through pallas_kernels (check_qkv, KernelConfigError, ACTIVATIONS) and import no kernel
    module, so no Pallas lowering is loaded; the first kernel name used loads its module."""
    code = (
        "import sys, jax.numpy as jnp\n"
        "from flax import nnx\n"
        "from jaxlab.nn.attention import dot_product_attention\n"
        "from jaxlab.nn.linear import Dense\n"
        "import jaxlab.nn.mlr_attention, jaxlab.methods.xlstm.cell, jaxlab.lm.transformer\n"
        "q = jnp.ones((1, 4, 2, 8))\n"
        "dot_product_attention(q, q, q, causal=True, impl='xla').block_until_ready()\n"
        "Dense(8, 4, std=0.1, matmul_impl='xla', rngs=nnx.Rngs(0))(jnp.ones((2, 8)), 'gelu')\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.startswith(\n"
        "    ('jax.experimental.pallas', 'pallas_kernels.flash', 'pallas_kernels.matmul')))\n"
        "print(loaded())\n"
        "import pallas_kernels\n"
        "pallas_kernels.flash_attention\n"
        "print(loaded())\n"
    )
    env = {**os.environ, "PYTHONPATH": REPO}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    before, after = done.stdout.splitlines()
    assert before == "[]", before
    assert "'pallas_kernels.flash_attention'" in after and "'jax.experimental.pallas'" in after


@pytest.mark.parametrize("name", pk.__all__)
def test_every_exported_name_resolves_to_its_modules_object(name):
    value = getattr(pk, name)
    if name in pk._LAZY:
        module, attr = pk._LAZY[name]
        assert value is getattr(importlib.import_module(f"pallas_kernels.{module}"), attr)
    assert name in dir(pk)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'flash_atention'"):
        pk.flash_atention  # noqa: B018


def test_the_type_checking_imports_are_the_lazy_names():
    """The reference (docs/gen_api.py) and type checkers read the names from the imports under
    ``TYPE_CHECKING``; the package binds them from ``_LAZY``: the two must say the same."""
    import ast

    tree = ast.parse(open(pk.__file__, encoding="utf-8").read())
    (block,) = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    imported = {
        alias.asname or alias.name: (node.module.removeprefix("pallas_kernels."), alias.name)
        for node in block.body
        for alias in node.names
    }
    assert imported == pk._LAZY
