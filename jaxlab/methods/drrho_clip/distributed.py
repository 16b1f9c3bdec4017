"""The DRRho / GCL / CLIP losses across devices and hosts: local anchors, all-gathered candidates.

Each device holds a slice of b = B / P rows of the global batch. It all-gathers the candidates
(images, texts, and the reference's), scores its own rows as anchors against all B of them with the
positives at columns ``axis_index × b + i`` — the offset FastCLIP and open_clip use
(``labels + num_logits * rank``) — and the per-anchor terms are averaged over the whole batch with
one ``psum``. Gradients flow through ``all_gather`` (its transpose is a reduce-scatter), so every
device gets exactly the gradient of the single-device loss on the concatenated batch: no
hand-written second pass as in the authors' PyTorch code. The memory per device is b × B
similarities instead of B × B. The same code runs over the devices of several processes: the mesh
axis simply spans them (tested with two ``jax.distributed`` processes).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec
from jaxtyping import Array, Float

from jaxlab.methods.drrho_clip import losses as L

__all__ = ["sharded_clip_loss", "sharded_drrho_loss"]


def _local_drrho(img, txt, ref_img, ref_txt, *, axis: str, tau: float, eps: float, batch: int):
    """One device's contribution: its anchors against the gathered global candidates."""
    offset = jax.lax.axis_index(axis) * img.shape[0]
    gather = functools.partial(jax.lax.all_gather, axis_name=axis, tiled=True)
    all_img, all_txt = gather(img), gather(txt)
    all_ref_img = all_ref_txt = None
    if ref_img is not None:
        all_ref_img, all_ref_txt = gather(ref_img), gather(ref_txt)
    kw = dict(tau=tau, eps=eps, offset=offset)
    img_terms = L.anchor_log_terms(img, all_txt, ref_img, all_ref_txt, **kw)
    txt_terms = L.anchor_log_terms(txt, all_img, ref_txt, all_ref_img, **kw)
    return tau * jax.lax.psum(jnp.sum(img_terms + txt_terms), axis) / batch


def sharded_drrho_loss(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BE: Float[Array, "B E"] | None,
    ref_txt_BE: Float[Array, "B E"] | None,
    *,
    mesh: Mesh,
    axis: str = "data",
    tau: float,
    eps: float,
) -> Float[Array, ""]:
    """:func:`~.losses.drrho_loss` with the batch split over mesh axis ``axis`` (shard_map).

    The global arrays may be sharded any way; ``shard_map`` gives each device its rows. Equal to
    the single-device loss on the same global batch (value and gradient).
    """
    row = PartitionSpec(axis, None)
    has_ref = ref_img_BE is not None
    fn = functools.partial(_local_drrho, axis=axis, tau=tau, eps=eps, batch=img_BD.shape[0])
    if has_ref:
        body, args, specs = fn, (img_BD, txt_BD, ref_img_BE, ref_txt_BE), (row,) * 4
    else:
        body = lambda i, t: fn(i, t, None, None)  # noqa: E731
        args, specs = (img_BD, txt_BD), (row, row)
    return jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=PartitionSpec())(*args)


def _local_clip(img, txt, *, axis: str, tau: float, batch: int):
    offset = jax.lax.axis_index(axis) * img.shape[0]
    gather = functools.partial(jax.lax.all_gather, axis_name=axis, tiled=True)
    all_img, all_txt = gather(img), gather(txt)
    pos = offset + jnp.arange(img.shape[0])

    def ce(anchor, cand):
        logits = L._dot(anchor, cand) / tau
        return jax.nn.logsumexp(logits, axis=1) - jnp.take_along_axis(logits, pos[:, None], 1)[:, 0]

    return jax.lax.psum(jnp.sum(ce(img, all_txt) + ce(txt, all_img)), axis) / (2 * batch)


def sharded_clip_loss(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    *,
    mesh: Mesh,
    axis: str = "data",
    tau: float,
) -> Float[Array, ""]:
    """:func:`~.losses.clip_loss` with local anchors against gathered candidates (open_clip's
    ``local_loss=True, gather_with_grad=True``)."""
    row = PartitionSpec(axis, None)
    fn = functools.partial(_local_clip, axis=axis, tau=tau, batch=img_BD.shape[0])
    return jax.shard_map(fn, mesh=mesh, in_specs=(row, row), out_specs=PartitionSpec())(
        img_BD, txt_BD
    )
