"""The xLSTM 7B language model (Beck et al., ICML 2025) as Flax NNX modules.

Architecture (paper Sec. 3, Fig. 1; ``xlstm_large``): a token embedding, ``num_layers`` blocks

    x <- x + mLSTMLayer(RMSNorm(x))
    x <- x + SwiGLU(RMSNorm(x))

a final RMSNorm, an untied unembedding and logits soft-capped at 30 (``a * tanh(x / a)``). The
mLSTM layer (paper Sec. 3.1): q, k, v projections of the normed input x (through the config's
linear factory, so structured kinds apply), per-head scalar input and forget gates ``W x + b``
soft-capped at 15 (input-gate bias -10, forget-gate biases linspace(3, 6) over heads), the mLSTM
cell (:func:`jaxlab.methods.xlstm.mlstm`), a per-head LayerNorm of the cell output (weight, no
bias), a per-channel output gate ``sigmoid(W_o x)`` and the out projection. Gates, norms, logits
and the recurrent state are float32 when ``cfg.dtype`` is float32 or bfloat16, and float64 when it
is float64 (``jnp.promote_types(dtype, float32)``; the float64 reference tests run that way).

Packed rows. A row starts from the zero state ``(C, n, m) = (0, 0, 0)``, with no reset, as the
authors' model does. At the first token of every later document in a packed row the forget gate
is closed (``log f = -1e30``), which zeroes the carried ``C`` and ``n`` exactly, so a document's
outputs do not depend on what precedes it in the row. Such a document's stabiliser restarts at
``m = i`` rather than a fresh start's ``max(log f, i)``; the two give the same ``h`` when the
cell's ``eps`` is 0, and differ where ``eps`` enters (in stabilised units) otherwise.

Block kinds. Every block of the 7B is an :class:`mLSTMBlock`; the blocks a config lists in
``slstm_blocks`` are :class:`sLSTMBlock` instead (the model builder picks each block's class).

Scanned blocks. With ``cfg.scan_blocks`` the (mLSTM-only) blocks are one :class:`mLSTMBlock` whose
parameters carry a leading ``layers`` axis, run by a ``lax.scan`` (the residual stream is the
carry; under ``remat`` each step is checkpointed, so only the blocks' inputs are saved): one block
compiled instead of ``num_layers``, and one block's FSDP-gathered weights live at a time. With
``cfg.remat_group`` = g > 1 the training forward is a scan over groups of g blocks, each group
checkpointed too: the backward keeps ``num_layers / g`` group inputs plus one group's g block
inputs instead of every block's input, for one more forward of every block.
:func:`stack_blocks` copies an unscanned model's parameters into a scanned one.

Generation. :meth:`xLSTM.init_cache` gives an :class:`XLSTMCache`: the per-block recurrent states
(stacked on the ``layers`` axis with scanned blocks, and then the scan's xs), whose size does not
depend on the context; :meth:`xLSTM.extend` runs new tokens from a cache (the chunkwise form for a
prompt, one :func:`~jaxlab.methods.xlstm.mlstm_step` per decoded token). Parameters carry logical
axis names (``vocab``, ``embed``, ``heads``, ``mlp``) for :mod:`jaxlab.core.mesh`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import constrain
from jaxlab.lm.model import LanguageModel
from jaxlab.methods.xlstm.cell import NEG, MLSTMState, mlstm, mlstm_step, zero_state
from jaxlab.methods.xlstm.config import xLSTMConfig
from jaxlab.methods.xlstm.norm import MultiHeadNorm
from jaxlab.methods.xlstm.slstm import SLSTMState, sLSTMLayer, zero_slstm_state
from jaxlab.nn.init import EMBEDDING_STD, unembedding_std, weight_std
from jaxlab.nn.layers import check_token_ids, param_init, unembedding

__all__ = [
    "InitStds",
    "XLSTMCache",
    "init_stds",
    "mLSTMBlock",
    "sLSTMBlock",
    "soft_cap",
    "stack_blocks",
    "xLSTM",
]

F32 = jnp.float32


def _acc(dtype) -> jnp.dtype:
    """The dtype gates, norms and the state are computed in: float32, or float64 for float64."""
    return jnp.promote_types(dtype, F32)


class XLSTMCache(NamedTuple):
    """The xLSTM's generation cache: the recurrent states after the tokens seen, and their count.

    ``states`` holds one :class:`~jaxlab.methods.xlstm.MLSTMState` (or
    :class:`~jaxlab.methods.xlstm.slstm.SLSTMState` for an sLSTM block) per block, or with
    ``scan_blocks`` one state whose arrays are stacked on a leading ``layers`` axis (the scan's
    xs). ``pos`` (int32 scalar) is the number of tokens the states have seen. Its size does not
    depend on the context.
    """

    states: tuple[MLSTMState | SLSTMState, ...] | MLSTMState
    pos: Int[Array, ""]


def soft_cap(x: Array, cap: float) -> Array:
    """``cap * tanh(x / cap)`` (paper Sec. 3.2; Gemma 2's logit capping); ``cap = 0`` disables."""
    return cap * jnp.tanh(x / cap) if cap else x


class InitStds(NamedTuple):
    """Standard deviations of the xLSTM's matrices under ``cfg.init`` (:func:`init_stds`)."""

    embed: float
    unembed: float
    proj: float  # q, k, v and the SwiGLU's gate and up maps
    gates: float  # the input- and forget-gate kernels
    ogate: float
    mlstm_out: float  # the out projection, last map of the mLSTM branch
    ffn_down: float  # the SwiGLU's down map, last map of the FFN branch


def init_stds(cfg: xLSTMConfig) -> InitStds:
    """The init of every matrix: the shared rule of :mod:`jaxlab.nn.init` for ``gpt2`` and
    ``fan_in``; for ``authors`` the xlstm-jax 7B recipe (config docstring): small init
    ``sqrt(2 / (5 D))`` for the embedding, the unembedding and the maps into the blocks, Wang init
    ``2 / (L sqrt(D))`` for the two maps that end a residual branch, zero gate kernels."""
    D, L = cfg.d_model, cfg.num_layers
    if cfg.init == "authors":
        small, wang = (2 / (5 * D)) ** 0.5, 2 / (L * D**0.5)
        return InitStds(small, small, small, 0.0, 0.0, wang, wang)
    std_in = weight_std(cfg.init, D)
    return InitStds(
        embed=EMBEDDING_STD,
        unembed=unembedding_std(cfg.init),
        proj=std_in,
        gates=std_in,
        ogate=std_in,
        mlstm_out=weight_std(cfg.init, cfg.v_dim, residual_layers=L),
        ffn_down=weight_std(cfg.init, cfg.ff_dim, residual_layers=L),
    )


def _rmsnorm(dim: int, cfg: xLSTMConfig, rngs: nnx.Rngs) -> nnx.RMSNorm:
    return nnx.RMSNorm(
        dim, epsilon=cfg.norm_eps, dtype=_acc(cfg.dtype), param_dtype=jnp.dtype(cfg.param_dtype),
        rngs=rngs,
    )  # fmt: skip


class HeadGates(nnx.Module):
    """Per-head scalar gate pre-activations ``x W + b`` (D -> H), soft-capped; parameters and
    product in float32 (float64 for a float64 model)."""

    def __init__(self, d, heads, bias: np.ndarray, std: float, cap: float, param_dtype, rngs):
        dtype = _acc(param_dtype)
        init = param_init(nnx.initializers.normal(std), ("embed", None))
        self.kernel = nnx.Param(init(rngs.params(), (d, heads), dtype))
        self.bias = nnx.Param(jnp.asarray(bias, dtype))
        self.cap = cap

    def __call__(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T H"]:
        acc = _acc(x_BTD.dtype)
        pre_BTH = x_BTD.astype(acc) @ self.kernel[...].astype(acc) + self.bias[...].astype(acc)
        return soft_cap(pre_BTH, self.cap)


class mLSTMLayer(nnx.Module):  # noqa: N801
    """q, k, v, gates, the mLSTM cell, per-head norm, output gate, out projection (Sec. 3.1)."""

    def __init__(self, cfg: xLSTMConfig, *, rngs: nnx.Rngs):
        D, H, qk, v = cfg.d_model, cfg.num_heads, cfg.qk_dim, cfg.v_dim
        linear, std = cfg.linear_factory(), init_stds(cfg)
        self.q = linear(D, qk, std=std.proj, axes=("embed", "heads"), rngs=rngs)
        self.k = linear(D, qk, std=std.proj, axes=("embed", "heads"), rngs=rngs)
        self.v = linear(D, v, std=std.proj, axes=("embed", "heads"), rngs=rngs)
        self.ogate = linear(D, v, std=std.ogate, axes=("embed", "heads"), rngs=rngs)
        self.out = linear(v, D, std=std.mlstm_out, axes=("heads", "embed"), rngs=rngs)
        cap, pd, i_bias = cfg.gate_soft_cap, cfg.param_dtype, np.full(H, cfg.igate_bias)
        self.igate = HeadGates(D, H, i_bias, std.gates, cap, pd, rngs)
        f_bias = np.linspace(*cfg.fgate_bias_range, H)
        self.fgate = HeadGates(D, H, f_bias, std.gates, cap, pd, rngs)
        self.norm = MultiHeadNorm(H, cfg.v_head_dim, cfg.norm_eps, cfg.param_dtype, rngs)
        self.heads, self.dk, self.dv = H, cfg.qk_head_dim, cfg.v_head_dim
        self.form, self.chunk_size, self.eps = cfg.cell_form, cfg.chunk_size, cfg.cell_eps

    def __call__(
        self,
        x_BTD: Float[Array, "B T D"],
        reset_BT: Array,
        state: MLSTMState | None = None,
    ) -> tuple[Float[Array, "B T D"], MLSTMState]:
        B, T, _ = x_BTD.shape

        def heads(y, d):  # (B, T, H*d) -> (B, T, H, d), the cell's layout
            return y.reshape(B, T, self.heads, d)

        q, k = heads(self.q(x_BTD), self.dk), heads(self.k(x_BTD), self.dk)
        v = heads(self.v(x_BTD), self.dv)
        i_BTH = self.igate(x_BTD)
        # A closed forget gate at a document start zeroes the carried state (module docstring).
        f_BTH = jnp.where(reset_BT[:, :, None], NEG, self.fgate(x_BTD))
        if T == 1 and state is not None:  # decode: one recurrent step
            h, state = mlstm_step(state, q[:, 0], k[:, 0], v[:, 0], i_BTH[:, 0], f_BTH[:, 0],
                                  eps=self.eps)  # fmt: skip
            h_BTHE = h[:, None]
        else:
            h_BTHE, state = mlstm(
                q, k, v, i_BTH, f_BTH, form=self.form, chunk_size=self.chunk_size,
                initial_state=state, return_state=True, eps=self.eps,
            )  # fmt: skip
        h_BTF = self.norm(h_BTHE)
        o_BTF = jax.nn.sigmoid(self.ogate(x_BTD).astype(h_BTF.dtype))
        return self.out((o_BTF * h_BTF).astype(x_BTD.dtype)), state


class SwiGLU(nnx.Module):
    """``down(silu(gate(x)) * up(x))`` (Shazeer 2020), all three maps from the linear factory.

    With ``cfg.ffn_chunk`` > 0 and a longer input, the map runs over blocks of that many tokens in
    a ``lax.scan``, each block under ``jax.checkpoint``: the ``(B, T, d_ff)`` hidden activations
    never exist at once, in the forward or in the backward (which recomputes one block's). The map
    is per token, so the result is the plain one's (``ffn_chunk=0``, the reference).
    """

    def __init__(self, cfg: xLSTMConfig, *, rngs: nnx.Rngs):
        D, ff, linear, std = cfg.d_model, cfg.ff_dim, cfg.linear_factory(), init_stds(cfg)
        self.gate = linear(D, ff, std=std.proj, axes=("embed", "mlp"), rngs=rngs)
        self.up = linear(D, ff, std=std.proj, axes=("embed", "mlp"), rngs=rngs)
        self.down = linear(ff, D, std=std.ffn_down, axes=("mlp", "embed"), rngs=rngs)
        self.chunk = cfg.ffn_chunk

    def _plain(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T D"]:
        return self.down(self.gate(x_BTD, activation="silu") * self.up(x_BTD))

    def __call__(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T D"]:
        B, T, D = x_BTD.shape
        if not self.chunk or T <= self.chunk:
            return self._plain(x_BTD)
        n, c = -(-T // self.chunk), self.chunk
        # Chunk-major blocks as the scan's xs (padding rows are computed and dropped).
        x_NBCD = jnp.pad(x_BTD, ((0, 0), (0, n * c - T), (0, 0)))
        x_NBCD = x_NBCD.reshape(B, n, c, D).swapaxes(0, 1)
        graphdef, params = nnx.split(self)

        @jax.checkpoint
        def block(params, x_BCD):
            return nnx.merge(graphdef, params)._plain(x_BCD)

        _, y_NBCD = jax.lax.scan(lambda _, x: (None, block(params, x)), None, x_NBCD)
        return y_NBCD.swapaxes(0, 1).reshape(B, n * c, D)[:, :T]


def _residual(block, norm, mixer, x_BTD, reset_BT, state):
    """``x + mixer(norm(x))`` then ``x + SwiGLU(RMSNorm(x))``: the two residual steps of either
    block kind, around its own pre-norm and mixer."""
    y_BTD, state = mixer(norm(x_BTD).astype(block.dtype), reset_BT, state)
    x_BTD = x_BTD + y_BTD
    return x_BTD + block.mlp(block.norm_ffn(x_BTD).astype(block.dtype)), state


class mLSTMBlock(nnx.Module):  # noqa: N801
    """``x + mLSTMLayer(RMSNorm(x))`` then ``x + SwiGLU(RMSNorm(x))``: every block of the 7B."""

    def __init__(self, cfg: xLSTMConfig, *, rngs: nnx.Rngs):
        self.norm_mlstm = _rmsnorm(cfg.d_model, cfg, rngs)
        self.mlstm = mLSTMLayer(cfg, rngs=rngs)
        self.norm_ffn = _rmsnorm(cfg.d_model, cfg, rngs)
        self.mlp = SwiGLU(cfg, rngs=rngs)
        self.dtype = jnp.dtype(cfg.dtype)

    def __call__(self, x_BTD, reset_BT, state: MLSTMState | None = None):
        return _residual(self, self.norm_mlstm, self.mlstm, x_BTD, reset_BT, state)


class sLSTMBlock(nnx.Module):  # noqa: N801
    """``x + sLSTMLayer(RMSNorm(x))`` then ``x + SwiGLU(RMSNorm(x))``: the blocks of
    ``cfg.slstm_blocks`` (none in the 7B; the xLSTM[a:b] models of the NeurIPS paper)."""

    def __init__(self, cfg: xLSTMConfig, *, rngs: nnx.Rngs):
        self.norm_slstm = _rmsnorm(cfg.d_model, cfg, rngs)
        self.slstm = sLSTMLayer(cfg, rngs=rngs)
        self.norm_ffn = _rmsnorm(cfg.d_model, cfg, rngs)
        self.mlp = SwiGLU(cfg, rngs=rngs)
        self.dtype = jnp.dtype(cfg.dtype)

    def __call__(self, x_BTD, reset_BT, state: SLSTMState | None = None):
        return _residual(self, self.norm_slstm, self.slstm, x_BTD, reset_BT, state)


def _stacked_blocks(cfg: xLSTMConfig, rngs: nnx.Rngs) -> mLSTMBlock:
    """``num_layers`` mLSTM blocks as one :class:`mLSTMBlock` whose parameters have a leading axis
    of that size, named ``layers`` (replicated by :class:`jaxlab.core.mesh.AxisRules`, so every
    weight keeps its own sharding). Each block draws its own keys (``nnx.split_rngs``)."""

    @nnx.split_rngs(splits=cfg.num_layers)
    @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
    def make(rngs: nnx.Rngs) -> mLSTMBlock:
        return mLSTMBlock(cfg, rngs=rngs)

    return make(rngs)


class xLSTM(LanguageModel):  # noqa: N801
    """xLSTM LM: int tokens ``(B, T)`` -> logits ``(B, T, V)`` (float32; float64 for a float64
    model). Tokens are checked where they enter (:func:`jaxlab.nn.layers.check_token_ids`: a
    one-line error for ids outside ``[0, vocab_size)`` when concrete, a checkify check under
    ``jit``)."""

    def __init__(self, cfg: xLSTMConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        kw = dict(dtype=jnp.dtype(cfg.dtype), param_dtype=jnp.dtype(cfg.param_dtype), rngs=rngs)
        std = init_stds(cfg)
        init = param_init(nnx.initializers.normal(std.embed), ("vocab", "embed"))
        self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, embedding_init=init, **kw)
        if cfg.scan_blocks:
            self.blocks = _stacked_blocks(cfg, rngs)
        else:
            kinds = [
                sLSTMBlock if n in cfg.slstm_blocks else mLSTMBlock for n in range(cfg.num_layers)
            ]
            self.blocks = nnx.List([kind(cfg, rngs=rngs) for kind in kinds])
        self.out_norm = _rmsnorm(cfg.d_model, cfg, rngs)
        self.unembed = unembedding(
            cfg.d_model, cfg.vocab_size, std=std.unembed,
            dtype=cfg.dtype, param_dtype=cfg.param_dtype, rngs=rngs,
        )  # fmt: skip

    def _run(self, tokens_BT, reset_BT, states):
        """Final-normed hidden states and the blocks' states after them; ``states`` None
        (training) or the cache's (a tuple per block, or one stacked state with
        ``scan_blocks``)."""
        x_BTD = constrain(self.embed(tokens_BT), "batch", None, None)
        if self.cfg.scan_blocks:
            x_BTD, new_states = self._scan_blocks(x_BTD, reset_BT, states)
        else:
            new_states = []
            for block, state in zip(self.blocks, states or (None,) * len(self.blocks), strict=True):
                if self.cfg.remat:
                    x_BTD, state = nnx.remat(lambda b, x, r, s: b(x, r, s))(
                        block, x_BTD, reset_BT, state
                    )
                else:
                    x_BTD, state = block(x_BTD, reset_BT, state)
                x_BTD = constrain(x_BTD, "batch", None, None)
                new_states.append(state)
            new_states = tuple(new_states)
        return self.out_norm(x_BTD).astype(self.embed.dtype), new_states

    def logits_from_hidden(self, h_BTD: Float[Array, "B T D"]) -> Float[Array, "B T V"]:
        """The head: unembedding of the final-normed hidden states, soft-capped at
        ``cfg.logit_soft_cap``, in float32 (float64 for a float64 model) (what
        :func:`jaxlab.lm.task.chunked_cross_entropy` applies one block of tokens at a time)."""
        logits_BTV = self.unembed(h_BTD).astype(_acc(self.embed.dtype))
        return soft_cap(logits_BTV, self.cfg.logit_soft_cap)

    def _scan_blocks(self, x_BTD, reset_BT, states):
        """The stacked blocks as one ``lax.scan``: the residual stream is the carry, each step
        slices one block's parameters (and its cached state) off the leading ``layers`` axis, so
        XLA compiles one block and gathers one block's FSDP-sharded weights at a time."""
        graphdef, params = nnx.split(self.blocks)
        keep_states = states is not None  # training passes none and needs none back

        def body(x_BTD, xs):
            block_params, state = xs
            x_BTD, state = nnx.merge(graphdef, block_params)(x_BTD, reset_BT, state)
            return constrain(x_BTD, "batch", None, None), state if keep_states else None

        if self.cfg.remat:  # save only each block's input; recompute the block in the backward
            body = jax.checkpoint(body)
        group = self.cfg.remat_group
        if not (self.cfg.remat and group > 1 and states is None):
            return jax.lax.scan(body, x_BTD, (params, states))
        # Two levels: an outer scan over groups of `group` blocks saves only each group's input;
        # the backward recomputes one group, saving its blocks' inputs, then each block.
        grouped = jax.tree.map(lambda p: p.reshape(-1, group, *p.shape[1:]), params)

        @jax.checkpoint
        def group_body(x_BTD, group_params):
            return jax.lax.scan(body, x_BTD, (group_params, None))[0], None

        return jax.lax.scan(group_body, x_BTD, grouped)[0], None

    def hidden(
        self,
        tokens_BT: Int[Array, "B T"],
        *,
        segment_ids: Int[Array, "B T"] | None = None,
        positions: Int[Array, "B T"] | None = None,
    ) -> Float[Array, "B T D"]:
        """The final-normed hidden states whose :meth:`logits_from_hidden` are the logits."""
        del positions  # the recurrence carries order
        check_token_ids(tokens_BT, self.cfg.vocab_size)
        B, T = tokens_BT.shape
        reset_BT = jnp.zeros((B, T), bool)  # a row starts from the zero state (docstring)
        if segment_ids is not None and self.cfg.document_mask:
            reset_BT = reset_BT.at[:, 1:].set(segment_ids[:, 1:] != segment_ids[:, :-1])
        h_BTD, _ = self._run(tokens_BT, reset_BT, None)
        return h_BTD

    # ------------------------------------------------------------------------------ generation

    def init_cache(self, batch_size: int, max_len: int) -> XLSTMCache:
        """Zero recurrent states for every block; their size does not depend on ``max_len``."""
        del max_len
        c = self.cfg
        dt = _acc(c.dtype)
        if c.scan_blocks:  # one state stacked over the blocks, as the scan's xs
            state = zero_state(batch_size, c.num_heads, c.qk_head_dim, c.v_head_dim, dt)
            stacked = jax.tree.map(lambda x: jnp.zeros((c.num_layers, *x.shape), x.dtype), state)
            return XLSTMCache(stacked, jnp.zeros((), jnp.int32))
        # A fresh buffer per block: a donated cache must not hold one buffer twice.
        states = tuple(
            zero_slstm_state(batch_size, c.num_heads, c.d_model // c.num_heads)
            if n in c.slstm_blocks
            else zero_state(batch_size, c.num_heads, c.qk_head_dim, c.v_head_dim, dt)
            for n in range(c.num_layers)
        )
        return XLSTMCache(states, jnp.zeros((), jnp.int32))

    def extend(
        self, tokens_BT: Int[Array, "B T"], cache: XLSTMCache
    ) -> tuple[Float[Array, "B T V"], XLSTMCache]:
        """Logits of ``T`` new tokens following ``cache``, and the cache after them."""
        check_token_ids(tokens_BT, self.cfg.vocab_size)
        # No reset: a fresh cache holds the zero state a row starts from (module docstring).
        h_BTD, states = self._run(tokens_BT, jnp.zeros(tokens_BT.shape, bool), cache.states)
        return self.logits_from_hidden(h_BTD), XLSTMCache(states, cache.pos + tokens_BT.shape[1])


def stack_blocks(unscanned: xLSTM, scanned: xLSTM) -> None:
    """Copies the parameters of an unscanned model into a scanned one of the same shape, in place:
    block ``n`` becomes index ``n`` of the stacked ``layers`` axis (e.g. to load an unscanned
    checkpoint). The scanned model's variables keep their own metadata (the ``layers`` name)."""
    src = nnx.to_pure_dict(nnx.state(unscanned))
    dst = nnx.state(scanned)
    if unscanned.cfg.scan_blocks or not scanned.cfg.scan_blocks:
        raise ConfigError("stack_blocks(unscanned, scanned): the first model must be unscanned")
    src["blocks"] = jax.tree.map(
        lambda *xs: jnp.stack(xs), *(src["blocks"][n] for n in range(unscanned.cfg.num_layers))
    )
    shapes = lambda tree: jax.tree.map(lambda x: tuple(x.shape), tree)  # noqa: E731
    if shapes(src) != shapes(nnx.to_pure_dict(dst)):
        raise ConfigError(
            "stack_blocks: the two models' parameters differ in shape; build them from configs "
            "that differ only in scan_blocks (and execution options such as remat)"
        )
    nnx.replace_by_pure_dict(dst, src)
    nnx.update(scanned, dst)
