"""The WARMPOT objective for one batch: ground cost, partial plan, source weights and loss.

Naram et al. (ICML 2025), Sec. 5 (Algorithm 1 and the cost above it), with the authors' code for
what the paper leaves open:

* ground cost between source point i (label y_i) and target point j:
  ``M_ij = η1 ‖f(x_i) - f(x̃_j)‖₂ + η2 (-log p_g(y_i | x̃_j))``;
* source masses ``1/(β n_s)``, target masses ``1/n_t``, transported mass ``α_t``
  (:func:`mass_schedule`), plan π from :func:`jaxlab.ot.partial.partial_ot` (held fixed);
* source weights ``w = π 1`` (the paper's data-dependent weights; the bound of Thm. 3 is minimised
  by them), or, for the baselines, uniform weights or PADA-style class weights;
* loss ``Σ_i w_i CE_i / Σ_i w_i + η3 ⟨π, M⟩ + λ_H · mean_j H(p_g(· | x̃_j))``.

Everything here is a pure function; the gradient flows through ``M`` and the logits, never
through π or w (stop-gradient), as in the code (π is computed on ``M.detach()``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int

from jaxlab.ot.partial import partial_ot

__all__ = [
    "Knobs",
    "batch_loss",
    "capacity_share",
    "ground_cost",
    "mass_schedule",
    "plan_weights",
    "weighted_ce",
]


class Knobs(NamedTuple):
    """The per-run numbers of the objective, as arrays so every method shares one compilation.

    ``mode`` is a one-hot over (plan, uniform, class) source weights; ``eta3 = 0`` turns the
    alignment off (source only).
    """

    alpha: Float[Array, ""]
    beta: Float[Array, ""]
    epsilon: Float[Array, ""]
    eta1: Float[Array, ""]
    eta2: Float[Array, ""]
    eta3: Float[Array, ""]
    entropy: Float[Array, ""]
    mode: Float[Array, " 3"]


def mass_schedule(step, alpha, ramp_steps) -> Float[Array, ""]:
    """``α_t = 0.01 + (α - 0.01) min(t / T, 1)``; α from the start when ``T = 0`` (traceable)."""
    ramp = jnp.asarray(ramp_steps, jnp.float32)
    frac = jnp.minimum(jnp.asarray(step, jnp.float32) / jnp.maximum(ramp, 1.0), 1.0)
    frac = jnp.where(ramp > 0, frac, 1.0)
    return 0.01 + (alpha - 0.01) * frac


def ground_cost(
    z_s: Float[Array, "S F"],
    z_t: Float[Array, "T F"],
    logp_t: Float[Array, "T C"],
    y_s: Int[Array, " S"],
    eta1,
    eta2,
) -> Float[Array, "S T"]:
    """``M_ij = η1 ‖z_s_i - z_t_j‖ + η2 (-log p(y_i | x̃_j))`` (paper Sec. 5)."""
    sq = jnp.sum((z_s[:, None, :] - z_t[None, :, :]) ** 2, axis=-1)
    dist = jnp.sqrt(jnp.maximum(sq, 1e-12))  # the norm has no gradient at 0; clamp it
    return eta1 * dist + eta2 * (-logp_t[:, y_s].T)


def plan_weights(cost, alpha, beta, epsilon, *, tol: float, max_iter: int):
    """The partial plan for ``(1/(β n_s), 1/n_t, α)`` and its row sums ``w = π 1``."""
    n_s, n_t = cost.shape
    a = jnp.full(n_s, 1.0, cost.dtype) / (beta * n_s)
    b = jnp.full(n_t, 1.0 / n_t, cost.dtype)
    out = partial_ot(a, b, cost, mass=alpha, epsilon=epsilon, tol=tol, max_iter=max_iter)
    return out, out.matrix.sum(1)


def capacity_share(w, beta, *, rtol: float = 1e-3) -> Float[Array, ""]:
    """The share of source points whose plan row sum reaches its cap ``1/(β n_s)``.

    A row of the partial plan sums to at most its source mass ``a_i = 1/(β n_s)`` (paper Sec. 5);
    the caps bind, and per-sample weights can differ from uniform, only where some rows reach it.
    A row counts as capped when ``w_i ≥ (1 - rtol) a_i``.

    Args:
      w: the plan's row sums ``π 1`` (unnormalised), shape ``(n_s,)``.
      beta: the source-mass parameter β.
      rtol: relative slack below the cap that still counts (the entropic plan meets it only to its
        solver's tolerance).
    """
    cap = 1.0 / (beta * w.shape[0])
    return jnp.mean((w >= (1.0 - rtol) * cap).astype(w.dtype))


def weighted_ce(logits_s, y_s, w) -> Float[Array, ""]:
    """``Σ_i w_i CE_i / Σ_i w_i`` (the code's ``CrossEntropyWeighted``)."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits_s, y_s)
    w = jax.lax.stop_gradient(w)
    return jnp.sum(w * ce) / jnp.maximum(jnp.sum(w), 1e-12)


def batch_loss(model, x_s, y_s, x_t, knobs: Knobs, alpha_t, class_w, *, tol, max_iter):
    """The WARMPOT loss of one batch and what it measured.

    Args:
      model: the :class:`~jaxlab.methods.warmpot.model.Network`.
      x_s, y_s: source batch; x_t: target batch.
      knobs: the run's :class:`Knobs`.
      alpha_t: transported mass this step (:func:`mass_schedule`).
      class_w: PADA class weights ``(C,)`` (used when ``knobs.mode`` selects them).
      tol, max_iter: the partial-OT solver's tolerance and budget.

    Returns:
      ``(loss, aux)`` with aux holding the weights ``w`` (normalised to sum 1), the share of
      source points at their cap (:func:`capacity_share`), the plan's ``converged`` flag, the
      mean target softmax (for PADA's running average) and the loss terms.
    """
    z_s, z_t = model.features(x_s), model.features(x_t)
    logits_s, logits_t = model.classify(z_s), model.classify(z_t)
    logp_t = jax.nn.log_softmax(logits_t)
    cost = ground_cost(z_s, z_t, logp_t, y_s, knobs.eta1, knobs.eta2)
    out, w_plan = plan_weights(cost, alpha_t, knobs.beta, knobs.epsilon, tol=tol, max_iter=max_iter)
    n = x_s.shape[0]
    w_plan = w_plan / jnp.maximum(w_plan.sum(), 1e-12)
    w_class = class_w[y_s] / jnp.maximum(class_w[y_s].sum(), 1e-12)
    w = knobs.mode[0] * w_plan + knobs.mode[1] / n + knobs.mode[2] * w_class
    ce = weighted_ce(logits_s, y_s, w)
    transport = knobs.eta3 * jnp.sum(out.matrix * cost)  # π fixed: out.matrix is stop-gradient
    probs_t = jnp.exp(logp_t)
    ent = -jnp.mean(jnp.sum(probs_t * logp_t, axis=1))
    loss = ce + transport + knobs.entropy * ent
    aux = {
        "w": jax.lax.stop_gradient(w),
        "at_cap": capacity_share(out.matrix.sum(1), knobs.beta),
        "ot_converged": out.converged,
        "ot_iters": out.n_iter,
        "mean_target_probs": jax.lax.stop_gradient(probs_t.mean(0)),
        "ce": ce,
        "transport": transport,
    }
    return loss, aux
