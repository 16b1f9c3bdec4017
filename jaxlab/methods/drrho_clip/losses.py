"""DRRho-CLIP's contrastive objectives as pure functions: CLIP, GCL/SogCLR, DRRho, its surrogate.

Notation (Wei et al., ICML 2025, Sec. 4 "DRRho-CLIP"): a batch of B normalised image and text
embeddings ``img_BD``, ``txt_BD`` with similarities s_ij = img_i·txt_j, and a frozen reference
model's similarities r_ij computed the same way. For an image anchor i and a text candidate j ≠ i
the *reference-adjusted margin* is d_ij = ((s_ij − s_ii) − (r_ij − r_ii)) / τ, and the DRRho
objective (the paper's Eq. (9) written on one batch, with the reference using the target's τ) is

    F = (1/B) Σ_i [ τ log(ε + (1/(B−1)) Σ_{j≠i} exp(d_ij))
                  + τ log(ε + (1/(B−1)) Σ_{j≠i} exp(d'_ji)) ]

with d'_ji the same margin for text anchor i against image candidates j. Without a reference
(r ≡ 0) it is the global contrastive loss of SogCLR (Yuan et al. 2022) / FastCLIP (Wei et al.
2024). Every function works on *anchors against candidates*: ``anchor_BD`` may be a device's local
rows of the global batch and ``candidate_ND`` all of it, with the positive of local anchor i at
column ``offset + i``; with ``offset = 0`` and anchors = candidates it is the single-device batch.
That is what makes the data-parallel form (:mod:`.distributed`) equal the single-device loss.

Training with a moving-average estimator u of the inner mean (γ < 1) differentiates a surrogate
(:func:`drrho_surrogate`) whose weights exp(d_ij − u_i) are stop-gradient: this is FastCLIP's
compositional-optimisation gradient estimator, which the authors' code (``src/fast_clip/loss.py``)
implements. Where the authors' code and the paper's formula differ we follow the code, and say so:
u_i estimates log(ε + (1/B) Σ_{j≠i} exp(d_ij)) (the mean over all B columns, the diagonal adding
nothing) while the surrogate divides its weighted sum by B − 1, so for γ = 1 and ε = 0 its
gradient is B/(B−1) times ∇F (tested). Also as in the code, u lives in the log domain and a sample
seen for the first time takes the batch estimate itself (:func:`update_log_u`).

Checks and ``jit``. Every public loss takes plain arrays. Shapes are checked always (they are
static): mismatched batches, a reference whose batch differs from the learner's or whose two
embeddings differ in width (the reference's width Z may differ from the learner's D: it is another
model), an empty batch, each a one-line :class:`~jaxlab.core.errors.ConfigError`. Values (τ > 0,
ε ≥ 0, γ ∈ (0, 1]) are checked when concrete; τ, ε and γ may also be traced (``jax.jit`` with them
as arguments, a learned temperature, ``jax.grad`` with respect to τ or ε: ∂F/∂ε = τ·mean_i
1/(ε + m_i) summed over both directions, also at ε = 0), and then they are not inspected: τ = 0
gives inf/NaN, which ``jax.experimental.checkify.checkify(loss, errors=checkify.float_checks)``
reports (and the training loop's finiteness check stops on), while a negative τ or ε gives a
finite, meaningless value.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core.checks import is_traced
from jaxlab.core.errors import ConfigError

__all__ = [
    "ContrastiveTables",
    "anchor_log_terms",
    "check_embeddings",
    "check_tau_eps",
    "clip_loss",
    "distill_loss",
    "drrho_loss",
    "drrho_surrogate",
    "gate_off",
    "gcl_loss",
    "init_tables",
    "margins",
    "per_pair_clip_loss",
    "similarities",
    "surrogate_terms",
    "update_log_u",
    "write_tables",
]


def _check_scalar(name: str, value: object, ok, want: str) -> None:
    """One-line error unless ``value`` is a real scalar satisfying ``ok`` (values only when
    concrete: a traced scalar is checked for its shape alone)."""
    if isinstance(value, str | bytes | bool):
        raise ConfigError(f"{name} must be {want}, got {value!r}")
    if jnp.ndim(value) != 0:
        raise ConfigError(f"{name} must be a scalar, got shape {jnp.shape(value)}")
    if not is_traced(value):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be {want}, got {value!r}") from None
        if not ok(number):
            raise ConfigError(f"{name} must be {want}, got {value!r}")


def check_tau_eps(tau: object, eps: object = 0.0) -> None:
    """One-line :class:`ConfigError` unless ``tau`` (> 0) and ``eps`` (>= 0) are finite real
    scalars; a traced scalar is checked for its shape alone."""
    _check_scalar("tau", tau, lambda t: t > 0 and math.isfinite(t), "a positive finite number")
    _check_scalar("eps", eps, lambda e: e >= 0 and math.isfinite(e), "a finite number >= 0")


def check_embeddings(*arrays: jax.Array | None) -> None:
    """One-line :class:`ConfigError` unless every array given is ``(B, D)`` with one ``D``."""
    shapes = [a.shape for a in arrays if a is not None]
    if any(len(s) != 2 for s in shapes) or len({s[-1] for s in shapes}) > 1:
        raise ConfigError(f"embeddings must be (B, D) with one D, got shapes {shapes}")


def _check_pairs(img, txt, ref_img=None, ref_txt=None, *, min_batch: int = 1) -> None:
    """The learner's pairs ``(B, D)`` with ``B >= min_batch``, and the reference's ``(B, Z)``."""
    check_embeddings(img, txt)
    if img.shape[0] != txt.shape[0] or img.shape[0] < min_batch:
        raise ConfigError(
            f"need B >= {min_batch} matching pairs, got img {img.shape} and txt {txt.shape}"
        )
    if (ref_img is None) != (ref_txt is None):
        raise ConfigError("give both reference embeddings (ref_img, ref_txt) or neither")
    if ref_img is None:
        return
    b = img.shape[0]
    if jnp.ndim(ref_img) != 2 or jnp.shape(ref_img) != jnp.shape(ref_txt) or ref_img.shape[0] != b:
        raise ConfigError(
            f"the reference embeddings must be (B, Z) with the learner's B={b} and one width Z: "
            f"got ref_img {jnp.shape(ref_img)} and ref_txt {jnp.shape(ref_txt)} for img "
            f"{img.shape} and txt {txt.shape}"
        )


def similarities(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a @ b.T`` accumulated in float32 at least (float64 when the inputs are)."""
    return jnp.dot(a, b.T, preferred_element_type=jnp.promote_types(a.dtype, jnp.float32))


