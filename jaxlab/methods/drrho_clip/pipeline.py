"""The steps both DRRho-CLIP experiments share: data, references, a target, and their evaluation.

:class:`DataConfig` renders the pairs (noisy training pairs, a small clean subset for the weak
reference, held-out test images, the held-out attribute combination) and, apart, the strong
reference's own data (:func:`make_reference_pairs`: ten times the pairs, all clean, rendered from
a seed stream no learner sees); :func:`arm_loss` maps an experiment arm to its objective and
:func:`arm_reference` to the reference that steers it; :func:`train` runs one
:class:`~.task.CLIPTask` through the shared loop in its own workdir (re-running resumes it) and
returns the trained model; :func:`evaluate` gives zero-shot accuracy (prompt ensembles over the 20
classes) on the held-out images and on the held-out combination, and image↔text recall@1 among the
held-out pairs.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping
from typing import get_args

import jax.numpy as jnp
import numpy as np

from jaxlab.core.config import TrainConfig, check
from jaxlab.core.loop import run_training
from jaxlab.data.captions import (
    CaptionPairs,
    make_caption_pairs,
    recall_at_k,
    zero_shot_accuracy,
    zero_shot_prompts,
)
from jaxlab.methods.drrho_clip.model import CLIPConfig, CLIPModel
from jaxlab.methods.drrho_clip.task import (
    CLIPTask,
    LossConfig,
    Objective,
    embed_pairs,
    jest_sizes,
    restore_model,
)

__all__ = [
    "ARMS",
    "DataConfig",
    "Splits",
    "arm_loss",
    "arm_reference",
    "check_recipe",
    "check_super_batches",
    "evaluate",
    "make_reference_pairs",
    "make_splits",
    "run_shares",
    "train",
]

# Arms beyond the objectives: the authors' JEST with CLIP's InfoNCE on the kept pairs (their code
# without --fastclip), the JEST paper's variant (sigmoid scores, 16 chunks, keep 50%; its
# learner trains on a contrastive loss of the batch, here InfoNCE, not the DRRho authors' GCL) as a
# named option, and DRRho steered by the weak reference (the control row).
_EXTRA_ARMS = {
    "jest_sigmoid": {"objective": "jest", "jest_score": "sigmoid", "jest_keep": 0.5,
                     "jest_chunks": 16, "jest_loss": "infonce"},
    "jest_infonce": {"objective": "jest", "jest_loss": "infonce"},  # the authors' JEST, InfoNCE
    "drrho_weak": {"objective": "drrho"},
}  # fmt: skip
ARMS = (*get_args(Objective), *_EXTRA_ARMS)


def arm_loss(loss: LossConfig, arm: str) -> LossConfig:
    """The loss of one experiment arm: ``loss`` with the arm's objective (and JEST variant)."""
    return dataclasses.replace(loss, **_EXTRA_ARMS.get(arm, {"objective": arm}))


