"""Training WARMPOT and its baselines on a partial-DA task: one compiled program for every method.

The method is the :class:`~jaxlab.methods.warmpot.loss.Knobs` (arrays), not the program, so all
methods, seeds and α/β values of an experiment share one compilation per task shape and optimizer.
A run is ``steps`` updates on batches drawn with replacement per step (source and target
independently, seeded; the source class-balanced by default, as the authors'
``BalancedBatchSampler``: every class equally often in a batch), in chunks of ``eval_every`` steps
under ``lax.scan``; after each chunk the target accuracy on the whole target set (transductive, as
in the authors' code) is recorded. PADA's class weights are the running average of the mean target
softmax, normalised to max 1 (Cao et al., ECCV 2018), carried between steps in the scan.

With ``backbone="frozen"`` (:func:`frozen_features`) the network's feature layers are first trained
source-only with plain cross-entropy and frozen; the run then trains a fresh
:class:`~jaxlab.methods.warmpot.model.Head` on their output. The pre-training depends only on the
task, the seed and the ``pretrain_*`` settings, never on the method, so for a seed every method sees
the same features; an experiment computes them once per (task, seed) and passes them to
:func:`train`.

Why not the shared loop (:func:`jaxlab.core.loop.run_training`): an experiment here is dozens of
short runs (methods × seeds × settings) of a 20k-parameter MLP; the loop's per-run
workdir, checkpoints and per-step host round trips would dominate, while the scan runs a whole chunk
in one call. Nothing needs resuming mid-run: a run is short, and the experiment resumes per run.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.data.digits_da import DATask
from jaxlab.methods.warmpot.config import WarmpotConfig
from jaxlab.methods.warmpot.loss import (
    Knobs,
    batch_loss,
    check_labels,
    mass_schedule,
    pada_class_weights,
)
from jaxlab.methods.warmpot.model import Head, Network

__all__ = ["RunResult", "frozen_features", "inv_schedule", "knobs_of", "make_optimizer", "train"]

MODES = {"plan": (1.0, 0.0, 0.0), "uniform": (0.0, 1.0, 0.0), "class": (0.0, 0.0, 1.0)}


class RunResult(NamedTuple):
    """What one training run measured.

    Attributes:
      accuracy: target accuracy after each chunk of ``eval_every`` steps.
      last: accuracy after the last step; best: the best of ``accuracy`` (needs target labels:
        the paper's protocol, an oracle).
      outlier_share: per chunk, the mean over its steps of the weight on source classes absent
        from the target (``Σ_{y_i ∉ target} w_i`` with ``Σ w = 1``).
      at_cap: per chunk, the mean over its steps of the share of source points whose plan row
        reaches its cap ``1/(β n_s)`` (:func:`~jaxlab.methods.warmpot.loss.capacity_share`).
      variant_share: per chunk, the mean weight on the source points of the shared-class
        subgroup the target does not hold (``DATask.variant``; 0 when the task has none).
      ot_converged: fraction of the steps whose plan met the solver's tolerance.
    """

    accuracy: np.ndarray
    last: float
    best: float
    outlier_share: np.ndarray
    at_cap: np.ndarray
    variant_share: np.ndarray
    ot_converged: float


def knobs_of(cfg: WarmpotConfig) -> tuple[Knobs, float]:
    """The run's :class:`Knobs` and ramp length (0 for full OT: α = 1 from the start)."""
    alpha, beta = cfg.masses
    eta3 = cfg.eta3 if cfg.aligns else 0.0
    f = lambda v: jnp.asarray(v, jnp.float32)
    knobs = Knobs(
        f(alpha), f(beta), f(cfg.epsilon), f(cfg.eta1), f(cfg.eta2), f(eta3), f(cfg.entropy),
        f(MODES[cfg.weights]),
    )  # fmt: skip
    return knobs, (0.0 if cfg.method == "full_ot" else float(cfg.ramp_steps))


def inv_schedule(lr: float, decay: float, steps: int):
    """The authors' ``inv`` schedule ``lr (1 + γ t)^(-0.75)`` with ``γ = decay / steps``.

    Their code (``lr_schedule.inv_lr_scheduler`` with ``gamma=0.001, power=0.75`` over 5,000
    iterations) ends at ``lr · 6^(-0.75)``; ``decay = γ T`` keeps that shape for any run length.
    """
    return lambda t: lr * (1.0 + decay * jnp.asarray(t, jnp.float32) / steps) ** -0.75


@functools.lru_cache(maxsize=32)
def make_optimizer(
    name: str, lr: float, schedule: str, decay: float, steps: int, momentum: float,
    weight_decay: float, head_mult: float, head: tuple[str, ...],
) -> optax.GradientTransformation:  # fmt: skip
    """The run's optimizer; the top-level modules named in ``head`` get ``head_mult`` × the lr.

    ``sgd``: ``g + wd·p`` (torch's ``weight_decay``), then Nesterov momentum (the authors'
    Office-Home optimizer); the same ``wd`` on every parameter, head and body, as the authors'
    ``decay_mult`` 2 on all their param groups (only the lr differs by group); ``adam``: Adam with
    the same schedule and no weight decay (the previous default). Cached, so runs with the same
    settings share one transformation and hence one compiled step.
    """

    def one(mult: float) -> optax.GradientTransformation:
        sched = inv_schedule(lr * mult, decay, steps) if schedule == "inv" else lr * mult
        if name == "adam":
            return optax.adam(sched)
        return optax.chain(
            optax.add_decayed_weights(weight_decay),
            optax.sgd(sched, momentum=momentum or None, nesterov=momentum > 0),
        )

    def labels(params):  # by the top-level module a parameter belongs to
        return jax.tree_util.tree_map_with_path(
            lambda path, _: "head" if getattr(path[0], "key", None) in head else "body", params
        )

    return optax.multi_transform({"head": one(head_mult), "body": one(1.0)}, labels)


def _optimizer(cfg: WarmpotConfig, head: tuple[str, ...]) -> optax.GradientTransformation:
    return make_optimizer(
        cfg.optimizer, cfg.learning_rate, cfg.lr_schedule, cfg.inv_decay, cfg.steps,
        cfg.momentum, cfg.weight_decay, cfg.head_lr_mult, head,
    )  # fmt: skip


def _by_class(ys: np.ndarray, classes: int) -> tuple[jax.Array, jax.Array]:
    """Source indices per class, padded to the largest class, and each class's count."""
    groups = [np.flatnonzero(ys == c) for c in range(classes)]
    width = max(1, max(len(g) for g in groups))
    table = np.zeros((classes, width), np.int32)
    for c, g in enumerate(groups):
        table[c, : len(g)] = g
    return jnp.asarray(table), jnp.asarray([len(g) for g in groups], jnp.int32)


def _source_batch(key, n: int, by_class, counts, batch: int, balanced: bool) -> jax.Array:
    """Source indices of one batch: uniform over points, or class-balanced.

    Balanced, as the authors' ``BalancedBatchSampler``: each class present ``batch // C`` times
    and a random ``batch % C`` of them once more; here each slot's point is drawn uniformly
    within its class (theirs walks through a shuffled class without replacement).
    """
    k_order, k_in = jax.random.split(key)
    if not balanced:
        return jax.random.randint(k_in, (batch,), 0, n)
    # A random order of the classes present (absent ones sorted last), cycled over the slots.
    order = jnp.argsort(jax.random.uniform(k_order, counts.shape) + 2.0 * (counts == 0))
    cls = order[jnp.arange(batch) % jnp.sum(counts > 0)]
    within = jnp.floor(jax.random.uniform(k_in, (batch,)) * counts[cls]).astype(jnp.int32)
    return by_class[cls, jnp.minimum(within, counts[cls] - 1)]


@functools.partial(jax.jit, static_argnames=("graphdef", "tx", "batch", "steps", "balanced"))
def _pretrain(params, opt_state, key, data, *, graphdef, tx, batch, steps, balanced):
    xs, ys, by_class, counts = data

    def step(c, _):
        params, opt_state, key = c
        key, k = jax.random.split(key)
        i = _source_batch(k, xs.shape[0], by_class, counts, batch, balanced)

        def loss_fn(p):
            logits = nnx.merge(graphdef, p)(xs[i])
            return optax.softmax_cross_entropy_with_integer_labels(logits, ys[i]).mean()

        grads = jax.grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, key), None

    (params, _, _), _ = jax.lax.scan(step, (params, opt_state, key), None, length=steps)
    return params


