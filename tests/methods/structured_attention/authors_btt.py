"""Kuang et al.'s ``BilinearBTTAttention`` scores in float64 numpy, written from their forward
(``src/model.py``: the reshapes and permutations of their two batched products, their ``(a b)``
key layout), and the correspondence that loads their two weight tensors into jaxlab's BTT maps.

Their tensors, for ``H`` heads at width ``D = c d = a b`` (``(a, b) = (c, d) = factorize(D)``)
and TT rank ``s``: ``W_K`` ``(c, d, H b s)`` (first stage, one ``(d, H b s)`` block per input
block) and ``W_Q`` ``(H b, a, c s)`` (second stage, one ``(a, c s)`` block per head and output
group). The reference never calls jaxlab's BTT or scoring code.
"""

import numpy as np


def layernorm(v, scale):
    """The authors' ``LayerNorm(D, bias=False)``: ``F.layer_norm`` with eps 1e-5."""
    mu, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
    return (v - mu) / np.sqrt(var + 1e-5) * scale


def cap(w, d_in, d_out):
    """Their RMS cap of a block ``d_in -> d_out``: ``W / max(1, RMS(W) / init_scale)`` with
    ``init_scale = sqrt(min(d_in, d_out) / d_in^2)`` and ``1e-8`` inside the root."""
    rms = np.sqrt(np.mean(w**2) + 1e-8)
    return w / max(1.0, rms / (min(d_in, d_out) / d_in**2) ** 0.5)


def btt_keys(x, wk, wq, num_heads, s=1):
    """The key side before the LayerNorm, ``(B, H T, D)`` as theirs (head major, then position):
    ``x.reshape(B T, c, d).permute(1, 0, 2)``, ``bmm`` with ``W_K``, regroup to
    ``(H b, c s, B T)``, ``bmm`` with ``W_Q``, then ``reshape(H, b, a, B, T).permute(3, 0, 4, 2,
    1)``: output feature ``i_a b + j_b``, the group ``j_b`` minor."""
    B, T, D = x.shape
    c, d, hbs = wk.shape
    H = num_heads
    b = hbs // (H * s)
    a = wq.shape[1]
    y = x.reshape(B * T, c, d).transpose(1, 0, 2) @ wk  # (c, BT, H b s)
    y = y.reshape(c, B * T, H * b, s).transpose(0, 3, 1, 2).reshape(c * s, B * T, H * b)
    z = wq @ y.transpose(2, 0, 1)  # (H b, a, B T)
    return z.reshape(H, b, a, B, T).transpose(3, 0, 4, 2, 1).reshape(B, H * T, a * b)


def btt_scores(x, wk, wq, num_heads, ln_scale_HD=None, logit_scale="sqrt", s=1):
    """``(B, H, T, T)`` logits of their ``forward``: ``bmm(x, LN(keys)^T)`` at ``1/sqrt(D)``
    (``"sqrt"``) or ``1/D`` (``"mup"``). ``ln_scale_HD``: one LayerNorm scale per head (theirs
    is one LayerNorm shared by the heads, i.e. equal rows; ``None``: no LayerNorm)."""
    B, T, D = x.shape
    H = num_heads
    k = btt_keys(x, wk, wq, H, s)
    if ln_scale_HD is not None:
        k = layernorm(k.reshape(B, H, T, D), ln_scale_HD[None, :, None]).reshape(B, H * T, D)
    att = x @ k.transpose(0, 2, 1)  # (B, T, H T)
    att = att * (D**-0.5 if logit_scale == "sqrt" else 1.0 / D)
    return att.reshape(B, T, H, T).transpose(0, 2, 1, 3)


def identity_weights(D, num_heads, factorize):
    """Rank-1 cores whose map is the identity in their layout: ``W_K[i_c, i_d, j_b] = [i_d =
    j_b]`` and ``W_Q[j_b, i_a, i_c] = [i_a = i_c]``, the same for every head."""
    a, b = factorize(D)
    c, d = a, b
    wk = np.zeros((c, d, num_heads, b))
    wq = np.zeros((num_heads, b, a, c))
    for h in range(num_heads):
        wk[:, :, h] = np.eye(d, b)[None]
        wq[h] = np.eye(a, c)[None]
    return wk.reshape(c, d, num_heads * b), wq.reshape(num_heads * b, a, c)


def load_into(score, wk, wq):
    """Writes their ``W_K``, ``W_Q`` into a jaxlab ``BilinearBTTScore``'s per-head maps: head
    ``h``'s first core ``(c d, b s)`` is ``W_K[:, :, h b s : (h + 1) b s]`` with the input
    blocks stacked, its second core ``(c s, b a)`` is ``W_Q[h b : (h + 1) b]`` read as
    ``(b, a, c, s) -> (c, s, b, a)``."""
    import jax.numpy as jnp

    H = len(score.maps)
    c, d, b, a, s = score.maps[0].shape
    wk5, wq5 = wk.reshape(c, d, H, b, s), wq.reshape(H, b, a, c, s)
    for h, m in enumerate(score.maps):
        dtype = m.first[...].dtype
        m.first[...] = jnp.asarray(wk5[:, :, h].reshape(c * d, b * s), dtype)
        m.second[...] = jnp.asarray(wq5[h].transpose(2, 3, 0, 1).reshape(c * s, b * a), dtype)