def margins(
    anchor_BD: Float[Array, "B D"],
    candidate_ND: Float[Array, "N D"],
    ref_anchor_BZ: Float[Array, "B Z"] | None = None,
    ref_candidate_NZ: Float[Array, "N Z"] | None = None,
    *,
    tau: float | Float[Array, ""],
    offset: int | jax.Array = 0,
) -> tuple[Float[Array, "B N"], Bool[Array, "B N"]]:
    """Reference-adjusted margins d_ij = ((s_ij − s_ii) − (r_ij − r_ii)) / τ (Sec. 4, Eq. (9)).

    Args:
      anchor_BD, candidate_ND: target embeddings; anchor i's positive is candidate ``offset + i``.
      ref_anchor_BZ, ref_candidate_NZ: the reference model's embeddings of the same pairs, or None
        for no reference (the GCL margins).
      tau: temperature (the reference uses the target's).
      offset: column of the first anchor's positive (process_index × local batch when sharded).

    Returns:
      The margins ``(B, N)`` in float32 and the mask of the negatives (False at the positives).
    """
    b, n = anchor_BD.shape[0], candidate_ND.shape[0]
    pos_B = offset + jnp.arange(b)
    neg_BN = jnp.arange(n)[None, :] != pos_B[:, None]
    s_BN = similarities(anchor_BD, candidate_ND)
    d_BN = s_BN - jnp.take_along_axis(s_BN, pos_B[:, None], axis=1)
    if ref_anchor_BZ is not None:
        r_BN = similarities(ref_anchor_BZ, ref_candidate_NZ)
        d_BN = d_BN - (r_BN - jnp.take_along_axis(r_BN, pos_B[:, None], axis=1))
    return d_BN / tau, neg_BN


@jax.custom_jvp
def _log_add_eps(log_m: Array, eps: Array) -> Array:
    """``log(ε + m)`` from ``log m`` and ε ≥ 0; its ε-derivative ``1/(ε + m)`` holds at ε = 0 too
    (through ``log ε`` it would be ``0 · ∞``)."""
    return jnp.logaddexp(log_m, jnp.log(eps))


@_log_add_eps.defjvp
def _log_add_eps_jvp(primals, tangents):
    log_m, eps = primals
    d_log_m, d_eps = tangents
    out = _log_add_eps(log_m, eps)
    return out, jnp.exp(log_m - out) * d_log_m + jnp.exp(-out) * d_eps