def frozen_features(cfg: WarmpotConfig, task: DATask) -> tuple[np.ndarray, np.ndarray]:
    """Source and target features of a backbone pre-trained source-only, then frozen.

    The backbone is :class:`~jaxlab.methods.warmpot.model.Network`'s feature layers, trained
    with its classifier by ``pretrain_steps`` Adam steps (``pretrain_lr``) of cross-entropy on
    source batches (``cfg.sampler``, ``cfg.batch_size``), seeded by ``cfg.seed``: the part of the
    authors' ImageNet-pretrained ResNet-50 that a 64-pixel task can play. The result depends on
    the task, the seed and those settings only, not on ``cfg.method`` (every method of a seed
    sees the same features). Returns ``(f(xs), f(xt))``.

    The pre-training set is the source domain's plain images: the source without its turned
    subgroup (``task.variant``). The authors' backbone learnt on ImageNet, not on the task, so it
    tells apart sub-populations the task's labels lump together; a backbone trained to call a
    turned 3 a 3 would have learnt away the very difference per-sample weights can use. With no
    subgroup the whole source is used.

    Each feature vector is scaled to the norm ``√F``. The ReLU features of inputs the backbone
    did not learn from (the target domain, the turned subgroup) have small norms, so raw
    distances put both near the origin and near each other: on ``digits_to_mnist`` with the
    subgroup, the turned images' mean distance to their ten nearest target points is below the
    upright shared images' (README). On the sphere the order is the meaningful one (upright
    shared < turned < outlier classes); the scale √F keeps each coordinate's size near 1.
    """
    check_labels(task.ys, task.num_classes, "task.ys")
    model = Network(task.xs.shape[1], cfg.hidden, cfg.features, task.num_classes,
                    rngs=nnx.Rngs(cfg.seed + 20_000))  # fmt: skip
    plain = ~task.source_variant
    graphdef, params = nnx.split(model, nnx.Param)
    tx = _pretrain_tx(cfg.pretrain_lr)
    by_class, counts = _by_class(task.ys[plain], task.num_classes)
    data = (jnp.asarray(task.xs[plain]), jnp.asarray(task.ys[plain]), by_class, counts)
    params = _pretrain(
        params, tx.init(params), jax.random.key(cfg.seed + 30_000), data, graphdef=graphdef,
        tx=tx, batch=cfg.batch_size, steps=cfg.pretrain_steps, balanced=cfg.sampler == "balanced",
    )  # fmt: skip
    net = nnx.merge(graphdef, params)
    # Each feature vector scaled to norm √F (unit scale per coordinate): see the docstring.
    unit = lambda z: (
        z * np.sqrt(z.shape[1]) / jnp.maximum(jnp.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    )
    return (np.asarray(unit(net.features(jnp.asarray(task.xs)))),
            np.asarray(unit(net.features(jnp.asarray(task.xt)))))  # fmt: skip


@functools.lru_cache(maxsize=8)
def _pretrain_tx(lr: float) -> optax.GradientTransformation:
    return optax.adam(lr)


class _Carry(NamedTuple):
    params: Any
    opt_state: Any
    class_w: jax.Array
    key: jax.Array


@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "tx", "batch", "chunk", "tol", "iters", "balanced", "ramp_kind"),
)
def _chunk(
    carry,
    start,
    knobs,
    ramp,
    outlier,
    data,
    *,
    graphdef,
    tx,
    batch,
    chunk,
    tol,
    iters,
    balanced,
    ramp_kind,
    pada_m,
):
    xs, ys, xt, variant, by_class, counts = data

    def step(c: _Carry, t):
        key, ks, kt = jax.random.split(c.key, 3)
        i_s = _source_batch(ks, xs.shape[0], by_class, counts, batch, balanced)
        i_t = jax.random.randint(kt, (batch,), 0, xt.shape[0])
        alpha_t = mass_schedule(t, knobs.alpha, ramp, ramp_kind)
        alpha_t = jnp.minimum(alpha_t, jnp.minimum(1.0, 1.0 / knobs.beta))

        def loss_fn(params):
            model = nnx.merge(graphdef, params)
            return batch_loss(
                model, xs[i_s], ys[i_s], xt[i_t], knobs, alpha_t, c.class_w, tol=tol, max_iter=iters
            )

        (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(c.params)
        updates, opt_state = tx.update(grads, c.opt_state, c.params)
        params = optax.apply_updates(c.params, updates)
        probs = aux["mean_target_probs"]
        class_w = pada_class_weights(c.class_w, probs, pada_m)
        share = jnp.sum(aux["w"] * outlier[ys[i_s]])
        v_share = jnp.sum(aux["w"] * variant[i_s])
        return _Carry(params, opt_state, class_w, key), (
            share,
            aux["at_cap"],
            v_share,
            aux["ot_converged"],
        )

    carry, (share, at_cap, v_share, conv) = jax.lax.scan(step, carry, start + jnp.arange(chunk))
    return carry, share.mean(), at_cap.mean(), v_share.mean(), conv.mean()


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _accuracy(params, xt, yt, *, graphdef):
    model = nnx.merge(graphdef, params)
    return jnp.mean(jnp.argmax(model(xt), axis=-1) == yt)


def train(
    cfg: WarmpotConfig, task: DATask, features: tuple[np.ndarray, np.ndarray] | None = None
) -> RunResult:
    """Trains ``cfg.method`` on ``task`` and returns its target accuracies and weights.

    Args:
      cfg: the run (method, hyperparameters, seed).
      task: source (labelled) and target (labels for evaluation only).
      features: with ``backbone="frozen"``, the :func:`frozen_features` of this task and seed
        when the caller has them already (computed here otherwise).

    Raises:
      ConfigError: a source label outside ``[0, task.num_classes)`` (the jitted steps would
        silently clamp it).
    """
    check_labels(task.ys, task.num_classes, "task.ys")
    rngs = nnx.Rngs(cfg.seed)
    if cfg.backbone == "frozen":
        xs, xt = features if features is not None else frozen_features(cfg, task)
        model = Head(xs.shape[1], cfg.features, task.num_classes, kind=cfg.head, rngs=rngs)
        head = ("f1", "g")  # the authors' bottleneck and classifier: lr_mult 10
    else:
        xs, xt = task.xs, task.xt
        model = Network(xs.shape[1], cfg.hidden, cfg.features, task.num_classes, rngs=rngs)
        head = ("g",)  # the classifier starts fresh; f is the (here untrained) backbone
    graphdef, params = nnx.split(model, nnx.Param)
    tx = _optimizer(cfg, head)
    knobs, ramp = knobs_of(cfg)
    carry = _Carry(
        params, tx.init(params), jnp.ones(task.num_classes), jax.random.key(cfg.seed + 10_000)
    )
    outlier = jnp.asarray([c not in task.target_classes for c in range(task.num_classes)], float)
    by_class, counts = _by_class(task.ys, task.num_classes)
    data = (jnp.asarray(xs), jnp.asarray(task.ys), jnp.asarray(xt),
            jnp.asarray(task.source_variant, jnp.float32), by_class, counts)  # fmt: skip
    xt, yt = jnp.asarray(xt), jnp.asarray(task.yt)
    acc, shares, caps, v_shares, convs = [], [], [], [], []
    for start in range(0, cfg.steps, cfg.eval_every):
        carry, share, at_cap, v_share, conv = _chunk(
            carry, start, knobs, ramp, outlier, data, graphdef=graphdef, tx=tx,
            batch=cfg.batch_size, chunk=cfg.eval_every, tol=cfg.ot_tol, iters=cfg.ot_max_iter,
            balanced=cfg.sampler == "balanced", ramp_kind=cfg.mass_ramp, pada_m=cfg.pada_momentum,
        )  # fmt: skip
        acc.append(float(_accuracy(carry.params, xt, yt, graphdef=graphdef)))
        shares.append(float(share))
        caps.append(float(at_cap))
        v_shares.append(float(v_share))
        convs.append(float(conv))
    acc = np.asarray(acc)
    return RunResult(
        acc, float(acc[-1]), float(acc.max()), np.asarray(shares), np.asarray(caps),
        np.asarray(v_shares), float(np.mean(convs)),
    )  # fmt: skip