def arm_reference(arm: str) -> str:
    """Which reference steers ``arm``: ``"weak"`` for the ``*_weak`` control arms, else
    ``"strong"``."""
    return "weak" if arm.endswith("_weak") else "strong"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Sizes and noise of the rendered pairs (:mod:`jaxlab.data.captions`)."""

    train_pairs: int = 8000
    noise: float = 0.3  # fraction of mismatched training pairs
    reference_pairs: int = 80_000  # the strong reference's clean pairs, its own seed stream
    reference_mention: float = 0.3  # its captions' attribute rate (1.0 measured worse: README)
    weak_reference_pairs: int = 2000  # the weak (control) reference's small clean subset
    mention: float = 0.3  # probability a caption names each attribute (the class: always)
    test_pairs: int = 1000  # held-out images, all attribute combinations but the held-out one
    held_out_pairs: int = 500  # held-out images with the held-out attribute combination
    seed: int = 0

    def __post_init__(self) -> None:
        check(0 <= self.noise < 1, "data.noise must be in [0, 1)")
        check(0 <= self.mention <= 1, "data.mention must be in [0, 1]")
        check(0 <= self.reference_mention <= 1, "data.reference_mention must be in [0, 1]")
        names = ("train_pairs", "reference_pairs", "weak_reference_pairs", "test_pairs")
        for name in (*names, "held_out_pairs"):
            check(getattr(self, name) > 1, f"data.{name} must be at least 2")


def check_recipe(
    data: DataConfig,
    train_cfg: TrainConfig,
    loss: LossConfig,
    methods: tuple[str, ...],
    references: Mapping[str, tuple[TrainConfig, str]],
    train_pairs: int | None = None,
) -> None:
    """Checks an experiment's recipe when its config is built, before anything trains.

    Every constraint a target or a reference will meet is checked here, so that a bad value fails
    before the references have trained (their checkpoints would make the corrected command a
    different run in the same workdir). Every method must be a known arm (:data:`ARMS`); every
    batch holds at least 2 pairs (a pair's negatives are the others of its batch) and fits its
    split: a target's (JEST's super-batch ``batch / jest_keep``) in the ``train_pairs`` noisy pairs
    (default ``data.train_pairs``), each reference's in its own pairs, and all in the test pairs
    that supply the eval batches; and each JEST arm's kept pairs split into its chunks.

    Args:
      data, train_cfg, loss, methods: the experiment's fields (``train``: every target's recipe).
      references: each reference's recipe by its config key, with the ``data`` field holding its
        pairs, e.g. ``{"reference_train": (cfg.reference_train, "reference_pairs")}``.
      train_pairs: the noisy pairs of the smallest training set, when it is not the default.

    Raises:
      ConfigError: one line naming the key and what to change.
    """
    check(len(methods) >= 1, "methods is empty; give at least one of " + ", ".join(ARMS))
    for m in methods:
        check(m in ARMS, f"methods: {m!r} is not one of {', '.join(ARMS)}")
    check(len(set(methods)) == len(methods), f"methods={list(methods)} repeats a method")
    recipes = {"train": (train_cfg, None), **references}
    for key, (recipe, _) in recipes.items():
        check(
            recipe.batch_size >= 2,
            f"{key}.batch_size={recipe.batch_size}: a contrastive batch needs at least 2 pairs "
            "(each pair's negatives are the other pairs of its batch); give 2 or more",
        )
    b = train_cfg.batch_size
    for m in methods:
        arm = arm_loss(loss, m)
        if arm.objective != "jest":
            continue
        kept, chunks = jest_sizes(b, arm.jest_keep)[1], arm.jest_chunks
        own = f"loss.jest_chunks={chunks}" if m == "jest" else "the arm's own setting"
        check(
            kept >= chunks and kept % chunks == 0,
            f"train.batch_size={b}: the {m} arm keeps {kept} pairs per step and samples them in "
            f"{chunks} chunks ({own}), which must divide them; use a multiple of {chunks} for "
            "train.batch_size" + (" or change loss.jest_chunks" if m == "jest" else ""),
        )
    pairs = data.train_pairs if train_pairs is None else train_pairs
    keeps = [arm_loss(loss, m).jest_keep for m in methods if arm_loss(loss, m).objective == "jest"]
    batch = jest_sizes(b, min(keeps))[0] if keeps else b
    check(
        batch <= pairs,
        f"train.batch_size={b} needs {batch} of the {pairs} training pairs per step; lower "
        "train.batch_size",
    )
    for key, (recipe, split) in references.items():
        check(
            recipe.batch_size <= getattr(data, split),
            f"{key}.batch_size={recipe.batch_size} is above data.{split}="
            f"{getattr(data, split)}; lower it",
        )
    for key, (recipe, _) in recipes.items():
        check(
            recipe.batch_size <= data.test_pairs,
            f"{key}.batch_size={recipe.batch_size} is above data.test_pairs={data.test_pairs}, "
            "which supply the eval batches; lower it",
        )


def check_super_batches(
    train_cfg: TrainConfig, loss: LossConfig, methods: tuple[str, ...], shards: int
) -> None:
    """Checks that each JEST arm's super-batch divides over ``shards`` data-parallel devices.

    The launcher checks ``train.batch_size`` against the devices
    (:func:`jaxlab.core.experiment.check_batches`); a JEST step draws ``batch / jest_keep`` pairs,
    which an experiment checks with this before its first run starts.

    Raises:
      ConfigError: naming ``train.batch_size`` and ``loss.jest_keep``.
    """
    for m in methods:
        arm = arm_loss(loss, m)
        if arm.objective != "jest":
            continue
        drawn = jest_sizes(train_cfg.batch_size, arm.jest_keep)[0]
        check(
            drawn % shards == 0,
            f"train.batch_size={train_cfg.batch_size}: the {m} arm draws {drawn} pairs per step "
            f"(keeping {arm.jest_keep:g} of them), which do not divide over the {shards} "
            "data-parallel devices; change train.batch_size or loss.jest_keep",
        )


@dataclasses.dataclass(frozen=True)
class Splits:
    train: CaptionPairs
    weak_reference: CaptionPairs
    test: CaptionPairs
    held_out: CaptionPairs


# The strong reference's seed stream: above every learner stream (seed·4 + 0..3) of seeds < 2^28.
REFERENCE_STREAM = 2**30


def make_reference_pairs(cfg: DataConfig) -> CaptionPairs:
    """The strong reference's data: ``reference_pairs`` clean pairs from a stream of its own (the
    training images' pool, new draws of objects and attributes, no noise), the same for every
    seed, so one reference trained once serves every seed (the paper's fixed, pretrained one)."""
    return make_caption_pairs(
        "train", cfg.reference_pairs, seed=REFERENCE_STREAM, mention=cfg.reference_mention
    )


def make_splits(cfg: DataConfig, train_pairs: int | None = None) -> Splits:
    """Renders the splits; ``train_pairs`` overrides the size of the noisy training set."""
    s, m = cfg.seed * 4, cfg.mention  # distinct streams per split
    return Splits(
        make_caption_pairs(
            "train", train_pairs or cfg.train_pairs, seed=s, noise=cfg.noise, mention=m
        ),
        make_caption_pairs("train", cfg.weak_reference_pairs, seed=s + 1, mention=m),
        make_caption_pairs("test", cfg.test_pairs, seed=s + 2, mention=m),
        make_caption_pairs("test", cfg.held_out_pairs, seed=s + 3, held_out="only", mention=m),
    )


def train(
    model_cfg: CLIPConfig,
    loss_cfg: LossConfig,
    train_cfg: TrainConfig,
    pairs: CaptionPairs,
    eval_pairs: CaptionPairs,
    workdir: pathlib.Path,
    reference: CLIPModel | None = None,
) -> tuple[CLIPModel, dict]:
    """Trains one target (or reference) with the shared loop; returns the model and its summary."""
    task = CLIPTask(model_cfg, loss_cfg, pairs, eval_pairs, reference=reference)
    summary = run_training(task, train_cfg, workdir, verbose=False)
    return restore_model(task, train_cfg, workdir), summary


def evaluate(model: CLIPModel, splits: Splits) -> dict[str, float]:
    """Zero-shot accuracy (test images, held-out combination) and recall@1 (test pairs)."""
    prompts = zero_shot_prompts()
    flat = prompts.reshape(-1, prompts.shape[-1])
    prompt_emb = np.asarray(model.encode_text(jnp.asarray(flat))).reshape(*prompts.shape[:2], -1)
    out = {}
    for name, pairs in (("test", splits.test), ("held_out", splits.held_out)):
        img, txt = embed_pairs(model, pairs.images, pairs.tokens)
        out[f"zero_shot_{name}"] = zero_shot_accuracy(img, prompt_emb, pairs.labels)
        if name == "test":
            recall = recall_at_k(img, txt, k=1)
            out["recall1_image_to_text"] = recall["image_to_text"]
            out["recall1_text_to_image"] = recall["text_to_image"]
    return out


def run_shares(rows: list[dict]) -> dict[str, float]:
    """A run's shares from its logged rows (window means of equal batches, every step).

    ``gate_off``, ``noisy_share`` and ``grad_share_noisy`` are their means over the run;
    ``gate_off_noisy``, the noisy share among the anchors the ε gate switched off, is the ratio
    of the means of ``gate_off_and_noisy`` and ``gate_off`` (0 when the gate never fired), the
    exact share over the run. The mean of a per-step ratio would understate it: the gate fires in
    few steps, and a step without any gated anchor would count as 0.
    """
    out = {}
    for key in ("gate_off", "gate_off_and_noisy", "noisy_share", "grad_share_noisy"):
        values = [r[key] for r in rows if key in r]
        if values:
            out[key] = sum(values) / len(values)
    if "gate_off" in out:
        both = out.pop("gate_off_and_noisy")
        out["gate_off_noisy"] = both / out["gate_off"] if out["gate_off"] else 0.0
    return out