def _log_eps_mean(
    d_BN: Float[Array, "B N"], neg_BN: Bool[Array, "B N"], eps: float | Array, count: int
) -> Float[Array, " B"]:
    """log(ε + (1/count) Σ_{j negative} exp(d_ij)), stable for large margins and ε = 0; ε may be
    traced."""
    lse_B = jax.nn.logsumexp(jnp.where(neg_BN, d_BN, -jnp.inf), axis=1) - math.log(count)
    if not is_traced(eps) and float(eps) == 0:
        return lse_B
    return _log_add_eps(lse_B, jnp.asarray(eps, lse_B.dtype))


def anchor_log_terms(
    anchor_BD: Float[Array, "B D"],
    candidate_ND: Float[Array, "N D"],
    ref_anchor_BZ: Float[Array, "B Z"] | None = None,
    ref_candidate_NZ: Float[Array, "N Z"] | None = None,
    *,
    tau: float | Float[Array, ""],
    eps: float | Float[Array, ""],
    offset: int | jax.Array = 0,
) -> Float[Array, " B"]:
    """Per-anchor log(ε + (1/(N−1)) Σ_{j≠i} exp(d_ij)) of Eq. (9), unscaled by τ."""
    d_BN, neg_BN = margins(
        anchor_BD, candidate_ND, ref_anchor_BZ, ref_candidate_NZ, tau=tau, offset=offset
    )
    return _log_eps_mean(d_BN, neg_BN, eps, candidate_ND.shape[0] - 1)


def gate_off(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"] | None,
    ref_txt_BZ: Float[Array, "B Z"] | None,
    *,
    tau: float | Float[Array, ""],
    eps: float | Float[Array, ""],
) -> Bool[Array, "2 B"]:
    """Which anchors the ε of Eq. (9) switches off: image anchors (row 0) and text anchors (row 1).

    An anchor's gradient weight in ``log(ε + m_i)``, ``m_i = (1/(B−1)) Σ_{j≠i} exp(d_ij)``, is
    ``m_i / (ε + m_i)``; it is off (weight below 1/2) when ``m_i < ε``, that is when its
    reference-adjusted margins lie below about ``−τ ln(1/ε)``. With ε = 0 no anchor is off.
    """
    check_tau_eps(tau, eps)
    _check_pairs(img_BD, txt_BD, ref_img_BZ, ref_txt_BZ, min_batch=2)
    if not is_traced(eps) and float(eps) == 0:
        return jnp.zeros((2, img_BD.shape[0]), bool)
    count = img_BD.shape[0] - 1
    rows = []
    for anchor, cand, r_anchor, r_cand in (
        (img_BD, txt_BD, ref_img_BZ, ref_txt_BZ),
        (txt_BD, img_BD, ref_txt_BZ, ref_img_BZ),
    ):
        d_BN, neg_BN = margins(anchor, cand, r_anchor, r_cand, tau=tau)
        rows.append(_log_eps_mean(d_BN, neg_BN, 0.0, count) < jnp.log(eps))  # log m_i < log ε
    return jnp.stack(rows)


def drrho_loss(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"] | None,
    ref_txt_BZ: Float[Array, "B Z"] | None,
    *,
    tau: float | Float[Array, ""],
    eps: float | Float[Array, ""],
) -> Float[Array, ""]:
    """The DRRho-CLIP objective F on one global batch (module docstring; paper Eq. (9)).

    Both directions are summed (image anchors against texts, text anchors against images), as in
    the formula; ``ref_img_BZ = ref_txt_BZ = None`` gives exactly :func:`gcl_loss`.
    """
    check_tau_eps(tau, eps)
    _check_pairs(img_BD, txt_BD, ref_img_BZ, ref_txt_BZ, min_batch=2)
    img_terms = anchor_log_terms(img_BD, txt_BD, ref_img_BZ, ref_txt_BZ, tau=tau, eps=eps)
    txt_terms = anchor_log_terms(txt_BD, img_BD, ref_txt_BZ, ref_img_BZ, tau=tau, eps=eps)
    return tau * jnp.mean(img_terms + txt_terms)


def gcl_loss(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    *,
    tau: float | Float[Array, ""],
    eps: float | Float[Array, ""],
) -> Float[Array, ""]:
    """The global contrastive loss of SogCLR/FastCLIP (Eq. (9) without a reference), γ = 1."""
    return drrho_loss(img_BD, txt_BD, None, None, tau=tau, eps=eps)


def clip_loss(
    img_BD: Float[Array, "B D"], txt_BD: Float[Array, "B D"], *, tau: float | jax.Array
) -> Float[Array, ""]:
    """CLIP's InfoNCE (Radford et al. 2021): mean cross-entropy of both directions, halved."""
    _check_pairs(img_BD, txt_BD, min_batch=1)
    return jnp.mean(per_pair_clip_loss(img_BD, txt_BD, tau=tau))


