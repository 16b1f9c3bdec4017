"""JEST: joint example selection of a learnable sub-batch (Evans et al., NeurIPS 2024).

Evans, Parthasarathy, Merzic, Hénaff, "Data curation via joint example selection further accelerates
multimodal learning" (arXiv 2406.17711), method section "Joint example selection for multimodal
learning" and its pseudocode (Algorithm 1). From a super-batch of B pairs, JEST keeps b pairs whose
*sub-batch* is learnable: its contrastive loss is high under the learner and low under a pretrained
reference. The paper scores with the sigmoid-contrastive loss of SigLIP (Zhai et al. 2023, Eq. (1)),
because the loss of a sub-batch S then decomposes over its pairs of examples,

    ℓ(S | θ) = Σ_{i∈S} Σ_{j∈S} ℓ_ij(θ),   ℓ_ij = log(1 + exp(−z_ij (s_ij / τ + b_sig))),

with z_ii = 1 for the positive and z_ij = −1 otherwise, so the learnability of S is a sum over the
super-batch's B × B matrix A = ℓ(θ_learner) − ℓ(θ_reference) restricted to S × S
(:func:`learnability_matrix`, :func:`subbatch_learnability`). Selecting the best S jointly is
combinatorial; the paper builds it in ``n_chunks`` chunks of b/n_chunks examples (blocked
Gibbs-like sampling): each chunk is drawn *without replacement* from the softmax over the
*conditional* learnability of the remaining candidates given the examples already chosen,

    s(k | S) = ℓ-learnability(S ∪ {k}) − ℓ-learnability(S) = A_kk + Σ_{j∈S} (A_kj + A_jk),

which is its own pair's term plus its terms against the chosen examples (both directions); for the
first chunk S = ∅ and the scores are the diagonal (the marginal learnability)
(:func:`conditional_learnability`, :func:`joint_select`). Sampling k items without replacement from
a softmax is done by Gumbel-top-k (Kool et al. 2019), which is exact and jit-friendly.
``n_chunks = 1`` with deterministic selection is the independent, per-example top-k of the paper's
ablation; ``n_chunks = b`` deterministic is a greedy maximisation of the sub-batch learnability.

The scores are raw sums, not divided by the number of terms (a public adaptation of the pseudocode
divides): a division would only change how sharp the softmax is, never the order of the candidates
within a chunk. Where this differs from the paper, and what it was written from: the method README.

**JEST as DRRho-CLIP's authors run it** (``jointly_sample_batch_softmax`` in
``Optimization-AI/DRRho-CLIP``, ``src/training/train.py``; the default JEST baseline of the
experiments): the scores come from CLIP's *softmax* loss, with logit scales t (the learner's 1/τ)
and t_ref (the reference fixed at 100). The marginal score of pair k is the difference of its
negated positive logits, m_k = −t s_kk + t_ref r_kk (:func:`softmax_marginal_learnability`), and
the first chunk is drawn without replacement with probabilities *proportional to* m_k − min m
(linear weights, as their ``multinomial``, so the lowest pair is never drawn first). Every later
chunk is drawn from the softmax over the conditional score given the chosen set S,

    c(k | S) = m_k + ½ [lse_{j∈S} t s_kj + lse_{j∈S} t s_jk] − ½ [the same with t_ref, r],

the learner's minus the reference's InfoNCE loss of pair k when the chosen pairs are its candidates
(image→text and text→image averaged, k's own positive not in the denominator)
(:func:`softmax_conditional_learnability`, :func:`softmax_joint_select`). Their defaults: 2 chunks,
keep 20% of the super-batch (``filter_ratio=0.8``). Their ``topk`` flag makes only the later chunks
deterministic; ``key=None`` here makes every chunk the top ones (used by the tests).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core.errors import ConfigError
from jaxlab.methods.drrho_clip.losses import check_embeddings, similarities

__all__ = [
    "conditional_learnability",
    "joint_select",
    "learnability_matrix",
    "sigmoid_pair_losses",
    "softmax_conditional_learnability",
    "softmax_joint_select",
    "softmax_marginal_learnability",
    "subbatch_learnability",
]


def sigmoid_pair_losses(
    img_BD: Float[Array, "B D"], txt_BD: Float[Array, "B D"], *, tau: float, bias: float
) -> Float[Array, "B B"]:
    """SigLIP's loss of every (image i, text j) pair, log(1 + exp(−z_ij (s_ij/τ + bias)))."""
    check_embeddings(img_BD, txt_BD)
    logits_BB = similarities(img_BD, txt_BD) / tau + bias
    z_BB = 2.0 * jnp.eye(logits_BB.shape[0], dtype=logits_BB.dtype) - 1.0
    return jax.nn.softplus(-z_BB * logits_BB)


