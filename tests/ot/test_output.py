"""The shared output type: project-wide field names and the final error."""

import jax.numpy as jnp
import pytest

from jaxlab.ot.output import OTOutput


def _output():
    errors = jnp.array([1.0, 0.1, 1e-9, jnp.nan])
    z = jnp.zeros(())
    return OTOutput(jnp.eye(2), (z, z), errors, jnp.asarray(2), 0.5, errors, True, False, 3)


def test_field_names_and_final_error():
    out = _output()
    for name in ("matrix", "potentials", "errors", "n_iter", "converged", "seconds"):
        assert name in OTOutput._fields
    assert not hasattr(out, "n_iters")  # one name per concept: no alias of n_iter
    assert int(out.n_iter) == 2 and float(out.error) == pytest.approx(1e-9)
