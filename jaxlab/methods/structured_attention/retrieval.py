"""Associative recall with one attention layer: the mechanism probe of structured attention.

Kuang et al. 2025 (Sec. 1, 3) argue that standard multi-head attention loses information when its
head dimension is below the input dimension: each head scores ``x^T W_Q W_K^T x'`` with a
rank-``d_head`` matrix, so keys that agree on those directions look alike. Here a prompt of ``N``
(key, value) pairs and a query equal to one key (:func:`jaxlab.data.icl_retrieval.retrieval_batch`)
is answered by a single attention layer: tokens ``(x_i, y_i)`` and the query token ``(x_q, 0)``
are read in to width ``D``, the query attends (causally, it comes last) through one
:class:`~jaxlab.methods.structured_attention.icl_model.ScoredAttention` of the chosen scoring, and
the read-out of the query's residual plus attention output is the prediction of ``y_j``. No MLP
and no positions: the only route from ``y_j`` to the answer is the attention weight on key ``j``.
"""

from __future__ import annotations

import dataclasses

import grain
import jax.numpy as jnp
import optax
from flax import nnx
from jaxtyping import Array, Float

from jaxlab.core.config import TrainConfig
from jaxlab.core.optim import make_optimizer
from jaxlab.data.icl_retrieval import retrieval_batch
from jaxlab.methods.structured_attention.icl_model import ICLConfig, ScoredAttention
from jaxlab.methods.structured_attention.icl_task import icl_lr_groups
from jaxlab.nn.linear import LinearSpec

__all__ = ["RetrievalModel", "RetrievalTask"]

EVAL_SEED = 1_000_003  # the evaluation stream, apart from every training seed


class RetrievalModel(nnx.Module):
    """``xs (B, N, d)``, ``ys (B, N)``, ``query (B, d)`` -> the predicted value ``(B,)``.

    ``cfg.dim`` is ``d``, ``cfg.n_points`` the number of keys ``N``; ``cfg.num_layers`` must be 1
    (it sets the output map's init scale of the attention, as in the ICL model).
    """

    def __init__(self, cfg: ICLConfig, *, rngs: nnx.Rngs):
        D, dense = cfg.d_model, LinearSpec()
        self.cfg = cfg
        self.read_in = dense(cfg.dim + 1, D, std=cfg.input_stds()[0], rngs=rngs)
        self.norm = nnx.LayerNorm(D, use_bias=False, rngs=rngs)
        self.attn = ScoredAttention(cfg, rngs=rngs)
        self.read_out = dense(D, 1, std=cfg.output_std(D), rngs=rngs)

    def __call__(
        self,
        xs_BNd: Float[Array, "B N d"],
        ys_BN: Float[Array, "B N"],
        query_Bd: Float[Array, "B d"],
    ) -> Float[Array, " B"]:
        pairs_BNd = jnp.concatenate([xs_BNd, ys_BN[..., None]], axis=-1)
        q_B1d = jnp.concatenate([query_Bd, jnp.zeros_like(query_Bd[:, :1])], axis=-1)[:, None]
        h_BTD = self.read_in(jnp.concatenate([pairs_BNd, q_B1d], axis=1))
        # Only the query (last) token's output is read, so only its row of logits is computed.
        out_BD = h_BTD[:, -1] + self.attn(self.norm(h_BTD), num_queries=1)[:, -1]
        return self.read_out(out_BD)[..., 0]

    def flops(self) -> float:
        """Analytic forward FLOPs of one prompt (``T = N + 1`` tokens; a multiply-add is 2): the
        read-in, the attention layer for the one query (its logits against the ``T`` keys, the
        value map, the value sum, the output map), the read-out."""
        cfg, T = self.cfg, self.cfg.n_points + 1
        return 2 * T * (cfg.dim + 1) * cfg.d_model + self.attn.flops(T, 1) + 2 * cfg.d_model


@dataclasses.dataclass
class RetrievalTask:
    """Fresh recall prompts per step (a :class:`jaxlab.core.task.Task` for the shared loop)."""

    model: ICLConfig
    query_noise: float = 0.0  # the query is its key plus this times a fresh key (data module)
    max_steps: int = 1_000_000  # length of the index stream the training pipeline maps over

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        return RetrievalModel(self.model, rngs=rngs)

    def _batch(self, seed: int, index: int, batch_size: int) -> dict:
        batch = retrieval_batch(
            seed, index, batch_size, self.model.dim, self.model.n_points, self.query_noise
        )
        del batch["index"]
        return batch

    def loss(self, model, batch, key=None):
        del key
        err_B = (model(batch["xs"], batch["ys"], batch["query"]) - batch["target"]) ** 2
        loss = jnp.mean(err_B)
        return loss, {"loss": loss, "error": loss}

    def train_iterator(self, batch_size: int, seed: int):
        ds = grain.MapDataset.range(self.max_steps).map(
            lambda i: self._batch(seed, int(i), batch_size)
        )
        return iter(ds.to_iter_dataset())

    def eval_batches(self, batch_size: int, num_batches: int):
        return [self._batch(EVAL_SEED, i, batch_size) for i in range(num_batches)]

    def units_per_example(self) -> tuple[int, str]:
        return 1, "prompts"

    def optimizer(self, cfg: TrainConfig, schedule: optax.Schedule):
        """The loop's AdamW, with the authors' per-layer µP rates under ``parametrization="mup"``
        (:func:`~jaxlab.methods.structured_attention.mup.mup_lr_groups`)."""
        return make_optimizer(cfg, lr_groups=icl_lr_groups(self), schedule=schedule)