def learnability_matrix(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"],
    ref_txt_BZ: Float[Array, "B Z"],
    *,
    tau: float,
    bias: float,
) -> Float[Array, "B B"]:
    """A = learner's pair losses − reference's (same τ and bias), without gradient to either."""
    learner = sigmoid_pair_losses(img_BD, txt_BD, tau=tau, bias=bias)
    reference = sigmoid_pair_losses(ref_img_BZ, ref_txt_BZ, tau=tau, bias=bias)
    return jax.lax.stop_gradient(learner - reference)


def subbatch_learnability(scores_BB: Float[Array, "B B"], mask_B: Bool[Array, " B"]) -> jax.Array:
    """Learnability of the sub-batch ``mask_B``: Σ_{i,j∈S} A_ij (learner − reference loss of S)."""
    m_B = mask_B.astype(scores_BB.dtype)
    return m_B @ scores_BB @ m_B


def conditional_learnability(
    scores_BB: Float[Array, "B B"], selected_B: Bool[Array, " B"]
) -> Float[Array, " B"]:
    """s(k | S) = A_kk + Σ_{j∈S} (A_kj + A_jk): what adding candidate k ∉ S adds to S's score."""
    sel_B = selected_B.astype(scores_BB.dtype)
    return jnp.diagonal(scores_BB) + scores_BB @ sel_B + sel_B @ scores_BB


def _chunk_size(n_select: int, b: int, n_chunks: int) -> int:
    """Pairs per chunk when ``n_select`` of ``b`` are chosen in ``n_chunks`` chunks (checked)."""
    if not 0 < n_select <= b:
        raise ConfigError(f"cannot select {n_select} of a super-batch of {b}")
    if n_chunks < 1 or n_select % n_chunks:
        raise ConfigError(
            f"loss.jest_chunks={n_chunks} must divide the selected batch of {n_select}"
        )
    return n_select // n_chunks


def _draw(logits_B: Array, chunk: int, key: jax.Array | None, c: int) -> Array:
    """``chunk`` indices without replacement ∝ softmax(logits) (Gumbel-top-k with chunk ``c``'s
    key), or the top ``chunk`` when ``key`` is None."""
    if key is not None:
        logits_B = logits_B + jax.random.gumbel(jax.random.fold_in(key, c), logits_B.shape)
    return jax.lax.top_k(logits_B, chunk)[1]


def joint_select(
    scores_BB: Float[Array, "B B"],
    n_select: int,
    *,
    n_chunks: int,
    key: jax.Array | None = None,
) -> Int[Array, " b"]:
    """Indices of a sub-batch of ``n_select`` distinct examples, chosen in ``n_chunks`` chunks.

    Each chunk takes ``n_select / n_chunks`` of the not-yet-chosen candidates: sampled without
    replacement from softmax(s(k | S)) when ``key`` is given, the top ones when it is None.

    Raises:
      ConfigError: if ``n_chunks`` does not divide ``n_select`` or more are asked than exist.
    """
    b = scores_BB.shape[0]
    chunk = _chunk_size(n_select, b, n_chunks)

    def body(c, carry):
        chosen_b, selected_B = carry
        logits_B = conditional_learnability(scores_BB, selected_B)
        logits_B = jnp.where(selected_B, -jnp.inf, logits_B)  # without replacement
        new = _draw(logits_B, chunk, key, c)
        chosen_b = jax.lax.dynamic_update_slice(chosen_b, new.astype(jnp.int32), (c * chunk,))
        return chosen_b, selected_B.at[new].set(True)

    init = (jnp.zeros((n_select,), jnp.int32), jnp.zeros((b,), bool))
    return jax.lax.fori_loop(0, n_chunks, body, init)[0]


