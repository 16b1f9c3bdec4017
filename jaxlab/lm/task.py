"""Language modelling as a :class:`jaxlab.core.loop.Task`: packed text and its loss.

The data is byte-level text (:mod:`jaxlab.data.text`: the shipped KJV, user files, ``hf:``) or a
corpus prepared into token shards (``source="shards:DIR"``, :mod:`jaxlab.data.shards`), packed the
same way into rows with segment ids and positions. The loss is the mean next-token cross-entropy
in float32 (nats) plus an optional z-loss ``coef * mean(logsumexp(logits)^2)`` (PaLM, Chowdhery et
al. 2022, Sec. 5), which is part of the objective but not of the reported ``loss``. For byte-level
data, ``bits_per_byte`` is the loss divided by ln 2. For other tokenizers the metrics add
``bits_per_token`` (loss / ln 2) and ``bits_per_byte`` becomes bits per token divided by the
corpus's document bytes per token (from the shard index: a corpus average, not the exact bytes of
each batch). Any model that maps ``(tokens, segment_ids=, positions=)`` to logits fits: the
baseline :class:`~jaxlab.lm.transformer.Transformer` and the methods' LMs alike. The z-loss
coefficient belongs to the task (and so to each experiment's config), not to a model's config.
With ``loss_chunk`` > 0 the loss is :func:`chunked_cross_entropy`: the model gives its final hidden
states (``model.hidden``) and its head maps one block of ``loss_chunk`` tokens at a time to logits
(``model.logits_from_hidden``: unembedding and any logit cap) under ``jax.checkpoint``, so the
``(B, T, V)`` logits and their gradient never exist at once; the value and gradient are those of
the plain loss. Every :class:`~jaxlab.lm.model.LanguageModel` (the Transformer, the RMT, the
xLSTM) has both methods.
Where the loss is traced (before any step runs) the model's output vocabulary is checked against
the data's (256 byte values, or the shard index's vocabulary): a smaller one would index past the
logits and is a one-line ConfigError; :func:`fit_vocab` gives a model config the shards' vocabulary.
:func:`compile_lm_train_step` compiles an LM's train step for a mesh ahead of time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.aot import compile_train_step
from jaxlab.core.config import TrainConfig, check
from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import AxisRules, MeshConfig, make_mesh
from jaxlab.core.step import build_train_program
from jaxlab.data.corpus import load_documents
from jaxlab.data.shards import ShardCorpus, shards_dir
from jaxlab.data.text import (
    VOCAB_SIZE,
    eval_batches,
    pack_tokens,
    text_dataset,
    unigram_entropy_bits,
)

__all__ = [
    "LMTask",
    "chunked_cross_entropy",
    "compile_lm_train_step",
    "cross_entropy",
    "fit_vocab",
]


def cross_entropy(
    logits_BTV: Float[Array, "B T V"], targets_BT: Int[Array, "B T"], z_loss: float = 0.0
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Mean token cross-entropy (nats) and mean squared log-partition, both in float32."""
    logits_BTV = logits_BTV.astype(jnp.float32)
    lse_BT = jax.nn.logsumexp(logits_BTV, axis=-1)
    target_logit_BT = jnp.take_along_axis(logits_BTV, targets_BT[..., None], axis=-1)[..., 0]
    ce = jnp.mean(lse_BT - target_logit_BT)
    return ce, jnp.mean(lse_BT**2) * z_loss


