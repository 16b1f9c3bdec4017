"""The boundary checks every public function shares: one-line errors on concrete values, flags
and ``checkify`` checks on traced ones, and JAX's dtype promotion."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

from jaxlab.core.checks import (
    check_ids,
    check_positive,
    check_tol,
    compute_dtype,
    ids_in_range,
    is_traced,
    not_differentiable,
)
from jaxlab.core.errors import ConfigError


def test_the_compute_dtype_follows_jax():
    # x64 off: float64 numpy inputs compute in float32, as jnp.asarray would, without a warning.
    assert compute_dtype(np.ones(3), np.ones(3), np.ones((3, 3))) == np.float32
    assert compute_dtype(np.ones(3, np.int32), np.ones(3, np.float16)) == np.float32
    with jax.enable_x64(True):
        assert compute_dtype(np.ones(3), np.ones(3), np.ones((3, 3))) == np.float64
        assert compute_dtype(jnp.ones(3, jnp.float32), jnp.ones(3)) == np.float64
        f32 = jnp.ones(3, jnp.float32)
        assert compute_dtype(f32, f32, jnp.ones((3, 3), jnp.float32)) == np.float32
        assert compute_dtype(np.arange(3), np.ones((3, 3), np.int64)) == np.float32


@pytest.mark.parametrize(
    "value, match",
    [
        ("0.1", r"got '0.1' \(str\)"),
        (True, r"got True \(bool\)"),
        (None, r"\(NoneType\)"),
        ([0.1], r"\(list\)"),
        (0.0, "got 0.0"),
        (-1, "got -1"),
        (float("nan"), "got nan"),
        (float("inf"), "got inf"),
    ],
)
def test_check_positive_refuses_in_one_line(value, match):
    with pytest.raises(ConfigError, match=match) as err:
        check_positive("epsilon", value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", [0.1, 1, np.float32(0.5), np.asarray(2.0), jnp.asarray(1e-3)])
def test_check_positive_accepts_numbers(value):
    check_positive("epsilon", value)


def test_a_traced_value_is_checked_for_its_shape_only():
    jax.jit(lambda e: check_positive("epsilon", e) or e)(-1.0)  # unknown under jit: no error
    with pytest.raises(ConfigError, match=r"epsilon must be a scalar, got shape \(2,\)"):
        jax.jit(lambda e: check_positive("epsilon", e) or e)(jnp.ones(2))


def test_a_tolerance_below_the_floor_names_the_fix():
    assert check_tol(1e-6, np.float32, 1e-7) == 1e-6
    with pytest.raises(ConfigError, match=r"tol=1e-09 is below what float32.*X64=1") as err:
        check_tol(1e-9, np.float32, 1e-7)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"below what float64 resolves.*pass a larger tol"):
        check_tol(1e-17, np.float64, 1e-15)
    with pytest.raises(ConfigError, match="tol must be a positive number"):
        check_tol(0.0, np.float64, 1e-15)


def test_ids_out_of_range_are_one_line_errors_naming_the_first():
    ids = np.array([[0, 3, 1], [2, 7, -1]])
    with pytest.raises(ConfigError) as err:
        check_ids(ids, 4, name="tokens", table="the vocabulary")
    assert str(err.value) == (
        "tokens must lie in [0, 4) (the vocabulary); got 7 at [1, 1] (2 outside the range)"
    )
    check_ids(ids.clip(0, 3), 4, name="tokens", table="the vocabulary")
    with pytest.raises(ConfigError, match="tokens must hold integer ids, got dtype float32"):
        check_ids(np.zeros(3, np.float32), 4, name="tokens", table="the vocabulary")


def test_traced_ids_are_a_flag_and_a_checkify_check():
    good, bad = jnp.array([0, 1, 2]), jnp.array([0, 3, 2])
    flag = jax.jit(ids_in_range, static_argnums=1)
    assert bool(flag(good, 3)) and not bool(flag(bad, 3)) and not bool(flag(-good - 1, 3))

    def f(ids):
        check_ids(ids, 3, name="labels", table="the classes")
        return ids.sum()

    assert int(jax.jit(f)(bad)) == 5  # unchecked under a plain jit: it costs nothing
    checked = jax.jit(checkify.checkify(f))
    checked(good)[0].throw()
    with pytest.raises(checkify.JaxRuntimeError, match=r"labels must lie in \[0, 3\).*max 3"):
        checked(bad)[0].throw()


def test_is_traced_sees_tracers_in_any_leaf():
    assert not is_traced(1.0, np.ones(2), {"a": jnp.ones(2)})
    seen = []
    jax.jit(lambda x: seen.append(is_traced(1.0, {"x": x})) or x)(jnp.ones(2))
    assert seen == [True]


def test_not_differentiable_is_the_identity_until_a_derivative_is_asked():
    f = lambda x, y: jnp.sum(not_differentiable(x, "f is not differentiable in x; use g") * y)
    x, y = jnp.ones(3), jnp.arange(3.0)
    assert float(jax.jit(f)(x, y)) == 3.0 and jax.vmap(f)(x[:, None], y[:, None]).shape == (3,)
    np.testing.assert_array_equal(jax.grad(f, argnums=1)(x, y), x)  # other arguments: fine
    with pytest.raises(ConfigError) as err:
        jax.grad(f)(x, y)
    assert str(err.value) == "f is not differentiable in x; use g"  # JAX may add a note
    assert not_differentiable(np.arange(3), "ints pass") is not None  # no float, no rule
