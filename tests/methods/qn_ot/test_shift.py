"""SPLR's shift ``τ_k = min(‖g_k‖₂, τ_max)`` of ``B₀ = H_Ω + τ_k I``, pinned as the solver uses it.

The rule is Wang & Qiu (ICML 2025), Section 3.1 (as :mod:`jaxlab.methods.qn_ot.splr` cites it),
written here from the authors' ``src/sinkhorn_splr.cpp`` (github.com/yixuan/regot-python:
``shift = std::min(gnorm, shift_max)`` with ``gnorm = g.norm()``, the Euclidean norm of the
current gradient, taken before the line search of the same iteration). A wrong shift still
converges (only the iteration count shows it), so the test records every ``(τ, right-hand side)``
handed to the shifted solve and recomputes the rule in float64 numpy. With ``low_rank=False`` the
right-hand side is ``g_k`` itself (``d = -B₀⁻¹ g``), so the gradient the rule must see is recorded
beside the shift.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxlab.methods.qn_ot.splr as splr_module

SHIFT_MAX = 1e-3


def _bits(*values):  # float64 values sent as their bits: the callback would round them to f32
    return [jax.lax.bitcast_convert_type(v, jnp.uint32) for v in values]


def _f64(v):
    return np.asarray(v).view(np.float64)


@pytest.fixture(scope="module")
def recorded_run():
    """One sparse-Newton run recording every ``(τ, rhs)`` handed to the shifted solve and every
    ``(first trial step, accepted step)`` of the line search."""
    rng = np.random.default_rng(3)
    x, y = rng.random((7, 2)), rng.random((6, 2))
    cost = ((x[:, None] - y[None]) ** 2).sum(-1)
    a, b = rng.random(7) + 0.2, rng.random(6) + 0.2
    a, b = a / a.sum(), b / b.sum()

    shifts, steps = [], []
    real_solve, real_search = splr_module.solve_shifted, splr_module.more_thuente

    def record_shift(t, r):
        shifts.append((_f64(t).item(), _f64(r)[:, 0]))

    def record_step(first, accepted):
        steps.append((_f64(first).item(), _f64(accepted).item()))

    def solve_recording(H, tau, rhs, solver, **kwargs):
        jax.debug.callback(record_shift, *_bits(tau, rhs), ordered=True)
        return real_solve(H, tau, rhs, solver, **kwargs)

    def search_recording(fun, x, d, f0, g0, aux0, step0, **kwargs):
        out = real_search(fun, x, d, f0, g0, aux0, step0, **kwargs)
        jax.debug.callback(record_step, *_bits(step0, out.step), ordered=True)
        return out

    with pytest.MonkeyPatch.context() as mp, jax.enable_x64(True):
        mp.setattr(splr_module, "solve_shifted", solve_recording)
        mp.setattr(splr_module, "more_thuente", search_recording)
        # the full Hessian (density 1 from the start): sparse Newton converges in ~11 iterations
        options = dict(tol=1e-11, max_iter=50, density_max=1.0, density_init=1.0, low_rank=False)
        out = splr_module.splr(cost, a, b, 0.05, shift_max=SHIFT_MAX, **options)
        jax.effects_barrier()
    return out, shifts, steps


def test_the_shift_is_the_gradient_norm_capped_at_shift_max(recorded_run):
    out, seen, _ = recorded_run
    assert bool(out.converged)
    assert len(seen) == int(out.n_iter) >= 3

    gnorms = np.array([np.sqrt(np.sum(r**2)) for _, r in seen])
    taus = np.array([t for t, _ in seen])
    # both sides of the min, each clearly away from the kink
    assert (gnorms > 2 * SHIFT_MAX).any() and (gnorms < SHIFT_MAX / 2).any()
    np.testing.assert_allclose(taus, np.minimum(gnorms, SHIFT_MAX), rtol=1e-12)


def test_the_line_search_starts_at_one_and_a_half_times_the_last_step(recorded_run):
    """Algorithm 1, step 4, as the authors' ``sinkhorn_splr.cpp`` calls its line search: first
    trial ``min(1, 1.5 t_{k−1})`` with ``t_{−1} = 1`` (jaxlab's guard beside it: a failed search,
    t = 0, leaves the previous step in place)."""
    out, _, steps = recorded_run
    assert len(steps) == int(out.n_iter)
    last, want = 1.0, []
    for _, accepted in steps:
        want.append(min(1.0, 1.5 * last))
        last = accepted if accepted > 0 else last
    first = np.array([f for f, _ in steps])
    assert (first < 1).any()  # a step below 2/3 was taken, so the rule shows
    np.testing.assert_allclose(first, want, rtol=1e-12)