def softmax_marginal_learnability(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"],
    ref_txt_BZ: Float[Array, "B Z"],
    *,
    scale: float,
    ref_scale: float,
) -> Float[Array, " B"]:
    """m_k = −t s_kk + t_ref r_kk: the learner's minus the reference's negated positive logit."""
    check_embeddings(img_BD, txt_BD)
    check_embeddings(ref_img_BZ, ref_txt_BZ)
    s_B = jnp.sum(img_BD * txt_BD, axis=1, dtype=jnp.promote_types(img_BD.dtype, jnp.float32))
    r_B = jnp.sum(ref_img_BZ * ref_txt_BZ, axis=1, dtype=s_B.dtype)
    return jax.lax.stop_gradient(-scale * s_B + ref_scale * r_B)


def _masked_negative_term(img_BD, txt_BD, scale, selected_B):
    """½ [lse_{j∈S} t s_kj + lse_{j∈S} t s_jk] for every k (S must not be empty)."""
    logits_BB = scale * similarities(img_BD, txt_BD)
    lse = jax.nn.logsumexp
    i2t_B = lse(jnp.where(selected_B[None, :], logits_BB, -jnp.inf), axis=1)
    t2i_B = lse(jnp.where(selected_B[:, None], logits_BB, -jnp.inf), axis=0)
    return 0.5 * (i2t_B + t2i_B)


def softmax_conditional_learnability(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"],
    ref_txt_BZ: Float[Array, "B Z"],
    selected_B: Bool[Array, " B"],
    *,
    scale: float,
    ref_scale: float,
) -> Float[Array, " B"]:
    """c(k | S): learner's minus reference's InfoNCE loss of pair k against the chosen pairs S."""
    m_B = softmax_marginal_learnability(
        img_BD, txt_BD, ref_img_BZ, ref_txt_BZ, scale=scale, ref_scale=ref_scale
    )
    learner_B = _masked_negative_term(img_BD, txt_BD, scale, selected_B)
    reference_B = _masked_negative_term(ref_img_BZ, ref_txt_BZ, ref_scale, selected_B)
    return m_B + jax.lax.stop_gradient(learner_B - reference_B)


def softmax_joint_select(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"],
    ref_txt_BZ: Float[Array, "B Z"],
    n_select: int,
    *,
    n_chunks: int,
    scale: float,
    ref_scale: float,
    key: jax.Array | None = None,
) -> Int[Array, " b"]:
    """The authors' chunked selection of ``n_select`` distinct pairs (module docstring).

    Chunk 1 is drawn ∝ m_k − min m, every later chunk from softmax(c(k | S)), both without
    replacement (Gumbel-top-k on the log weights); with ``key=None`` each chunk is the top ones.

    Raises:
      ConfigError: if ``n_chunks`` does not divide ``n_select`` or more are asked than exist.
    """
    b = img_BD.shape[0]
    chunk = _chunk_size(n_select, b, n_chunks)
    emb = (img_BD, txt_BD, ref_img_BZ, ref_txt_BZ)
    m_B = softmax_marginal_learnability(*emb, scale=scale, ref_scale=ref_scale)
    # Linear weights m − min m for the first chunk, as log weights (log 0 = −inf: never drawn).
    logits_B = jnp.log(m_B - jnp.min(m_B)) if key is not None else m_B
    selected_B = jnp.zeros((b,), bool)
    chosen = []
    for c in range(n_chunks):  # a handful of chunks: unrolled
        if c > 0:
            logits_B = softmax_conditional_learnability(
                *emb, selected_B, scale=scale, ref_scale=ref_scale
            )
            logits_B = jnp.where(selected_B, -jnp.inf, logits_B)  # without replacement
        new = _draw(logits_B, chunk, key, c)
        chosen.append(new.astype(jnp.int32))
        selected_B = selected_B.at[new].set(True)
    return jnp.concatenate(chosen)
