"""SST's and ReLoRA*'s state hooks: redraws, re-SVDs, merges and their optimizer-state edits.

They run inside the shared loop's jit every ``every`` steps (:class:`jaxlab.core.task.StateHook`)
and change the live train state; their randomness is ``fold_in(key(seed), step)``, so a resumed run
makes the same draws.

SST (Zhao et al., ICML 2025, Algorithm 1). Every ``T₃`` steps each spectral layer redraws its
``r`` active pairs (:func:`~jaxlab.methods.sst.sampling.sample_active` on the current ``s``) and
permutes its columns so that they come first (``M`` is unchanged). Optimizer moments follow their
columns: a pair that stays active keeps its moments, a pair that leaves drops them, a pair that
enters starts from zero; the moments of ``s`` are permuted with it. The per-column step counts of
:func:`~jaxlab.methods.sst.optim.scale_by_column_adam` move with their moments, so an entering pair
restarts its bias correction. The first redraw of every round
(``round_redraws``, default ⌈k/r⌉ redraws) is preceded by a re-SVD, ``U, s, V ← svd(U diag(s)
Vᵀ)``: it restores orthonormal singular vectors (each trained column drifts off the others) without
changing ``M``; all the layer's moments restart at zero, since its coordinates are new.

ReLoRA* (Lialin et al. 2024; SST paper Sec. 3.3). Every ``relora_every`` steps each LoRA layer
merges ``(α/r) A B`` into ``W₀``, draws a new ``A``, zeroes ``B`` and all their moments; the
learning rate re-warms linearly over ``relora_warmup`` steps (:func:`jagged_schedule`; SST's
iterations re-warm the same way over ``iteration_warmup`` steps, App. F).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

from jaxlab.core.task import StateHook, TrainState
from jaxlab.methods.sst.config import SSTConfig
from jaxlab.methods.sst.convert import linear_layers
from jaxlab.methods.sst.lora import LoRA
from jaxlab.methods.sst.moments import edit_param_state
from jaxlab.methods.sst.sampling import active_permutation, sample_active
from jaxlab.nn.spectral import Spectral, thin_svd

__all__ = ["jagged_schedule", "redraw", "relora_hook", "relora_merge", "round_length", "sst_hook"]


def round_length(layer: Spectral, cfg: SSTConfig) -> int:
    """Redraws per round for ``layer``: ``cfg.round_redraws`` or ⌈k / r⌉."""
    return cfg.round_redraws or math.ceil(layer.k / layer.rank)


def redraw(state: TrainState, key: jax.Array, redraw_index: jax.Array, cfg: SSTConfig):
    """One SST redraw of every spectral layer (a re-SVD first where a round starts)."""
    for i, (path, layer) in enumerate(linear_layers(state.model, Spectral)):
        r = layer.rank
        do_svd = redraw_index % round_length(layer, cfg) == 0
        factors = layer.factors()
        u, s, v = jax.lax.cond(
            do_svd, lambda f: thin_svd((f[0] * f[1]) @ f[2].T), lambda f: f, factors
        )
        mask = sample_active(jax.random.fold_in(key, i), s, r, cfg.sampling)
        perm = active_permutation(mask)
        layer.set_factors(u[:, perm], s[perm], v[:, perm])
        # New active column j was old column perm[j]: keep its moments if it was active already.
        stay = (perm[:r] < r) & ~do_svd
        src = jnp.minimum(perm[:r], r - 1)

        def vectors(m, stay=stay, src=src):
            return jnp.where(stay[None, :], m[:, src], 0.0).astype(m.dtype)

        def values(m, perm=perm, do_svd=do_svd):
            return jnp.where(do_svd, 0.0, m[perm]).astype(m.dtype)

        for name, fn in (("u_active", vectors), ("v_active", vectors), ("s", values)):
            shape = getattr(layer, name).shape
            edit_param_state(state.optimizer, (*path, name), shape, fn)
            if name != "s":  # the per-column step counts (1, r) follow their columns too
                edit_param_state(state.optimizer, (*path, name), (1, shape[1]), fn)
    return state


def sst_hook(cfg: SSTConfig) -> StateHook:
    """The every-``T₃``-steps redraw (and per-round re-SVD) as a loop hook."""

    def fn(state: TrainState, step: jax.Array) -> TrainState:
        key = jax.random.fold_in(jax.random.key(cfg.seed), step)
        return redraw(state, key, step // cfg.resample_every, cfg)

    return StateHook(every=cfg.resample_every, fn=fn, name="sst redraw")


def relora_merge(state: TrainState, key: jax.Array) -> TrainState:
    """ReLoRA*'s restart of every LoRA layer: merge, re-init, reset the adapter's moments."""
    for i, (path, layer) in enumerate(linear_layers(state.model, LoRA)):
        layer.merge(jax.random.fold_in(key, i))
        for name in ("u", "vt"):
            shape = getattr(layer.adapter, name).shape
            edit_param_state(state.optimizer, (*path, "adapter", name), shape, jnp.zeros_like)
    return state


def relora_hook(cfg: SSTConfig) -> StateHook:
    def fn(state: TrainState, step: jax.Array) -> TrainState:
        return relora_merge(state, jax.random.fold_in(jax.random.key(cfg.seed), step))

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
