"""Training WARMPOT and its baselines on a partial-DA task: one compiled program for every method.

The method is the :class:`~jaxlab.methods.warmpot.loss.Knobs` (arrays), not the program, so all
methods, seeds and α/β values of an experiment share one compilation per task shape. A run is
``steps`` Adam updates on batches drawn with replacement per step (source and target independently,
seeded), in chunks of ``eval_every`` steps under ``lax.scan``; after each chunk the target accuracy
on the whole target set (transductive, as in the authors' code) is recorded. PADA's class weights
are the running average of the mean target softmax, normalised to max 1 (Cao et al., ECCV 2018),
carried between steps in the scan.

Why not the shared loop (:func:`jaxlab.core.loop.run_training`): an experiment here is dozens of
short runs (methods × seeds × directions × an α/β grid) of a 20k-parameter MLP; the loop's per-run
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
from jaxlab.methods.warmpot.loss import Knobs, batch_loss, mass_schedule
from jaxlab.methods.warmpot.model import Network

__all__ = ["RunResult", "knobs_of", "train"]

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
      ot_converged: fraction of the steps whose plan met the solver's tolerance.
    """

    accuracy: np.ndarray
    last: float
    best: float
    outlier_share: np.ndarray
    at_cap: np.ndarray
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


class _Carry(NamedTuple):
    params: Any
    opt_state: Any
    class_w: jax.Array
    key: jax.Array


@functools.partial(jax.jit, static_argnames=("graphdef", "tx", "batch", "chunk", "tol", "iters"))
def _chunk(carry, start, knobs, ramp, outlier, data, *, graphdef, tx, batch, chunk, tol, iters):
    xs, ys, xt = data

    def step(c: _Carry, t):
        key, ks, kt = jax.random.split(c.key, 3)
        i_s = jax.random.randint(ks, (batch,), 0, xs.shape[0])
        i_t = jax.random.randint(kt, (batch,), 0, xt.shape[0])
        alpha_t = mass_schedule(t, knobs.alpha, ramp)
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
        class_w = 0.9 * c.class_w + 0.1 * probs / jnp.max(probs)
        share = jnp.sum(aux["w"] * outlier[ys[i_s]])
        return _Carry(params, opt_state, class_w, key), (share, aux["at_cap"], aux["ot_converged"])

    carry, (share, at_cap, conv) = jax.lax.scan(step, carry, start + jnp.arange(chunk))
    return carry, share.mean(), at_cap.mean(), conv.mean()


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _accuracy(params, xt, yt, *, graphdef):
    model = nnx.merge(graphdef, params)
    return jnp.mean(jnp.argmax(model(xt), axis=-1) == yt)


def train(cfg: WarmpotConfig, task: DATask) -> RunResult:
    """Trains ``cfg.method`` on ``task`` and returns its target accuracies and weights.

    Args:
      cfg: the run (method, hyperparameters, seed).
      task: source (labelled) and target (labels for evaluation only).
    """
    model = Network(task.xs.shape[1], cfg.hidden, cfg.features, task.num_classes,
                    rngs=nnx.Rngs(cfg.seed))  # fmt: skip
    graphdef, params = nnx.split(model, nnx.Param)
    tx = optax.adam(cfg.learning_rate)
    knobs, ramp = knobs_of(cfg)
    carry = _Carry(
        params, tx.init(params), jnp.ones(task.num_classes), jax.random.key(cfg.seed + 10_000)
    )
    outlier = jnp.asarray([c not in task.target_classes for c in range(task.num_classes)], float)
    data = (jnp.asarray(task.xs), jnp.asarray(task.ys), jnp.asarray(task.xt))
    xt, yt = jnp.asarray(task.xt), jnp.asarray(task.yt)
    acc, shares, caps, convs = [], [], [], []
    for start in range(0, cfg.steps, cfg.eval_every):
        carry, share, at_cap, conv = _chunk(
            carry, start, knobs, ramp, outlier, data, graphdef=graphdef, tx=tx,
            batch=cfg.batch_size, chunk=cfg.eval_every, tol=cfg.ot_tol, iters=cfg.ot_max_iter,
        )  # fmt: skip
        acc.append(float(_accuracy(carry.params, xt, yt, graphdef=graphdef)))
        shares.append(float(share))
        caps.append(float(at_cap))
        convs.append(float(conv))
    acc, shares = np.asarray(acc), np.asarray(shares)
    return RunResult(
        acc, float(acc[-1]), float(acc.max()), shares, np.asarray(caps), float(np.mean(convs))
    )
