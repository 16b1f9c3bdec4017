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

import jaxlab.methods.qn_ot.splr as splr_module

SHIFT_MAX = 1e-3


def test_the_shift_is_the_gradient_norm_capped_at_shift_max(x64, monkeypatch):
    rng = np.random.default_rng(3)
    x, y = rng.random((7, 2)), rng.random((6, 2))
    cost = ((x[:, None] - y[None]) ** 2).sum(-1)
    a, b = rng.random(7) + 0.2, rng.random(6) + 0.2
    a, b = a / a.sum(), b / b.sum()

    seen = []
    real = splr_module.solve_shifted

    def record(t, r):  # float64 values sent as their bits: the callback would round them to f32
        seen.append((np.asarray(t).view(np.float64).item(), np.asarray(r).view(np.float64)[:, 0]))

    def recording(H, tau, rhs, solver, **kwargs):
        bits = [jax.lax.bitcast_convert_type(v, jnp.uint32) for v in (tau, rhs)]
        jax.debug.callback(record, *bits, ordered=True)
        return real(H, tau, rhs, solver, **kwargs)

    monkeypatch.setattr(splr_module, "solve_shifted", recording)
    # the full Hessian (density 1 from the start): sparse Newton then converges in ~11 iterations
    options = dict(tol=1e-11, max_iter=50, density_max=1.0, density_init=1.0, low_rank=False)
    out = splr_module.splr(cost, a, b, 0.05, shift_max=SHIFT_MAX, **options)
    jax.effects_barrier()
    assert bool(out.converged)
    assert len(seen) == int(out.n_iter) >= 3

    gnorms = np.array([np.sqrt(np.sum(r**2)) for _, r in seen])
    taus = np.array([t for t, _ in seen])
    # both sides of the min, each clearly away from the kink
    assert (gnorms > 2 * SHIFT_MAX).any() and (gnorms < SHIFT_MAX / 2).any()
    np.testing.assert_allclose(taus, np.minimum(gnorms, SHIFT_MAX), rtol=1e-12)
