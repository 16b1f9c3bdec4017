"""DRRho-CLIP and its baselines as one :class:`jaxlab.core.task.Task` for the shared loop.

``objective`` picks what is minimised on the same towers, data and temperature:

* ``"clip"`` — InfoNCE (CLIP); ``"gcl"`` — the global contrastive loss through FastCLIP's
  surrogate with the moving-average tables (γ); ``"drrho"`` — the same with the reference's
  margins subtracted (paper Eq. (9), Sec. 4);
* ``"kd"`` — CLIP plus ``kd_weight`` × distillation from the reference's similarity rows;
  ``"drrho_kd"`` — DRRho plus the same distillation term (the paper's DRRho + KD, Table 3);
* ``"jest"`` — joint example selection (Evans et al. 2024, :mod:`.jest`): each step draws a
  super-batch of ``batch / jest_keep`` pairs, scores learnability by the learner's minus the
  reference's contrastive losses (no gradient), builds the sub-batch of ``batch`` pairs in
  ``jest_chunks`` chunks, each sampled without replacement given the chunks already chosen
  (``jest_sampling="top"``: the top ones), and trains on the kept pairs only. ``jest_score=
  "softmax"`` (default) is the authors' ``jointly_sample_batch_softmax`` (CLIP's softmax loss, the
  reference's logit scale fixed at ``jest_ref_scale`` = 100, their 2 chunks and keep 20%);
  ``jest_score="sigmoid"`` is the sigmoid-loss learnability matrix of the JEST paper (with 16
  chunks and keep 50% it is the named ``jest_sigmoid`` arm of the experiments). ``jest_chunks=1``
  is independent (per-example) selection, an ablation. ``jest_loss`` is what the kept pairs are
  trained with: ``"gcl"`` (default) is what the authors' JEST runs do under ``--fastclip`` (their
  ``train.py`` hands the kept pairs, with their dataset indices, to the same ``SogCLRLoss`` as
  FastCLIP: GCL without the reference, its u tables read and written at the kept pairs' ids);
  ``"infonce"`` is CLIP's loss (their code without ``--fastclip``).

The frozen reference is task state (:meth:`CLIPTask.init_task_state`), checkpointed with the run and
never differentiated: either its embeddings of every training pair, computed once
(``reference_mode="cached"``, the paper's setting: the reference sees the same un-augmented data),
or its parameters (``"online"``: embeddings computed in each step under ``stop_gradient``). The
per-sample tables (log u for image and text anchors, first-visit flags) are task state too.

Metrics: in training ``loss`` is the objective's value — F itself (not the surrogate) for GCL and
DRRho, which also log ``gate_off``, the share of anchors (image and text) that the ε of Eq. (9)
switches off (:func:`.losses.gate_off`), and ``gate_off_and_noisy``, the share of anchors that are
off *and* belong to one of the renderer's mismatched (noisy) pairs (the ratio of the two, over a
run, is the noisy share among the gated anchors); every objective logs
``noisy_share``, the share of noisy pairs among those the step trains on (for JEST: among the kept
pairs, so it measures what the selection filters), and ``grad_share_noisy``, the share of the
objective's per-pair gradient norm that lands on them (:func:`noisy_gradient_share`: how much
each objective's weights steer away from the noisy pairs); in evaluation ``loss`` is the
CLIP loss of the eval batch for every objective (one yardstick) and ``zero_shot_acc`` the zero-shot
accuracy of the batch's images with the class prompts.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import TrainConfig, check
from jaxlab.core.errors import RunError
from jaxlab.core.mesh import AxisRules, make_mesh, state_shardings
from jaxlab.core.optim import default_decay_mask, make_optimizer, make_schedule
from jaxlab.core.step import create_state, merge_state, sharded_shapes
from jaxlab.data.batching import index_batch_dataset
from jaxlab.data.captions import CaptionPairs, zero_shot_prompts
from jaxlab.methods.drrho_clip import distributed as D
from jaxlab.methods.drrho_clip import jest as J
from jaxlab.methods.drrho_clip import losses as L
from jaxlab.methods.drrho_clip.model import CLIPConfig, CLIPModel

__all__ = [
    "CLIPTask",
    "LossConfig",
    "embed_pairs",
    "jest_sizes",
    "noisy_gradient_share",
    "restore_model",
]

Objective = Literal["clip", "gcl", "drrho", "kd", "drrho_kd", "jest"]
NEEDS_REFERENCE = ("drrho", "kd", "drrho_kd", "jest")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """What is minimised (module docstring). ``tau`` is fixed for every objective."""

    objective: Objective = "drrho"
    tau: float = 0.01  # fixed, as the paper (Sec. 5: τ = 0.01 for every method)
    eps: float = 1e-4  # ε of the GCL/DRRho log (paper's ViT-B/16 run: 1e-4)
    gamma: float = 1.0  # moving-average rate of u; 1 = the batch estimate (paper: 1)
    kd_weight: float = 1.0
    ref_tau: float = 0.01  # the reference's temperature in the distillation targets
    jest_score: Literal["softmax", "sigmoid"] = "softmax"  # softmax: the DRRho authors' JEST
    jest_keep: float = 0.2  # fraction of the super-batch JEST keeps (authors: filter_ratio 0.8)
    jest_chunks: int = 2  # chunks the kept sub-batch is sampled in (authors: 2; JEST paper: 16)
    jest_sampling: Literal["softmax", "top"] = "softmax"  # "top": deterministic chunks
    jest_ref_scale: float = 100.0  # the reference's logit scale in softmax scoring (authors: 100)
    jest_bias: float = -10.0  # b of the sigmoid scoring loss (SigLIP's initial bias)
    # The kept pairs' loss: "gcl" = the authors' SogCLRLoss under --fastclip (their JEST runs),
    # "infonce" = CLIP's loss.
    jest_loss: Literal["gcl", "infonce"] = "gcl"
    reference_mode: Literal["cached", "online"] = "cached"

    def __post_init__(self) -> None:
        check(
            self.objective in ("clip", "gcl", "drrho", "kd", "drrho_kd", "jest"),
            f"loss.objective must be one of clip, gcl, drrho, kd, drrho_kd, jest; got "
            f"{self.objective!r}",
        )
        check(self.tau > 0 and self.ref_tau > 0, "loss.tau and loss.ref_tau must be positive")
        check(self.eps >= 0, "loss.eps must be >= 0")
        check(0 < self.gamma <= 1, f"loss.gamma must be in (0, 1], got {self.gamma}")
        check(0 < self.jest_keep <= 1, f"loss.jest_keep must be in (0, 1], got {self.jest_keep}")
        check(self.jest_chunks >= 1, f"loss.jest_chunks must be >= 1, got {self.jest_chunks}")
        check(
            self.jest_score in ("softmax", "sigmoid"),
            f"loss.jest_score must be 'softmax' or 'sigmoid', got {self.jest_score!r}",
        )
        check(self.jest_ref_scale > 0, "loss.jest_ref_scale must be positive")
        check(
            self.jest_loss in ("gcl", "infonce"),
            f"loss.jest_loss must be 'gcl' or 'infonce', got {self.jest_loss!r}",
        )
        check(
            self.jest_sampling in ("softmax", "top"),
            f"loss.jest_sampling must be 'softmax' or 'top', got {self.jest_sampling!r}",
        )
        check(
            self.reference_mode in ("cached", "online"),
            "loss.reference_mode must be 'cached' or 'online'",
        )


def _kept(super_batch: int, keep: float) -> int:
    return round(super_batch * keep)


def jest_sizes(batch_size: int, keep: float) -> tuple[int, int]:
    """``(super_batch, kept)``: the pairs a JEST step draws for a ``batch_size`` recipe
    (``batch_size / keep``, rounded) and the pairs it keeps and trains on (``keep`` of them,
    rounded: ``batch_size`` but for rounding)."""
    super_batch = round(batch_size / keep)
    return super_batch, _kept(super_batch, keep)


def _data_devices() -> int:
    """Size of the ``data`` axis of the mesh in context while tracing (1 without a mesh)."""
    mesh = jax.sharding.get_abstract_mesh()
    return 1 if mesh.empty or "data" not in mesh.axis_names else mesh.shape["data"]


def _as_float(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float32) / np.float32(255.0)


@functools.partial(jax.jit, static_argnums=0)
def _embed(graphdef, state, images, tokens):
    return nnx.merge(graphdef, state)(images, tokens)


def embed_pairs(
    model: CLIPModel, images: np.ndarray, tokens: np.ndarray, batch_size: int = 500
) -> tuple[np.ndarray, np.ndarray]:
    """Image and text embeddings of uint8 images and tokens, in batches (one compiled function
    per model structure and batch shape, reused across calls)."""
    graphdef, state = nnx.split(model)
    outs = [
        _embed(graphdef, state, _as_float(images[i : i + batch_size]), tokens[i : i + batch_size])
        for i in range(0, len(images), batch_size)
    ]
    return tuple(np.concatenate([np.asarray(o[k]) for o in outs]) for k in (0, 1))


@dataclasses.dataclass
class CLIPTask:
    """Contrastive image–text training on rendered caption pairs (see the module docstring).

    Args:
      model: the towers' shapes; ``loss``: the objective.
      train, eval: caption pairs (``eval`` supplies the loop's eval batches).
      reference: the frozen reference model (same interface), needed by NEEDS_REFERENCE.
    """

    model: CLIPConfig
    loss_cfg: LossConfig
    train: CaptionPairs
    eval: CaptionPairs
    reference: CLIPModel | None = None

    def __post_init__(self) -> None:
        check(
            self.loss_cfg.objective not in NEEDS_REFERENCE or self.reference is not None,
            f"loss.objective={self.loss_cfg.objective!r} needs a reference model",
        )
        if self.reference is not None:
            self._ref_def, ref_state = nnx.split(self.reference)
            self._ref_leaves, self._ref_tree = jax.tree.flatten(ref_state)
            if self.loss_cfg.reference_mode == "cached":
                # Computed once, eagerly: init_task_state runs under jit, where it is a constant.
                self._ref_cache = embed_pairs(self.reference, self.train.images, self.train.tokens)

    # ------------------------------------------------------------------ the Task protocol

    def build_model(self, rngs: nnx.Rngs) -> CLIPModel:
        return CLIPModel(self.model, rngs=rngs)

    def init_task_state(self, key: jax.Array) -> dict[str, Any]:
        del key
        # The zero-shot prompts ride in the state: as a traced input rather than a constant of
        # the eval step, XLA does not spend its compile time constant-folding the prompt tower.
        state: dict[str, Any] = {
            "tables": L.init_tables(len(self.train.images)),
            "prompts": jnp.asarray(zero_shot_prompts()),
        }
        if self.reference is not None:
            if self.loss_cfg.reference_mode == "cached":
                state["ref_img"], state["ref_txt"] = map(jnp.asarray, self._ref_cache)
            else:
                state["ref_params"] = [jnp.asarray(x) for x in self._ref_leaves]
        return state

    def _reference_embeddings(self, batch, task_state):
        if "ref_img" in task_state:
            ids = batch["index"]
            return task_state["ref_img"][ids], task_state["ref_txt"][ids]
        ref = nnx.merge(self._ref_def, jax.tree.unflatten(self._ref_tree, task_state["ref_params"]))
        out = ref(batch["image"], batch["tokens"])
        return jax.lax.stop_gradient(out[0]), jax.lax.stop_gradient(out[1])

    def loss(self, model: CLIPModel, batch: Mapping[str, jax.Array], key, task_state):
        c = self.loss_cfg
        if key is None:  # evaluation: one yardstick for every objective
            img, txt = model(batch["image"], batch["tokens"])
            prompts = task_state["prompts"]
            prompt_LPD = model.encode_text(prompts.reshape(-1, prompts.shape[-1]))
            cls_LD = prompt_LPD.reshape(*prompts.shape[:2], -1).mean(1)
            cls_LD = cls_LD / jnp.linalg.norm(cls_LD, axis=1, keepdims=True)  # as in captions.py
            pred = jnp.argmax(img @ cls_LD.T, axis=1)
            metrics = {
                "loss": L.clip_loss(img, txt, tau=c.tau),
                "zero_shot_acc": jnp.mean(pred == batch["label"]),
            }
            return metrics["loss"], metrics, task_state
        if c.objective == "jest":
            batch = self._jest_select(model, batch, key, task_state)
        img, txt = model(batch["image"], batch["tokens"])
        ref = self._reference_embeddings(batch, task_state) if self.reference is not None else None

        def head(img, txt):
            return self._objective(img, txt, ref, batch, task_state["tables"])

        # One pass of the head gives the objective and its pullback to the embeddings, for the
        # share of the embedding-gradient norm that lands on noisy pairs (a metric: no gradient
        # flows through it), beside the share of noisy pairs the step trains on (JEST: kept ones).
        objective, pullback, (metrics, tables) = jax.vjp(head, img, txt, has_aux=True)
        grads = jax.lax.stop_gradient(pullback(jnp.ones_like(objective)))
        noisy_B = ~batch["matched"]
        metrics["noisy_share"] = jnp.mean(noisy_B)
        metrics["grad_share_noisy"] = noisy_gradient_share(img, txt, *grads, noisy_B)
        metrics["clip_loss"] = L.clip_loss(
            jax.lax.stop_gradient(img), jax.lax.stop_gradient(txt), tau=c.tau
        )
        return objective, metrics, {**task_state, "tables": tables}

    def _objective(self, img, txt, ref, batch, tables):
        """The objective on the batch's embeddings, its metrics and the updated u tables."""
        c = self.loss_cfg
        metrics: dict[str, jax.Array] = {}
        # Over >1 data devices: local anchors against all-gathered candidates (distributed.py),
        # which equals the single-device loss on the global batch (tested on 8 devices).
        sharded = _data_devices() > 1
        # The contrastive loss under each objective; JEST's kept pairs get GCL or InfoNCE.
        kept_loss = "gcl" if c.jest_loss == "gcl" else "clip"
        contrastive = {"kd": "clip", "drrho_kd": "drrho", "jest": kept_loss}.get(
            c.objective, c.objective
        )
        if contrastive == "clip":
            clip = D.sharded_clip_loss if sharded else L.clip_loss
            objective = clip(img, txt, tau=c.tau)
            metrics["loss"] = objective
        else:
            # batch["index"] holds the dataset ids of the pairs trained on (JEST: the kept ones),
            # so the u tables are read and written at those ids only, as the authors' code does.
            r_img, r_txt = ref if contrastive == "drrho" else (None, None)
            surrogate = D.sharded_drrho_surrogate if sharded else L.drrho_surrogate
            objective, tables = surrogate(
                img, txt, r_img, r_txt, tables, batch["index"], tau=c.tau, eps=c.eps, gamma=c.gamma
            )
            off = L.gate_off(img, txt, r_img, r_txt, tau=c.tau, eps=c.eps)
            noisy = jnp.broadcast_to(~batch["matched"], off.shape)
            metrics["gate_off"] = jnp.mean(off)
            # A share of all anchors, not of the gated ones: the gate fires on a few anchors in
            # a few steps, and a per-step ratio (0 in a step without any) averaged over steps
            # would understate the noisy share; the ratio of the two means over a run is exact.
            metrics["gate_off_and_noisy"] = jnp.mean(off & noisy)
            value = D.sharded_drrho_loss if sharded else L.drrho_loss
            metrics["loss"] = value(
                jax.lax.stop_gradient(img),
                jax.lax.stop_gradient(txt),
                r_img,
                r_txt,
                tau=c.tau,
                eps=c.eps,
            )
        if c.objective in ("kd", "drrho_kd"):
            kd = L.distill_loss(img, txt, *ref, tau=c.tau, ref_tau=c.ref_tau)
            objective = objective + c.kd_weight * kd
            metrics["distill"] = kd
            metrics["loss"] = metrics["loss"] + c.kd_weight * kd
        return objective, (metrics, tables)

    def _jest_select(self, model, batch, key, task_state):
        """The sub-batch JEST keeps from the super-batch ``batch`` (:mod:`.jest`)."""
        c = self.loss_cfg
        n_keep = _kept(batch["index"].shape[0], c.jest_keep)
        img, txt = model(batch["image"], batch["tokens"])
        ref_img, ref_txt = self._reference_embeddings(batch, task_state)
        key = jax.random.fold_in(key, 1) if c.jest_sampling == "softmax" else None
        if c.jest_score == "softmax":
            chosen = J.softmax_joint_select(
                img, txt, ref_img, ref_txt, n_keep, n_chunks=c.jest_chunks, scale=1 / c.tau,
                ref_scale=c.jest_ref_scale, key=key,
            )  # fmt: skip
        else:
            scores = J.learnability_matrix(img, txt, ref_img, ref_txt, tau=c.tau, bias=c.jest_bias)
            chosen = J.joint_select(scores, n_keep, n_chunks=c.jest_chunks, key=key)
        return {name: x[chosen] for name, x in batch.items()}

    def _dataset(self, pairs: CaptionPairs, batch_size: int, seed: int, shuffle: bool):
        images, tokens, labels, matched = pairs.images, pairs.tokens, pairs.labels, pairs.matched

        def gather(idx):
            return {
                "image": _as_float(images[idx]),
                "tokens": tokens[idx],
                "label": labels[idx],
                "index": idx.astype(np.int32),
                "matched": matched[idx],
            }

        return index_batch_dataset(
            len(images), gather, batch_size=batch_size, seed=seed, shuffle=shuffle
        )

    def train_iterator(self, batch_size: int, seed: int):
        if self.loss_cfg.objective == "jest":  # a super-batch; the loss keeps batch_size rows
            batch_size = jest_sizes(batch_size, self.loss_cfg.jest_keep)[0]
        return iter(self._dataset(self.train, batch_size, seed, shuffle=True))

    def eval_batches(self, batch_size: int, num_batches: int) -> list[dict[str, np.ndarray]]:
        it = iter(self._dataset(self.eval, batch_size, 0, shuffle=False))
        return [next(it) for _ in range(min(num_batches, len(self.eval.images) // batch_size))]

    def units_per_example(self) -> tuple[int, str]:
        return 1, "pairs"


def noisy_gradient_share(
    img_BD: jax.Array,
    txt_BD: jax.Array,
    g_img_BD: jax.Array,
    g_txt_BD: jax.Array,
    noisy_B: jax.Array,
) -> jax.Array:
    """Share of the per-pair gradient norm that falls on noisy pairs.

    Pair i's weight is ‖P_i g_img_i‖ + ‖P_i' g_txt_i‖, the norms of the objective's gradients with
    respect to its unit image and text embeddings projected on their tangent planes (the radial
    part is what the L2 normalisation removes); the share is the noisy pairs' sum over the total
    (0 for a zero gradient). Uniform weights give the batch's noisy fraction.
    """

    def tangent_norm(e_BD, g_BD):
        g_BD = g_BD - jnp.sum(g_BD * e_BD, axis=1, keepdims=True) * e_BD
        return jnp.linalg.norm(g_BD, axis=1)

    w_B = tangent_norm(img_BD, g_img_BD) + tangent_norm(txt_BD, g_txt_BD)
    return jnp.sum(jnp.where(noisy_B, w_B, 0.0)) / jnp.maximum(jnp.sum(w_B), 1e-30)


def restore_model(task: CLIPTask, cfg: TrainConfig, workdir: str | pathlib.Path) -> CLIPModel:
    """The trained model of a finished :func:`jaxlab.core.loop.run_training` run in ``workdir``.

    Rebuilds the loop's abstract train state (its default AdamW, the task state) and restores the
    newest checkpoint, so a trained reference can be handed to the next task.
    """
    tx = make_optimizer(cfg, default_decay_mask, schedule=make_schedule(cfg, cfg.steps))
    key = jax.random.split(jax.random.key(cfg.seed))[0]  # the loop's init key
    graphdef, abstract = jax.eval_shape(functools.partial(create_state, task, tx), key)
    shardings = state_shardings(abstract, make_mesh(), AxisRules())
    abstract = sharded_shapes(abstract, shardings)
    ckpt = Checkpointer(pathlib.Path(workdir) / "checkpoints")
    try:
        restored = ckpt.restore(abstract, task.train_iterator(cfg.batch_size, cfg.seed))
    finally:
        ckpt.close()
    if restored is None:
        raise RunError(f"no checkpoint in {workdir}: train the model there first")
    return merge_state(graphdef, restored.state).model
