"""The WARMPOT objective as functions of arrays: ground cost, partial plan, source weights, loss.

:func:`warmpot_loss` takes a batch's features, logits and source labels and the plain numbers; the
training code's :func:`batch_loss` is a thin wrapper that runs a model and reads the run's
:class:`Knobs`. Naram et al. (ICML 2025), Sec. 5 (Algorithm 1 and the cost above it), with the
authors' code for what the paper leaves open:

* ground cost between source point i (label y_i) and target point j:
  ``M_ij = η1 ‖f(x_i) - f(x̃_j)‖₂ + η2 (-log p_g(y_i | x̃_j))``;
* source masses ``1/(β n_s)``, target masses ``1/n_t``, transported mass ``α_t``
  (:func:`mass_schedule`), plan π from :func:`jaxlab.ot.partial.partial_ot` (held fixed);
* source weights ``w = π 1`` (the paper's data-dependent weights; the bound of Thm. 3 is minimised
  by them), or, for the baselines, uniform weights or PADA-style class weights;
* loss ``Σ_i w_i CE_i / Σ_i w_i + η3 ⟨π, M⟩ + λ_H · mean_j H(p_g(· | x̃_j))``.

Everything here is a pure function; the gradient flows through ``M`` and the logits, never
through π or w (stop-gradient), as in the code (π is computed on ``M.detach()``).

Labels index the classes (``-log p(y_i | x̃_j)``, the cross-entropy). Concrete labels outside
``[0, C)`` are a one-line ``ConfigError`` (:func:`check_labels`). Under ``jax.jit`` they cannot be
inspected: JAX's gather would clamp a label ≥ C to class C − 1 and wrap a negative one, and the
cross-entropy gives NaN, so :func:`warmpot_loss` returns the flag
:func:`~jaxlab.core.checks.ids_in_range` with its
terms, computed inside the traced function and read back on the host, as the training loop's
finiteness flag is (:data:`jaxlab.core.step.STATE_FINITE`); it also serves
``jax.experimental.checkify.check`` in a checkified function.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core.checks import check_ids, ids_in_range
from jaxlab.core.errors import ConfigError
from jaxlab.ot.partial import PartialOTOutput, partial_ot

__all__ = [
    "Knobs",
    "MassRamp",
    "WarmpotTerms",
    "batch_loss",
    "capacity_share",
    "check_labels",
    "ground_cost",
    "mass_schedule",
    "pada_class_weights",
    "plan_weights",
    "warmpot_loss",
    "weighted_ce",
]

# The mass ramp: jaxlab's linear one ending at α, or the authors' code's (:func:`mass_schedule`).
MassRamp = Literal["linear", "authors"]


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


def mass_schedule(step, alpha, ramp_steps, kind: MassRamp = "linear") -> Float[Array, ""]:
    """The transported mass ``α_t`` at step ``t`` (traceable in every argument but ``kind``).

    The paper (Sec. 5) only says the mass grows from a small value; two ramps are offered:

    * ``"linear"`` (the default): ``α_t = 0.01 + (α - 0.01) min(t / T, 1)``, which reaches ``α``
      exactly at ``t = T`` and stays there; ``α`` from the start when ``T = 0``.
    * ``"authors"``: the authors' ``warmpot.py`` loop, ``α_t = α t / T + 0.01`` for ``t ≤ T`` and
      ``α`` afterwards (it ends the ramp at ``α + 0.01``, then drops to ``α``); as there, ``T ≤ 1``
      means no ramp (``--mass_increase_i <= 1``).

    The caller caps ``α_t`` at the total masses (``min(1, 1/β)``, as :mod:`.train` does).

    Args:
      step: the iteration ``t`` (int or float scalar).
      alpha: the final mass ``α``.
      ramp_steps: the ramp length ``T``.
      kind: ``"linear"`` or ``"authors"``.
    Returns:
      ``α_t``, a float32 scalar.
    """
    t = jnp.asarray(step, jnp.float32)
    ramp = jnp.asarray(ramp_steps, jnp.float32)
    if kind == "authors":
        on = (ramp > 1) & (t <= ramp)
        return jnp.where(on, alpha * t / jnp.maximum(ramp, 1.0) + 0.01, alpha)
    if kind != "linear":
        raise ConfigError(f"mass ramp {kind!r} is not one of 'linear', 'authors'")
    frac = jnp.minimum(t / jnp.maximum(ramp, 1.0), 1.0)
    frac = jnp.where(ramp > 0, frac, 1.0)
    return 0.01 + (alpha - 0.01) * frac


def check_labels(y: Int[Array, " Ns"], num_classes: int, name: str = "y_s") -> None:
    """A one-line ConfigError for concrete labels that are not integers in ``[0, num_classes)``
    (:func:`jaxlab.core.checks.check_ids`; traced ones: see the module docstring)."""
    check_ids(y, num_classes, name=name, table=f"the {num_classes} classes of the logits")


def ground_cost(
    z_s: Float[Array, "Ns F"],
    z_t: Float[Array, "Nt F"],
    logp_t: Float[Array, "Nt L"],
    y_s: Int[Array, " Ns"],
    eta1,
    eta2,
) -> Float[Array, "Ns Nt"]:
    """``M_ij = η1 ‖z_s_i - z_t_j‖ + η2 (-log p(y_i | x̃_j))`` (paper Sec. 5).

    Raises:
      ConfigError: concrete labels outside ``[0, C)`` (traced ones: see the module docstring).
    """
    check_labels(y_s, logp_t.shape[-1])
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


class WarmpotTerms(NamedTuple):
    """What :func:`warmpot_loss` computed besides the loss.

    Attributes:
      weights: the source weights ``w`` of the classification term (constants for gradients),
        ``(S,)``: WARMPOT's ``π1/Σπ1`` sum to 1; given ``weights`` are kept as passed.
      plan: the partial transport (:class:`~jaxlab.ot.partial.PartialOTOutput`): the plan π
        ``(S, T)`` (a constant for gradients), ``converged``, ``n_iter``.
      ce: the weighted cross-entropy ``Σ_i w_i CE_i / Σ_i w_i``.
      transport: ``η3 ⟨π, M⟩``.
      entropy: the mean prediction entropy of the target points (before its weight).
      labels_in_range: every source label lies in ``[0, C)``
        (:func:`jaxlab.core.checks.ids_in_range`).
    """

    weights: Float[Array, " Ns"]
    plan: PartialOTOutput
    ce: Float[Array, ""]
    transport: Float[Array, ""]
    entropy: Float[Array, ""]
    labels_in_range: Bool[Array, ""]


def warmpot_loss(
    z_s: Float[Array, "Ns F"],
    logits_s: Float[Array, "Ns L"],
    y_s: Int[Array, " Ns"],
    z_t: Float[Array, "Nt F"],
    logits_t: Float[Array, "Nt L"],
    *,
    mass,
    beta,
    epsilon,
    eta1,
    eta2,
    eta3,
    entropy=0.0,
    plan_share=1.0,
    weights: Float[Array, " Ns"] | None = None,
    tol: float = 1e-6,
    max_iter: int = 2000,
) -> tuple[Float[Array, ""], WarmpotTerms]:
    """The WARMPOT loss of one batch from its features and logits (Naram et al., Sec. 5).

    ``loss = Σ_i w_i CE_i / Σ_i w_i + η3 ⟨π, M⟩ + λ_H · mean_j H(p(· | x̃_j))`` with the ground
    cost ``M`` of :func:`ground_cost`, the partial plan π of mass ``mass`` between source masses
    ``1/(β S)`` and target masses ``1/T`` (:func:`plan_weights`, computed on ``M`` held fixed) and
    the source weights ``w = plan_share · π1/Σπ1 + weights``: WARMPOT's are the plan's row sums
    (``plan_share=1``, no ``weights``); the baselines set ``plan_share=0`` and give theirs (uniform,
    PADA's class weights). Numbers may be traced arrays, so one compiled function serves every
    method. Gradients flow through the features and logits, never through π or ``w``.

    Args:
      z_s, z_t: source and target features (the space the cost measures), ``(S, F)``, ``(T, F)``.
      logits_s, logits_t: the classifier's logits of both, ``(S, C)``, ``(T, C)``.
      y_s: source labels in ``[0, C)``, ``(S,)``.
      mass: the transported mass α (at most ``min(1, 1/β)``).
      beta: β of the source masses ``1/(β S)``.
      epsilon: the plan's entropic regularisation; None for the exact plan.
      eta1, eta2, eta3: weights of the feature distance, the label cost and the transport term.
      entropy: λ_H, the weight of the target prediction entropy.
      plan_share, weights: the source weights (above); ``weights`` need not be normalised.
      tol, max_iter: the partial-OT solver's tolerance and budget
        (:func:`~jaxlab.ot.partial.partial_ot`).

    Returns:
      ``(loss, terms)`` with :class:`WarmpotTerms`.

    Raises:
      ConfigError: concrete labels outside ``[0, C)``; under jit check ``terms.labels_in_range``.
    """
    logp_t = jax.nn.log_softmax(logits_t)
    cost = ground_cost(z_s, z_t, logp_t, y_s, eta1, eta2)
    out, w_plan = plan_weights(
        jax.lax.stop_gradient(cost), mass, beta, epsilon, tol=tol, max_iter=max_iter
    )
    w = plan_share * (w_plan / jnp.maximum(w_plan.sum(), 1e-12))
    if weights is not None:
        w = w + weights
    ce = weighted_ce(logits_s, y_s, w)
    transport = eta3 * jnp.sum(out.matrix * cost)  # π fixed: out.matrix is stop-gradient
    probs_t = jnp.exp(logp_t)
    ent = -jnp.mean(jnp.sum(probs_t * logp_t, axis=1))
    loss = ce + transport + entropy * ent
    ok = ids_in_range(y_s, logits_s.shape[-1])
    return loss, WarmpotTerms(jax.lax.stop_gradient(w), out, ce, transport, ent, ok)


def pada_class_weights(
    prev: Float[Array, " C"], mean_probs: Float[Array, " C"], momentum
) -> Float[Array, " C"]:
    """PADA's class weights, kept as a running average over batches.

    PADA (Cao et al., ECCV 2018, Eq. 5) weighs the source classes by the target's mean predicted
    distribution ``γ = (1/n_t) Σ_j ŷ_j``, normalised by its largest entry, ``γ ← γ / max γ``, and
    recomputes it over the whole target set every so often; here each step's target batch gives
    ``γ_batch`` and the weights are its running average,
    ``w ← m w + (1 − m) γ_batch / max γ_batch`` (``m = momentum``; ``m = 0`` is PADA's Eq. 5 on the
    batch). The loss normalises ``w[y_i]`` over the batch (:func:`batch_loss`), as PyTorch's
    weighted cross-entropy does.

    Args:
      prev: the current weights ``(C,)`` (ones at the start).
      mean_probs: the batch's mean target softmax ``(C,)``.
      momentum: ``m`` in ``[0, 1)``.
    Returns:
      the new weights ``(C,)``.
    """
    return momentum * prev + (1.0 - momentum) * mean_probs / jnp.max(mean_probs)


def batch_loss(model, x_s, y_s, x_t, knobs: Knobs, alpha_t, class_w, *, tol, max_iter):
    """The WARMPOT loss of one batch of a model (:func:`warmpot_loss` on its outputs).

    Args:
      model: the :class:`~jaxlab.methods.warmpot.model.Network` (``features``, ``classify``).
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
    w_class = class_w[y_s] / jnp.maximum(class_w[y_s].sum(), 1e-12)
    loss, terms = warmpot_loss(
        z_s, logits_s, y_s, z_t, logits_t, mass=alpha_t, beta=knobs.beta,
        epsilon=knobs.epsilon, eta1=knobs.eta1, eta2=knobs.eta2, eta3=knobs.eta3,
        entropy=knobs.entropy, plan_share=knobs.mode[0],
        weights=knobs.mode[1] / x_s.shape[0] + knobs.mode[2] * w_class, tol=tol, max_iter=max_iter,
    )  # fmt: skip
    aux = {
        "w": terms.weights,
        "at_cap": capacity_share(terms.plan.matrix.sum(1), knobs.beta),
        "ot_converged": terms.plan.converged,
        "ot_iters": terms.plan.n_iter,
        "mean_target_probs": jax.lax.stop_gradient(jnp.exp(jax.nn.log_softmax(logits_t)).mean(0)),
        "ce": terms.ce,
        "transport": terms.transport,
    }
    return loss, aux