def per_pair_clip_loss(
    img_BD: Float[Array, "B D"], txt_BD: Float[Array, "B D"], *, tau: float | jax.Array
) -> Float[Array, " B"]:
    """Each pair's InfoNCE within the batch, (image→text + text→image) / 2 (JEST's scores)."""
    check_tau_eps(tau)
    _check_pairs(img_BD, txt_BD, min_batch=0)
    logits_BB = similarities(img_BD, txt_BD) / tau
    diag_B = jnp.diagonal(logits_BB)
    img_ce = jax.nn.logsumexp(logits_BB, axis=1) - diag_B
    txt_ce = jax.nn.logsumexp(logits_BB, axis=0) - diag_B
    return (img_ce + txt_ce) / 2


def distill_loss(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"],
    ref_txt_BZ: Float[Array, "B Z"],
    *,
    tau: float | Float[Array, ""],
    ref_tau: float | Float[Array, ""],
) -> Float[Array, ""]:
    """Knowledge distillation from the reference: cross-entropy of the target's softmax rows
    against the reference's (both directions, halved), as the authors' ``distill_loss``."""
    check_tau_eps(tau)
    _check_scalar("ref_tau", ref_tau, lambda t: t > 0 and math.isfinite(t), "a positive number")
    _check_pairs(img_BD, txt_BD, ref_img_BZ, ref_txt_BZ, min_batch=1)
    s_BB = similarities(img_BD, txt_BD) / tau
    r_BB = jax.lax.stop_gradient(similarities(ref_img_BZ, ref_txt_BZ) / ref_tau)

    def ce(student, teacher):
        return -jnp.mean(jnp.sum(jax.nn.softmax(teacher, 1) * jax.nn.log_softmax(student, 1), 1))

    return (ce(s_BB, r_BB) + ce(s_BB.T, r_BB.T)) / 2


# --------------------------------------------------------------------- moving-average estimator


class ContrastiveTables(NamedTuple):
    """Per-sample state of the GCL/DRRho estimator, indexed by sample id (length N of the data).

    ``log_u_img[k]``/``log_u_txt[k]`` estimate log(ε + (1/B) Σ_{j≠k} exp(d_kj)) for sample k as an
    image / text anchor; ``seen[k]`` says whether k has been visited (first-visit rule).
    """

    log_u_img: Float[Array, " N"]
    log_u_txt: Float[Array, " N"]
    seen: Bool[Array, " N"]


def init_tables(num_samples: int) -> ContrastiveTables:
    """Empty tables for ``num_samples`` samples."""
    if num_samples < 1:
        raise ConfigError(f"num_samples must be positive, got {num_samples}")
    zeros = jnp.zeros((num_samples,), jnp.float32)
    return ContrastiveTables(zeros, zeros, jnp.zeros((num_samples,), bool))


def update_log_u(
    log_u_B: Float[Array, " B"],
    log_g_B: Float[Array, " B"],
    seen_B: Bool[Array, " B"],
    gamma: float | Float[Array, ""],
) -> Float[Array, " B"]:
    """u ← (1−γ)·u + γ·g in the log domain; a first visit takes g (FastCLIP, Alg. 1, line 5).

    ``log(1−γ) + log_u`` and ``log γ + log_g`` are combined with ``logaddexp``, so u never leaves
    the log domain (the inner means span e^{±1/τ}, beyond float32 for τ = 0.01). γ = 1 gives g.
    """
    _check_scalar("gamma", gamma, lambda g: 0 < g <= 1, "in (0, 1]")
    if not is_traced(gamma) and float(gamma) == 1:
        return log_g_B
    # A traced γ = 1 gives log(1 − γ) = −inf, and logaddexp(−inf, log g) = log g as well.
    mixed_B = jnp.logaddexp(jnp.log1p(-gamma) + log_u_B, jnp.log(gamma) + log_g_B)
    return jnp.where(seen_B, mixed_B, log_g_B)


def _surrogate_direction(
    d_BN: Float[Array, "B N"], neg_BN: Bool[Array, "B N"], log_u_B: Float[Array, " B"]
) -> Float[Array, " B"]:
    """(1/(N−1)) Σ_{j≠i} sg(exp(d_ij − u_i)) · d_ij per anchor."""
    w_BN = jax.lax.stop_gradient(jnp.where(neg_BN, jnp.exp(d_BN - log_u_B[:, None]), 0.0))
    return jnp.sum(w_BN * jnp.where(neg_BN, d_BN, 0.0), axis=1) / (d_BN.shape[1] - 1)


