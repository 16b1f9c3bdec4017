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
from jax.sharding import AbstractMesh, Mesh, PartitionSpec
from jaxtyping import Array, Float, Int

from jaxlab.methods.drrho_clip import losses as L

__all__ = ["sharded_clip_loss", "sharded_drrho_loss", "sharded_drrho_surrogate"]


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
    ref_img_BZ: Float[Array, "B Z"] | None,
    ref_txt_BZ: Float[Array, "B Z"] | None,
    *,
    mesh: Mesh | AbstractMesh | None = None,
    axis: str = "data",
    tau: float,
    eps: float,
) -> Float[Array, ""]:
    """:func:`~.losses.drrho_loss` with the batch split over mesh axis ``axis`` (shard_map).

    The global arrays may be sharded any way; ``shard_map`` gives each device its rows. Equal to
    the single-device loss on the same global batch (value and gradient).
    """
    row = PartitionSpec(axis, None)
    has_ref = ref_img_BZ is not None
    fn = functools.partial(_local_drrho, axis=axis, tau=tau, eps=eps, batch=img_BD.shape[0])
    if has_ref:
        body, args, specs = fn, (img_BD, txt_BD, ref_img_BZ, ref_txt_BZ), (row,) * 4
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
        logits = L.similarities(anchor, cand) / tau
        return jax.nn.logsumexp(logits, axis=1) - jnp.take_along_axis(logits, pos[:, None], 1)[:, 0]

    return jax.lax.psum(jnp.sum(ce(img, all_txt) + ce(txt, all_img)), axis) / (2 * batch)


def sharded_clip_loss(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    *,
    mesh: Mesh | AbstractMesh | None = None,
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


def _local_surrogate(img, txt, ref_img, ref_txt, u_img, u_txt, seen, *, axis, tau, eps, gamma):
    offset = jax.lax.axis_index(axis) * img.shape[0]
    gather = functools.partial(jax.lax.all_gather, axis_name=axis, tiled=True)
    all_img, all_txt = gather(img), gather(txt)
    all_ref_img = all_ref_txt = None
    if ref_img is not None:
        all_ref_img, all_ref_txt = gather(ref_img), gather(ref_txt)
    d_img, neg = L.margins(img, all_txt, ref_img, all_ref_txt, tau=tau, offset=offset)
    d_txt, _ = L.margins(txt, all_img, ref_txt, all_ref_img, tau=tau, offset=offset)
    value_b, u_img, u_txt = L.surrogate_terms(
        d_img, d_txt, neg, u_img, u_txt, seen, eps=eps, gamma=gamma
    )
    total = tau * jax.lax.psum(jnp.sum(value_b), axis) / all_img.shape[0]
    return total, u_img, u_txt


def sharded_drrho_surrogate(
    img_BD: Float[Array, "B D"],
    txt_BD: Float[Array, "B D"],
    ref_img_BZ: Float[Array, "B Z"] | None,
    ref_txt_BZ: Float[Array, "B Z"] | None,
    tables: L.ContrastiveTables,
    ids_B: Int[Array, " B"],
    *,
    mesh: Mesh | AbstractMesh | None = None,
    axis: str = "data",
    tau: float,
    eps: float,
    gamma: float,
) -> tuple[Float[Array, ""], L.ContrastiveTables]:
    """:func:`~.losses.drrho_surrogate` with local anchors against gathered candidates.

    The tables stay replicated: the anchors' old estimates are read at their ids, each device
    updates its own rows, and the new rows (sharded like the batch) are written back, so value,
    gradient and tables equal the single-device ones. ``mesh=None`` uses the mesh in context.
    """
    row = PartitionSpec(axis, None)
    vec = PartitionSpec(axis)
    has_ref = ref_img_BZ is not None
    fn = functools.partial(_local_surrogate, axis=axis, tau=tau, eps=eps, gamma=gamma)
    old = (tables.log_u_img[ids_B], tables.log_u_txt[ids_B], tables.seen[ids_B])
    if has_ref:
        body, args, specs = fn, (img_BD, txt_BD, ref_img_BZ, ref_txt_BZ), (row,) * 4
    else:
        body = lambda i, t, *u: fn(i, t, None, None, *u)  # noqa: E731
        args, specs = (img_BD, txt_BD), (row, row)
    value, u_img, u_txt = jax.shard_map(
        body, mesh=mesh, in_specs=(*specs, vec, vec, vec), out_specs=(PartitionSpec(), vec, vec)
    )(*args, *old)
    return value, L.write_tables(tables, ids_B, u_img, u_txt)