def chunked_cross_entropy(
    h_BTD: Float[Array, "B T D"],
    logits_fn: Callable[[Array], Array],
    targets_BT: Int[Array, "B T"],
    *,
    chunk: int,
    z_loss: float = 0.0,
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """:func:`cross_entropy` of ``logits_fn(h_BTD)``, computed ``chunk`` tokens at a time.

    A ``lax.scan`` over blocks of ``chunk`` positions applies ``logits_fn`` (the model's
    unembedding and logit cap) to one block, takes its log-partition and target logits and keeps
    only their sums; each step is under ``jax.checkpoint``, so the backward recomputes a block's
    logits instead of saving them. Live at any time: one block's ``(B, chunk, V)`` logits and
    their gradient, never the row's. A row shorter than a multiple of ``chunk`` is padded with
    zero-weight positions. Same value and gradient as the plain loss, up to float32 summation
    order.
    """
    if chunk <= 0:
        raise ConfigError(f"chunked_cross_entropy: chunk must be positive, got {chunk}")
    B, T, D = h_BTD.shape
    n = -(-T // chunk)
    pad = ((0, 0), (0, n * chunk - T))
    weight_BT = jnp.pad(jnp.ones((B, T), jnp.float32), pad)
    # Chunk-major copies, so the scan reads its blocks as xs (a dynamic slice of a closed-over
    # array would transpose to a full-size gradient accumulation per step).
    h_NBCD = jnp.pad(h_BTD, (*pad, (0, 0))).reshape(B, n, chunk, D).swapaxes(0, 1)
    t_NBC = jnp.pad(targets_BT, pad).reshape(B, n, chunk).swapaxes(0, 1)
    w_NBC = weight_BT.reshape(B, n, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def block_sums(h_BCD, t_BC, w_BC):
        logits_BCV = logits_fn(h_BCD).astype(jnp.float32)
        lse_BC = jax.nn.logsumexp(logits_BCV, axis=-1)
        target_BC = jnp.take_along_axis(logits_BCV, t_BC[..., None], axis=-1)[..., 0]
        return jnp.sum((lse_BC - target_BC) * w_BC), jnp.sum(lse_BC**2 * w_BC)

    def body(sums, xs):
        ce, z = block_sums(*xs)
        return (sums[0] + ce, sums[1] + z), None

    zero = jnp.zeros((), jnp.float32)
    (ce_sum, z_sum), _ = jax.lax.scan(body, (zero, zero), (h_NBCD, t_NBC, w_NBC))
    return ce_sum / (B * T), z_sum / (B * T) * z_loss


@dataclasses.dataclass
class LMTask:
    """Next-token prediction on a packed corpus.

    Args:
      build: ``rngs -> model``; the model is called as ``model(tokens, segment_ids=, positions=)``.
      seq_len: training row length T.
      source: corpus for :func:`jaxlab.data.corpus.load_documents` (``"kjv"``, a path, ``hf:...``,
        all byte-level), or ``"shards:DIR"`` for a corpus from :mod:`jaxlab.data.prepare`.
      z_loss: z-loss coefficient (0 disables it).
      loss_chunk: tokens per block of :func:`chunked_cross_entropy` (0: the plain loss over the
        full logits); needs a model with ``hidden`` and ``logits_from_hidden``.
      tokenizer: for shards, the tokenizer they must have been made with (a spec for
        :func:`jaxlab.data.tokenizer.load_tokenizer`; ``None`` accepts the shards' own).

    Attributes (after construction): ``vocab_size`` (the data's), ``corpus`` (the
    :class:`~jaxlab.data.shards.ShardCorpus`, or None for byte-level sources), and for byte-level
    sources ``train_docs``/``val_docs`` and ``train_rows``/``val_rows`` (``{"tokens": ...}`` of
    :func:`~jaxlab.data.text.pack_tokens`).
    """

    build: Callable[[nnx.Rngs], nnx.Module]
    seq_len: int
    source: str = "kjv"
    z_loss: float = 0.0
    tokenizer: str | None = None
    loss_chunk: int = 0

    def __post_init__(self) -> None:
        check(self.z_loss >= 0, f"z_loss must be >= 0, got {self.z_loss}")
        check(self.loss_chunk >= 0, f"loss_chunk must be >= 0, got {self.loss_chunk}")
        directory = shards_dir(self.source)
        self.corpus = None if directory is None else ShardCorpus(directory)
        if self.corpus is None:
            check(self.tokenizer in (None, "", "bytes"), "tokenizer= needs source='shards:DIR'")
            self.vocab_size = VOCAB_SIZE
            self.train_docs = load_documents(self.source, "train")
            self.val_docs = load_documents(self.source, "validation")
            # The tokens alone; each batch derives its segment ids and positions.
            self.train_rows = {"tokens": pack_tokens(self.train_docs, self.seq_len)}
            self.val_rows = {"tokens": pack_tokens(self.val_docs, self.seq_len)}
            return
        if self.tokenizer:
            self.corpus.check_tokenizer_spec(self.tokenizer)
        self.vocab_size = self.corpus.vocab_size
        for split in ("train", "validation"):  # checksums now, before anything compiles
            if self.corpus.num_rows(split, self.seq_len) < 1:
                raise ConfigError(
                    f"the {split} split of {self.corpus.directory} is shorter than one row of "
                    f"{self.seq_len + 1} tokens; use a shorter seq_len or more text"
                )
        self._bytes_per_token = self.corpus.bytes_per_token()
        self._byte_level = self.corpus.tokenizer["kind"] == "bytes"

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        model = self.build(rngs)
        if self.loss_chunk and not all(
            hasattr(model, name) for name in ("hidden", "logits_from_hidden")
        ):
            raise ConfigError(
                f"loss_chunk={self.loss_chunk} needs a model with hidden() and "
                f"logits_from_hidden(); {type(model).__name__} has not: set loss_chunk=0"
            )
        return model

    def _check_vocab(self, logits: jax.Array) -> jax.Array:
        """``logits`` (``(..., V)``), once their last axis is known to cover every token id of the
        data; checked where the loss is traced (shapes only), so before any step runs.

        Raises:
          ConfigError: ``V`` is below the data's vocabulary (the loss would index past the logits).
        """
        vocab = logits.shape[-1]
        if vocab < self.vocab_size:
            what = (
                f"{VOCAB_SIZE} byte values"
                if self.corpus is None
                else f"{self.vocab_size}, tokenizer {self.corpus.tokenizer['name']!r} of "
                f"{self.corpus.directory}"
            )
            raise ConfigError(
                f"the model's output vocabulary ({vocab}) is smaller than the data's "
                f"({what}); set model.vocab_size to at least {self.vocab_size}"
            )
        return logits

    def loss(self, model, batch: Mapping[str, jax.Array], key=None):
        del key  # The baseline LM is deterministic (no dropout).
        chex.assert_rank(batch["inputs"], 2)
        chex.assert_equal_shape([batch["inputs"], batch["targets"], batch["segment_ids"]])
        inputs = dict(segment_ids=batch["segment_ids"], positions=batch["positions"])
        if self.loss_chunk:
            h_BTD = model.hidden(batch["inputs"], **inputs)
            ce, z = chunked_cross_entropy(
                h_BTD, lambda h: self._check_vocab(model.logits_from_hidden(h)), batch["targets"],
                chunk=self.loss_chunk, z_loss=self.z_loss,
            )  # fmt: skip
        else:
            logits_BTV = self._check_vocab(model(batch["inputs"], **inputs))
            ce, z = cross_entropy(logits_BTV, batch["targets"], self.z_loss)
        if self.corpus is None or self._byte_level:
            return ce + z, {"loss": ce, "bits_per_byte": ce / math.log(2), "z_loss": z}
        bits = ce / math.log(2)
        metrics = {"bits_per_token": bits, "bits_per_byte": bits / self._bytes_per_token}
        return ce + z, {"loss": ce, **metrics, "z_loss": z}

    @property
    def bits_metric(self) -> str:
        """The metric a model's bits are compared under: per byte for byte-level data (where the
        two are the same), per token otherwise."""
        byte_level = self.corpus is None or self._byte_level
        return "bits_per_byte" if byte_level else "bits_per_token"

    def unigram_entropy_bits(self) -> float:
        """The validation text's unigram entropy in bits per token (per byte for byte data)."""
        if self.corpus is None:
            return unigram_entropy_bits(self.val_docs)
        return self.corpus.unigram_entropy_bits("validation")

    def train_iterator(self, batch_size: int, seed: int):
        if self.corpus is not None:
            return iter(self.corpus.dataset(self.seq_len, batch_size=batch_size, seed=seed))
        return iter(text_dataset(self.train_rows, batch_size=batch_size, seed=seed))

    def eval_batches(self, batch_size: int, num_batches: int) -> list[dict[str, np.ndarray]]:
        if self.corpus is not None:
            available = self.corpus.num_rows("validation", self.seq_len) // batch_size
            return self.corpus.eval_batches(
                self.seq_len, batch_size=batch_size, num_batches=min(num_batches, max(available, 1))
            )
        available = len(self.val_rows["tokens"]) // batch_size
        return eval_batches(
            self.val_rows, batch_size=batch_size, num_batches=min(num_batches, max(available, 1))
        )

    def units_per_example(self) -> tuple[int, str]:
        return self.seq_len, "tokens"


def fit_vocab(model_cfg: Any, source: str) -> Any:
    """``model_cfg`` with the vocabulary of ``source`` when that is a shard corpus.

    A model config left at the byte vocabulary (256) takes the shards' vocabulary from their index;
    a larger one is kept (a vocabulary padded for speed, e.g. GPT-2's 50257 to 50304); a smaller
    one is a one-line ConfigError. Byte-level sources return ``model_cfg`` unchanged.
    """
    directory = shards_dir(source)
    if directory is None:
        return model_cfg
    corpus = ShardCorpus(directory)
    have, want = model_cfg.vocab_size, corpus.vocab_size
    if have == VOCAB_SIZE and want != VOCAB_SIZE:
        return dataclasses.replace(model_cfg, vocab_size=want)
    if have < want:
        raise ConfigError(
            f"model.vocab_size={have} is smaller than the vocabulary of {directory} ({want}, "
            f"tokenizer {corpus.tokenizer['name']!r}); set model.vocab_size={want} (or leave it "
            f"at {VOCAB_SIZE} to take it from the shards)"
        )
    return model_cfg


def compile_lm_train_step(
    model_cls: Callable[..., nnx.Module],
    model_cfg: Any,
    *,
    batch_size: int,
    mesh_cfg: MeshConfig,
    train_cfg: TrainConfig | None = None,
    z_loss: float = 0.0,
    loss_chunk: int = 0,
) -> dict[str, float]:
    """Compiles the train step of the LM ``model_cls(model_cfg, rngs=...)`` ahead of time.

    The step is the loop's own (:func:`jaxlab.core.step.build_train_program` under ``train_cfg``,
    compiled by :func:`jaxlab.core.aot.compile_train_step`) on a mesh over this process's devices,
    for ``(batch_size, model_cfg.seq_len)`` batches, with the task's ``z_loss`` and
    ``loss_chunk``; nothing is run. Module-level and picklable, so
    :func:`jaxlab.core.aot.run_with_devices` can run it with simulated devices.
    """
    build = lambda rngs: model_cls(model_cfg, rngs=rngs)  # noqa: E731
    task = LMTask(build=build, seq_len=model_cfg.seq_len, z_loss=z_loss, loss_chunk=loss_chunk)
    shape = (batch_size, model_cfg.seq_len)
    batch = {k: (shape, jnp.int32) for k in ("inputs", "targets", "segment_ids", "positions")}
    mesh, rules = make_mesh(mesh_cfg), AxisRules()
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules.as_tuple()):  # as in the loop
        program = build_train_program(
            task, train_cfg or TrainConfig(), mesh, rules, init_key=jax.random.key(0)
        )
    return compile_train_step(program, mesh, rules, batch)