def drrho_surrogate(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"] | None,
    ref_txt_BZ: Float[Array, "B Z"] | None,
    tables: ContrastiveTables,
    ids_B: Int[Array, " B"],
    *,
    tau: float | Float[Array, ""],
    eps: float | Float[Array, ""],
    gamma: float | Float[Array, ""],
    anchors: slice | None = None,
    offset: int | jax.Array = 0,
) -> tuple[Float[Array, ""], ContrastiveTables]:
    """FastCLIP's weighted surrogate of F with the moving-average estimator (γ < 1 or = 1).

    Value = τ · mean_i Σ_dir (1/(N−1)) Σ_{j≠i} sg(exp(d_ij − u_i)) d_ij, where u_i is the updated
    estimate of log(ε + (1/N) Σ_{j≠i} exp(d_ij)); only its gradient means anything (module
    docstring: for γ = 1, ε = 0 it is B/(B−1)·∇F). The value is *not* F; report F beside it.

    Args:
      img_BD, txt_BD: the global batch (candidates); ``ref_*`` the reference's, or None (GCL).
      tables: the per-sample estimates; ``ids_B`` the sample ids of the anchors.
      anchors: which rows of the global batch are this device's anchors (default: all); their
        positives sit at ``offset + i``.

    Returns:
      The surrogate (mean over the anchors) and the tables with the anchors' entries updated.
    """
    check_tau_eps(tau, eps)
    _check_pairs(img_BD, txt_BD, ref_img_BZ, ref_txt_BZ, min_batch=2)
    rows = anchors or slice(None)
    n_anchors = len(range(*rows.indices(img_BD.shape[0])))
    if jnp.shape(ids_B) != (n_anchors,):
        raise ConfigError(
            f"ids_B must hold one sample id per anchor: {n_anchors} anchors, got ids_B of shape "
            f"{jnp.shape(ids_B)}"
        )
    ref = ref_img_BZ is not None
    d_img, neg = margins(
        img_BD[rows],
        txt_BD,
        ref_img_BZ[rows] if ref else None,
        ref_txt_BZ,
        tau=tau,
        offset=offset,
    )
    d_txt, _ = margins(
        txt_BD[rows],
        img_BD,
        ref_txt_BZ[rows] if ref else None,
        ref_img_BZ,
        tau=tau,
        offset=offset,
    )
    value_B, log_u_img, log_u_txt = surrogate_terms(
        d_img,
        d_txt,
        neg,
        tables.log_u_img[ids_B],
        tables.log_u_txt[ids_B],
        tables.seen[ids_B],
        eps=eps,
        gamma=gamma,
    )
    return tau * jnp.mean(value_B), write_tables(tables, ids_B, log_u_img, log_u_txt)


def surrogate_terms(
    d_img_BN: Float[Array, "B N"],
    d_txt_BN: Float[Array, "B N"],
    neg_BN: Bool[Array, "B N"],
    log_u_img_B: Float[Array, " B"],
    log_u_txt_B: Float[Array, " B"],
    seen_B: Bool[Array, " B"],
    *,
    eps: float | Float[Array, ""],
    gamma: float | Float[Array, ""],
) -> tuple[Float[Array, " B"], Float[Array, " B"], Float[Array, " B"]]:
    """Per-anchor surrogate terms (unscaled by τ) and the anchors' updated log u, from the
    margins of B anchors against all N candidates (the single-device and sharded forms share it).
    """
    n = d_img_BN.shape[1]
    new_img = update_log_u(
        log_u_img_B, jax.lax.stop_gradient(_log_eps_mean(d_img_BN, neg_BN, eps, n)), seen_B, gamma
    )
    new_txt = update_log_u(
        log_u_txt_B, jax.lax.stop_gradient(_log_eps_mean(d_txt_BN, neg_BN, eps, n)), seen_B, gamma
    )
    value_B = _surrogate_direction(d_img_BN, neg_BN, new_img) + _surrogate_direction(
        d_txt_BN, neg_BN, new_txt
    )
    return value_B, new_img, new_txt


def write_tables(
    tables: ContrastiveTables,
    ids_B: Int[Array, " B"],
    log_u_img_B: Float[Array, " B"],
    log_u_txt_B: Float[Array, " B"],
) -> ContrastiveTables:
    """The tables with the entries at ``ids_B`` set to the new estimates and marked seen."""
    return ContrastiveTables(
        tables.log_u_img.at[ids_B].set(log_u_img_B),
        tables.log_u_txt.at[ids_B].set(log_u_txt_B),
        tables.seen.at[ids_B].set(True),
    )
