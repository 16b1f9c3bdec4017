"""The one shape every language model of jaxlab has: hidden states, then a head.

:class:`LanguageModel` is the base of the baseline :class:`~jaxlab.lm.transformer.Transformer`,
the RMT and the xLSTM. A model defines two methods, and the base composes them:

- ``hidden(tokens_BT, *, segment_ids=None, positions=None) -> h_BTD``: the final-normed hidden
  states (tokens checked where they enter, :func:`jaxlab.nn.layers.check_token_ids`);
- ``logits_from_hidden(h_BTD) -> logits_BTV``: the head (unembedding, and any logit cap), in
  float32 (float64 for a float64 model);
- ``__call__`` = ``logits_from_hidden(hidden(...))``, written once here.

The split is what :func:`jaxlab.lm.task.chunked_cross_entropy` needs to apply the head one block of
tokens at a time (the ``(B, T, V)`` logits never exist at once), so every model that subclasses
this base trains with ``loss_chunk > 0``. A model of the user's own that does not subclass it still
fits :class:`~jaxlab.lm.task.LMTask` as long as it maps ``(tokens, segment_ids=, positions=)`` to
logits; it then trains with ``loss_chunk=0``.
"""

from __future__ import annotations

from flax import nnx
from jaxtyping import Array, Float, Int

__all__ = ["LanguageModel"]


class LanguageModel(nnx.Module):
    """Int tokens ``(B, T)`` → logits ``(B, T, V)``: :meth:`hidden`, then the head.

    Subclasses define both methods (and may add generation: ``init_cache`` and ``extend``, see
    :mod:`jaxlab.lm.generate`).
    """

    def __call__(
        self,
        tokens_BT: Int[Array, "B T"],
        *,
        segment_ids: Int[Array, "B T"] | None = None,
        positions: Int[Array, "B T"] | None = None,
    ) -> Float[Array, "B T V"]:
        """The logits of every position (causal; documents masked by ``segment_ids`` where the
        model's config asks for it; ``positions`` restart at each packed document)."""
        h_BTD = self.hidden(tokens_BT, segment_ids=segment_ids, positions=positions)
        return self.logits_from_hidden(h_BTD)

    def hidden(
        self,
        tokens_BT: Int[Array, "B T"],
        *,
        segment_ids: Int[Array, "B T"] | None = None,
        positions: Int[Array, "B T"] | None = None,
    ) -> Float[Array, "B T D"]:
        """The final-normed hidden states whose :meth:`logits_from_hidden` are the logits."""
        raise NotImplementedError(f"{type(self).__name__} must define hidden()")

    def logits_from_hidden(self, h_BTD: Float[Array, "B T D"]) -> Float[Array, "B T V"]:
        """The head: hidden states ``(B, T, D)`` → logits ``(B, T, V)`` in float32."""
        raise NotImplementedError(f"{type(self).__name__} must define logits_from_hidden()")
