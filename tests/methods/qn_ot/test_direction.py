"""The rank-2 correction in inverse form (Section 3.2): secant condition and Woodbury equality."""

import jax.numpy as jnp
import numpy as np

from jaxlab.methods.qn_ot.direction import inverse_bfgs_direction


def _setup(seed=0, k=8):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(k, k))
    B0 = A @ A.T + k * np.eye(k)
    s, y, g = rng.normal(size=(3, k))
    y = y if y @ s > 0 else -y
    return B0, s, y, g


def test_secant_condition(x64):
    B0, s, y, _ = _setup()
    solve = lambda r: jnp.linalg.solve(B0, r)  # noqa: E731
    # d = -B⁻¹g with g = y must give d = -s: B⁻¹y = s.
    np.testing.assert_allclose(-inverse_bfgs_direction(solve, y, s, y, True), s, rtol=1e-10)


def test_equals_woodbury_on_the_bfgs_matrix(x64):
    B0, s, y, g = _setup(1)
    Bs = B0 @ s
    B = B0 - np.outer(Bs, Bs) / (s @ Bs) + np.outer(y, y) / (y @ s)
    solve = lambda r: jnp.linalg.solve(B0, r)  # noqa: E731
    np.testing.assert_allclose(
        inverse_bfgs_direction(solve, g, s, y, True), -np.linalg.solve(B, g), rtol=1e-10
    )
    # without the low-rank term it is the plain shifted-Newton direction
    np.testing.assert_allclose(
        inverse_bfgs_direction(solve, g, s, y, False), -np.linalg.solve(B0, g), rtol=1e-10
    )
