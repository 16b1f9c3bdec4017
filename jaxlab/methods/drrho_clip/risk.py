"""The general DRRho risk for any per-example loss: KL-regularised and CVaR forms (Sec. 3).

DRRho risk minimization (Wei et al., ICML 2025, Eq. (3)) replaces the empirical risk of a model θ
by a distributionally robust risk of the *RHO loss* ℓ(θ; z) − ℓ(θ_ref; z), the excess of the
learner's loss over a reference model's on the same example:

* KL-regularised DRO (Eq. (4)): ``τ · log mean_i exp((ℓ_i − ℓ_ref,i) / τ)``. Its gradient weights
  each example by softmax((ℓ − ℓ_ref)/τ): examples the reference finds easy but the learner does
  not are up-weighted, noisy ones both find hard are not. τ → ∞ recovers mean(ℓ − ℓ_ref).
* CVaR_α (the φ-divergence ball with φ the indicator, Sec. 3): the mean of the largest ⌈αn⌉
  values of ℓ − ℓ_ref, i.e. min_λ λ + E[(x − λ)_+]/α at the sample level; α = 1 is the mean.

Any jaxlab model fits: compute the per-example losses of the learner and of the frozen reference
(stop-gradient, e.g. features cached once), then call one of these. They compute in the losses'
dtype promoted to at least float32. τ may be traced (``jax.jit``, ``jax.grad`` with respect to
τ) and is then not checked; α sets how many examples are averaged, a shape, so it must be a
Python number (static under ``jit``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.checks import is_traced
from jaxlab.core.errors import ConfigError
from jaxlab.methods.drrho_clip.losses import check_tau_eps

__all__ = ["drrho_risk_cvar", "drrho_risk_kl"]


def _excess(losses_N: jax.Array, ref_losses_N: jax.Array) -> jax.Array:
    if jnp.ndim(losses_N) != 1 or jnp.shape(losses_N) != jnp.shape(ref_losses_N):
        raise ConfigError(
            f"need per-example losses of one shape (N,), got {jnp.shape(losses_N)} and "
            f"{jnp.shape(ref_losses_N)}"
        )
    if jnp.shape(losses_N)[0] == 0:
        raise ConfigError("need at least one example, got empty losses")
    dtype = jnp.promote_types(jnp.result_type(losses_N, ref_losses_N), jnp.float32)
    return jnp.asarray(losses_N, dtype) - jax.lax.stop_gradient(jnp.asarray(ref_losses_N, dtype))


def drrho_risk_kl(
    losses_N: Float[Array, " N"],
    ref_losses_N: Float[Array, " N"],
    *,
    tau: float | Float[Array, ""],
) -> Float[Array, ""]:
    """τ · log mean exp((ℓ − ℓ_ref)/τ) (paper Eq. (4)); the reference gets no gradient."""
    check_tau_eps(tau)
    x_N = _excess(losses_N, ref_losses_N)
    # max + τ·log1p(mean(expm1((x − max)/τ))): no overflow for small τ, and for large τ no
    # cancellation in log(mean(exp(y))) with every y near 0 (τ → ∞ is the mean, accurately).
    top = jax.lax.stop_gradient(jnp.max(x_N))
    return top + tau * jnp.log1p(jnp.mean(jnp.expm1((x_N - top) / tau)))


def drrho_risk_cvar(
    losses_N: Float[Array, " N"], ref_losses_N: Float[Array, " N"], *, alpha: float
) -> Float[Array, ""]:
    """CVaR_α of ℓ − ℓ_ref: the mean of its top ⌈αN⌉ values (α ∈ (0, 1])."""
    if is_traced(alpha):
        raise ConfigError(
            "alpha sets how many examples are averaged (a shape) and must be a Python number: "
            "mark it static under jax.jit (static_argnames) or bind it with functools.partial"
        )
    if isinstance(alpha, str | bool) or not 0 < alpha <= 1:
        raise ConfigError(f"alpha must be in (0, 1], got {alpha}")
    x_N = _excess(losses_N, ref_losses_N)
    k = max(1, math.ceil(alpha * x_N.shape[0] - 1e-9))
    return jnp.mean(jax.lax.top_k(x_N, k)[0])
