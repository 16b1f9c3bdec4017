"""SST's and ReLoRA*'s hooks: redraws, re-SVDs, merges and their optimizer-state edits.

Each hook is a pure function of the model's arrays and the optimizer state, jit-able, usable from
any training loop: ``params`` (the trained :class:`nnx.Param` arrays), ``frozen`` (the
:class:`~jaxlab.nn.spectral.Frozen` arrays: a spectral layer's inactive columns, a LoRA layer's
``W₀``), both pytrees with the model's paths (``nnx.split(model, nnx.Param, Frozen)``), and the
optax state of ``params``; they return all three. :func:`sst_hook` and :func:`relora_hook` wrap
them as the shared loop's every-``k``-steps hooks (:class:`jaxlab.core.task.StateHook`) with
randomness ``fold_in(key(seed), step)``, so a resumed run makes the same draws.

SST (Zhao et al., ICML 2025, Algorithm 1). Every ``T₃`` steps each spectral layer redraws its
``r`` active pairs (:func:`~jaxlab.methods.sst.sampling.sample_active` on the current ``s``) and
permutes its columns so that they come first (``M`` is unchanged). Optimizer moments follow their
columns: a pair that stays active keeps its moments, a pair that leaves drops them, a pair that
enters starts from zero; the moments of ``s`` are permuted with it. The per-column step counts of
:func:`~jaxlab.methods.sst.optim.scale_by_column_adam` move with their moments, so an entering pair
restarts its bias correction. The first redraw of every round
(``round_redraws``, default ⌈k/r⌉ redraws) is preceded by a re-SVD, ``U, s, V ← svd(U diag(s)
Vᵀ)`` (Sec. 4.5): it restores orthonormal singular vectors (each trained column drifts off the
others) without changing ``M``; all the layer's moments restart at zero, since its coordinates are
new.

ReLoRA* (Lialin et al. 2024; SST paper Sec. 3.3). Every ``relora_every`` steps each LoRA layer
merges ``(α/r) A B`` into ``W₀``, draws a new ``A``, zeroes ``B`` and all their moments; the
learning rate re-warms linearly over ``relora_warmup`` steps (:func:`jagged_schedule`; SST's
iterations re-warm the same way over ``iteration_warmup`` steps, App. F).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.core.errors import ConfigError
from jaxlab.core.task import StateHook, TrainState
from jaxlab.methods.sst.config import SSTConfig
from jaxlab.methods.sst.moments import by_path, edit_param_state, key_path
from jaxlab.methods.sst.sampling import Sampling, active_permutation, sample_active
from jaxlab.nn.spectral import Frozen, thin_svd

__all__ = ["jagged_schedule", "redraw", "relora_hook", "relora_merge", "sst_hook"]

Arrays = Any  # a pytree of arrays (or NNX variables) keyed by the model's paths
SPECTRAL_PARAMS, SPECTRAL_FROZEN = ("s", "u_active", "v_active"), ("u_frozen", "v_frozen")


def _layers(flat_params: dict, flat_frozen: dict, trained: list, fixed: tuple, kind: str) -> list:
    """Paths of the layers that hold every ``trained`` sub-path in ``params`` (tree order); a
    one-line error when one lacks a ``fixed`` leaf in ``frozen``."""
    found = {}
    for keys in flat_params:
        parent, n = keys[: -len(trained[0])], len(trained[0])
        if keys[-n:] == trained[0] and all(parent + t in flat_params for t in trained):
            found[parent] = None
    for parent in found:
        missing = [name for name in fixed if parent + (name,) not in flat_frozen]
        if missing:
            where = "/".join(map(str, parent))
            raise ConfigError(
                f"the {kind} layer at {where} has no {where}/{missing[0]} in `frozen`: pass the "
                "model's Frozen arrays too (nnx.split(model, nnx.Param, Frozen))"
            )
    return list(found)


def _replace(tree: Arrays, new: dict[tuple, jax.Array]) -> Arrays:
    """``tree`` with the leaves at the paths of ``new`` replaced."""
    return jax.tree_util.tree_map_with_path(lambda path, x: new.get(key_path(path), x), tree)


def redraw(
    params: Arrays,
    frozen: Arrays,
    opt_state: optax.OptState,
    key: jax.Array,
    redraw_index: int | jax.Array,
    *,
    round_redraws: int = 0,
    sampling: str = "s",
) -> tuple[Arrays, Arrays, optax.OptState]:
    """One SST redraw of every spectral layer, a re-SVD first where a round starts.

    Algorithm 1 of Zhao et al. (ICML 2025): each layer's ``r`` active pairs are drawn anew from
    the current ``s`` (Sec. 4.4) and its columns permuted so that they come first; ``M = U
    diag(s) Vᵀ``, and so the model's function, is unchanged (a re-SVD, Sec. 4.5, changes ``M``
    only by rounding). Layer ``i`` (in tree order) draws with ``fold_in(key, i)``.

    Args:
      params: the trained arrays, holding each spectral layer's ``s`` ``(k,)``, ``u_active``
        ``(d_in, r)`` and ``v_active`` ``(d_out, r)`` as siblings (any other leaves pass through).
      frozen: the same layers' ``u_frozen`` ``(d_in, k - r)`` and ``v_frozen`` ``(d_out, k - r)``
        at the same paths.
      opt_state: the optax state of ``params`` (e.g. of
        :func:`~jaxlab.methods.sst.optim.sst_adamw`); every leaf shaped like a layer's array
        (moments, per-column counts) follows its columns as the module docstring says.
      key: the draw's randomness.
      redraw_index: how many redraws came before this one (``step // T₃``; may be traced): a
        round starts, with a re-SVD, where it is a multiple of the round length.
      round_redraws: redraws per round; 0 means ⌈k / r⌉ for each layer.
      sampling: ``"s"`` (p ∝ s, the paper's) or ``"half_uniform"``
        (:func:`~jaxlab.methods.sst.sampling.sampling_probs`). This and ``round_redraws`` are
        Python values: under ``jax.jit`` close over them or name them in ``static_argnames``.

    Returns:
      ``(params, frozen, opt_state)`` of the same structures.

    Raises:
      ConfigError: a bad ``round_redraws`` or ``sampling``, or a layer whose frozen columns are
        not in ``frozen``.
    """
    if round_redraws < 0:
        raise ConfigError(f"round_redraws must be >= 0 (0: ceil(k / rank)), got {round_redraws}")
    options = [m.value for m in Sampling]
    if sampling not in options:
        raise ConfigError(f"sampling={sampling!r} is not one of {options}")
    flat_p, flat_f = by_path(params), by_path(frozen)
    paths = _layers(flat_p, flat_f, [(n,) for n in SPECTRAL_PARAMS], SPECTRAL_FROZEN, "spectral")
    new_p, new_f, moves = {}, {}, {}
    for i, path in enumerate(paths):
        s, ua, va = (flat_p[path + (n,)] for n in SPECTRAL_PARAMS)
        uf, vf = (flat_f[path + (n,)] for n in SPECTRAL_FROZEN)
        k, r = s.shape[0], ua.shape[1]
        f32 = jnp.float32
        factors = (
            jnp.concatenate([ua, uf], axis=1).astype(f32),
            s.astype(f32),
            jnp.concatenate([va, vf], axis=1).astype(f32),
        )
        do_svd = redraw_index % (round_redraws or math.ceil(k / r)) == 0
        u, s_new, v = jax.lax.cond(
            do_svd, lambda f: thin_svd((f[0] * f[1]) @ f[2].T), lambda f: f, factors
        )
        perm = active_permutation(sample_active(jax.random.fold_in(key, i), s_new, r, sampling))
        u, s_new, v = u[:, perm], s_new[perm], v[:, perm]
        arrays = {"s": s_new, "u_active": u[:, :r], "v_active": v[:, :r]}
        arrays.update(u_frozen=u[:, r:], v_frozen=v[:, r:])
        for flat, new in ((flat_p, new_p), (flat_f, new_f)):  # each array back in its own dtype
            names = SPECTRAL_PARAMS if flat is flat_p else SPECTRAL_FROZEN
            new.update({path + (n,): arrays[n].astype(flat[path + (n,)].dtype) for n in names})
        # New active column j was old column perm[j]: keep its moments if it was active already.
        moves[path] = (k, r, perm, (perm[:r] < r) & ~do_svd, jnp.minimum(perm[:r], r - 1), do_svd)

    def move(param_path, m):
        k, r, perm, stay, src, do_svd = moves[param_path[:-1]]
        if param_path[-1] == "s":
            return jnp.where(do_svd, 0.0, m[perm]).astype(m.dtype) if m.shape == (k,) else m
        if m.ndim == 2 and m.shape[1] == r:  # moments (d, r) and per-column counts (1, r)
            return jnp.where(stay[None, :], m[:, src], 0.0).astype(m.dtype)
        return m

    targets = [p + (n,) for p in paths for n in SPECTRAL_PARAMS]
    return (
        _replace(params, new_p),
        _replace(frozen, new_f),
        edit_param_state(opt_state, targets, move),
    )


def relora_merge(
    params: Arrays, frozen: Arrays, opt_state: optax.OptState, key: jax.Array, *, alpha: float
) -> tuple[Arrays, Arrays, optax.OptState]:
    """ReLoRA*'s restart of every LoRA layer (:class:`~jaxlab.methods.sst.lora.LoRA`).

    ``W₀ ← W₀ + (α/r) A B`` (the function is unchanged), a new ``A ~ N(0, 1/d_in)`` drawn with
    ``fold_in(key, i)`` for layer ``i`` in tree order, ``B = 0``, and every optimizer-state leaf
    shaped like ``A`` or ``B`` (their moments) zeroed (Lialin et al. 2024; SST paper Sec. 3.3).

    Args:
      params: the trained arrays, holding each LoRA layer's ``adapter/u`` (A, ``(d_in, r)``) and
        ``adapter/vt`` (B, ``(r, d_out)``).
      frozen: the same layers' ``base`` (W₀, ``(d_in, d_out)``) at the same paths.
      opt_state: the optax state of ``params``.
      key: the new A's randomness.
      alpha: LoRA's α (the layers' scale is α/r, r each layer's rank).

    Returns:
      ``(params, frozen, opt_state)`` of the same structures.
    """
    flat_p, flat_f = by_path(params), by_path(frozen)
    trained = (("adapter", "u"), ("adapter", "vt"))
    paths = _layers(flat_p, flat_f, trained, ("base",), "LoRA")
    new_p, new_f = {}, {}
    for i, path in enumerate(paths):
        u, vt = flat_p[path + trained[0]], flat_p[path + trained[1]]
        base = flat_f[path + ("base",)]
        f32 = jnp.float32
        merged = base.astype(f32) + alpha / u.shape[1] * (u.astype(f32) @ vt.astype(f32))
        new_f[path + ("base",)] = merged.astype(base.dtype)
        fresh = jax.random.normal(jax.random.fold_in(key, i), u.shape) * u.shape[0] ** -0.5
        new_p[path + trained[0]] = fresh.astype(u.dtype)
        new_p[path + trained[1]] = jnp.zeros_like(vt)
    shapes = {p + t: flat_p[p + t].shape for p in paths for t in trained}

    def reset(param_path, m):
        return jnp.zeros_like(m) if m.shape == shapes[param_path] else m

    return (
        _replace(params, new_p),
        _replace(frozen, new_f),
        edit_param_state(opt_state, shapes, reset),
    )


def _on_train_state(ts: TrainState, fn: Callable) -> TrainState:
    """Runs a plain hook ``fn(params, frozen, opt_state)`` on the loop's live NNX objects."""
    params = nnx.as_pure(nnx.state(ts.model, nnx.Param))
    frozen = nnx.as_pure(nnx.state(ts.model, Frozen))
    params, frozen, opt_state = fn(params, frozen, nnx.as_pure(ts.optimizer.opt_state))
    nnx.update(ts.model, params, frozen)
    nnx.update(ts.optimizer.opt_state, nnx.state(opt_state))  # as nnx.Optimizer.update does
    return ts


def sst_hook(cfg: SSTConfig) -> StateHook:
    """The loop's every-``T₃``-steps :func:`redraw` (and per-round re-SVD) for ``cfg``."""

    def fn(ts: TrainState, step: jax.Array) -> TrainState:
        key = jax.random.fold_in(jax.random.key(cfg.seed), step)
        index = step // cfg.resample_every
        kw = dict(round_redraws=cfg.round_redraws, sampling=cfg.sampling)
        return _on_train_state(ts, lambda p, f, o: redraw(p, f, o, key, index, **kw))

    return StateHook(every=cfg.resample_every, fn=fn, name="sst redraw")


def relora_hook(cfg: SSTConfig) -> StateHook:
    """The loop's every-``relora_every``-steps :func:`relora_merge` for ``cfg``."""

    def fn(ts: TrainState, step: jax.Array) -> TrainState:
        key = jax.random.fold_in(jax.random.key(cfg.seed), step)
        return _on_train_state(ts, lambda p, f, o: relora_merge(p, f, o, key, alpha=cfg.alpha))

    return StateHook(every=cfg.relora_every, fn=fn, name="relora merge")


def jagged_schedule(schedule: optax.Schedule, every: int, warmup: int) -> optax.Schedule:
    """``schedule`` times a linear re-warmup over ``warmup`` steps after every ``every`` steps.

    The restart of ReLoRA*'s merges (ReLoRA's jagged schedule) and of SST's iterations (App. F:
    each T₃-step iteration starts with a warm-up). A hook with the same ``every`` runs after
    update ``n·every`` (:class:`~jaxlab.core.task.StateHook`), so the update that follows it,
    optax count ``n·every``, is the first of the warm-up at ``1/warmup`` of the rate. The first
    cycle keeps ``schedule``'s own warmup. It composes with any optax schedule as a multiplier.
    """

    def fn(count):
        since = count % every
        factor = jnp.minimum(1.0, (since + 1) / warmup)
        return schedule(count) * jnp.where(count >= every, factor, 1.0)

    return fn
