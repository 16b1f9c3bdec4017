"""The shared output type: project-wide field names; the old ``n_iters`` is a read-only alias."""

import jax.numpy as jnp
import pytest

from jaxlab.ot.output import OTOutput


def _output():
    errors = jnp.array([1.0, 0.1, 1e-9, jnp.nan])
    z = jnp.zeros(())
    return OTOutput(jnp.eye(2), (z, z), errors, jnp.asarray(2), 0.5, errors, True, False, 3)


def test_field_names_and_aliases():
    out = _output()
    for name in ("matrix", "potentials", "errors", "n_iter", "converged", "seconds"):
        assert name in OTOutput._fields
    assert int(out.n_iters) == 2 and float(out.error) == pytest.approx(1e-9)
    with pytest.raises(AttributeError):
        out.n_iters = 3
