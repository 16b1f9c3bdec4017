"""Autoregressive generation for every jaxlab language model: prefill, a fixed-size cache, sampling.

A model generates if it has two methods (:class:`CachedLM`): ``init_cache(batch_size, max_len)``
returns a cache pytree whose shapes never change, and ``extend(tokens_BT, cache)`` returns the
logits of ``T`` new tokens after the cached ones and the updated cache. Caches are NamedTuples with
a ``pos`` field (the tokens seen), like the house's other states. The baseline Transformer's cache
is a key/value cache preallocated to ``max_len`` (:class:`jaxlab.lm.kv_cache.KVCache`); the
xLSTM's is its recurrent state, whose size does not depend on the context
(``jaxlab.methods.xlstm.model.XLSTMCache``). On top of that:

* :func:`prefill` runs the prompt through one ``extend`` from an empty cache;
* :func:`decode_step` is one jitted token step (cache donated, so written in place);
* :func:`sample` picks the next token: greedy (``temperature=0``), or with temperature and an
  optional top-k cut from an explicit key;
* :func:`generate` is prefill + a ``lax.scan`` of decode steps (one key per step, folded from the
  caller's key);
* :func:`teacher_forced_logits` prefills a prefix and then feeds the true tokens one at a time:
  the logits must equal the full forward's (how the caches are tested).

Prompts are ``(B, T)`` integer ids, batched as every model's input (one sequence is
``prompt[None]``; an unbatched prompt is a one-line error, not a broadcast). :func:`generate` and
:func:`prefill` check them before they compile (:func:`jaxlab.nn.layers.check_token_ids`): ids
outside ``[0, vocab_size)`` (the model's ``cfg.vocab_size``) are a one-line error instead of NaN or
wrapped-around embeddings. :func:`decode_step` takes the model's own samples and checks shapes
only (reading the ids back every step would stall the decode loop).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxlab.core.errors import ConfigError
from jaxlab.nn.layers import check_token_ids

__all__ = [
    "CachedLM",
    "decode_step",
    "generate",
    "prefill",
    "sample",
    "supports_generation",
    "teacher_forced_logits",
]


class CachedLM(Protocol):
    """What :func:`generate` needs from a model."""

    def init_cache(self, batch_size: int, max_len: int) -> Any: ...

    def extend(self, tokens_BT: Int[Array, "B T"], cache: Any) -> tuple[Array, Any]: ...


def supports_generation(model: nnx.Module) -> bool:
    return callable(getattr(model, "init_cache", None)) and callable(getattr(model, "extend", None))


def _check(model: nnx.Module) -> None:
    if not supports_generation(model):
        raise ConfigError(
            f"{type(model).__name__} cannot generate: it needs init_cache(batch_size, max_len) "
            "and extend(tokens, cache) (see jaxlab.lm.generate.CachedLM)"
        )


def _check_prompt(model: nnx.Module, prompt_BT, owner: str) -> None:
    """The prompt's shape, dtype and ids (against ``model.cfg.vocab_size`` where the model has
    one), in one line, before anything is traced."""
    vocab_size = getattr(getattr(model, "cfg", None), "vocab_size", None)
    check_token_ids(prompt_BT, vocab_size, owner=owner)


@functools.partial(jax.jit, static_argnames=("max_len",))
def _prefill(model, prompt_BT, *, max_len):
    cache = model.init_cache(prompt_BT.shape[0], max_len)
    return model.extend(prompt_BT, cache)


def prefill(
    model: nnx.Module, prompt_BT: Int[Array, "B T"], *, max_len: int
) -> tuple[Float[Array, "B T V"], Any]:
    """Logits of the prompt and the cache after it (room for ``max_len`` tokens in all).

    Raises:
      ConfigError: a model without a cache, or a prompt that is not ``(B, T)`` ids in the
        vocabulary (module docstring).
    """
    _check(model)
    _check_prompt(model, prompt_BT, "prefill")
    return _prefill(model, prompt_BT, max_len=max_len)


@functools.partial(jax.jit, donate_argnums=(2,))
def decode_step(
    model: nnx.Module, token_B: Int[Array, " B"], cache: Any
) -> tuple[Float[Array, "B V"], Any]:
    """One token through the model: its logits and the cache with it (the cache is donated)."""
    logits_B1V, cache = model.extend(token_B[:, None], cache)
    return logits_B1V[:, 0], cache


def sample(
    logits_BV: Float[Array, "B V"],
    key: Array | None = None,
    *,
    temperature: float = 0.0,
    top_k: int = 0,
) -> Int[Array, " B"]:
    """The next token: argmax for ``temperature == 0``, else a draw from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest logits (0: all)."""
    if temperature == 0:
        return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
    if key is None:
        raise ConfigError("sampling with temperature > 0 needs an explicit key")
    logits_BV = logits_BV.astype(jnp.float32) / temperature
    if top_k:
        kth_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
        logits_BV = jnp.where(logits_BV >= kth_B1, logits_BV, -jnp.inf)
    return jax.random.categorical(key, logits_BV, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("max_new_tokens", "max_len", "temperature", "top_k"))
def _generate(model, prompt_BT, key, *, max_new_tokens, max_len, temperature, top_k):
    logits_BTV, cache = _prefill(model, prompt_BT, max_len=max_len)
    first = sample(logits_BTV[:, -1], jax.random.fold_in(key, 0), temperature=temperature,
                   top_k=top_k)  # fmt: skip

    def body(carry, step):
        token_B, cache = carry
        logits_B1V, cache = model.extend(token_B[:, None], cache)
        nxt = sample(logits_B1V[:, 0], jax.random.fold_in(key, step), temperature=temperature,
                     top_k=top_k)  # fmt: skip
        return (nxt, cache), token_B

    _, tokens_NB = jax.lax.scan(body, (first, cache), jnp.arange(1, max_new_tokens + 1))
    return jnp.concatenate([prompt_BT, tokens_NB.T], axis=1)


def generate(
    model: nnx.Module,
    prompt_BT: Int[Array, "B T"],
    *,
    max_new_tokens: int,
    key: Array | None = None,
    temperature: float = 0.0,
    top_k: int = 0,
    max_len: int | None = None,
) -> Int[Array, "B T+N"]:
    """The prompt followed by ``max_new_tokens`` generated tokens.

    Args:
      model: a :class:`CachedLM`.
      prompt_BT: int tokens ``(B, T)``; every row has the same length (one sequence:
        ``prompt[None]``).
      max_new_tokens: how many tokens to generate.
      key: PRNG key for sampling (required when ``temperature > 0``).
      temperature, top_k: see :func:`sample`.
      max_len: cache length (default prompt + new tokens).

    Raises:
      ConfigError: a model without a cache, a prompt that is not ``(B, T)`` ids in the vocabulary
        (an unbatched one included), or lengths and sampling options that do not fit.

    Example:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jaxlab.lm.generate import generate
      >>> from jaxlab.lm.transformer import Transformer, TransformerConfig
      >>> cfg = TransformerConfig(vocab_size=256, seq_len=16, num_layers=1, d_model=32, num_heads=2)
      >>> model = Transformer(cfg, rngs=nnx.Rngs(0))  # untrained: the bytes it writes are noise
      >>> prompt = jnp.array([list(b"hi")])  # one sequence of byte ids, (B, T) = (1, 2)
      >>> tokens = generate(model, prompt, max_new_tokens=4)  # greedy
      >>> tokens.shape, bytes(tokens[0, :2].tolist())
      ((1, 6), b'hi')
      >>> sampled = generate(model, prompt, max_new_tokens=4, key=jax.random.key(0),
      ...                    temperature=0.8, top_k=20)
      >>> sampled.shape
      (1, 6)
    """
    _check(model)
    _check_prompt(model, prompt_BT, "generate")
    T = prompt_BT.shape[1]
    max_len = max_len or T + max_new_tokens
    if max_new_tokens < 1 or max_len < T + max_new_tokens:
        raise ConfigError(
            f"generate: need max_new_tokens >= 1 and max_len >= prompt + new tokens "
            f"({T} + {max_new_tokens}); got max_new_tokens={max_new_tokens}, max_len={max_len}"
        )
    if temperature > 0 and key is None:
        raise ConfigError("generate: temperature > 0 needs an explicit key")
    key = jax.random.key(0) if key is None else key
    return _generate(
        model, prompt_BT, key, max_new_tokens=max_new_tokens, max_len=max_len,
        temperature=float(temperature), top_k=int(top_k),
    )  # fmt: skip


def teacher_forced_logits(
    model: nnx.Module, tokens_BT: Int[Array, "B T"], prompt_len: int
) -> Float[Array, "B T V"]:
    """Logits of every position: the first ``prompt_len`` from :func:`prefill`, the rest from one
    :func:`decode_step` per true token. Equal to ``model(tokens_BT)`` when the cache is right."""
    _check(model)
    T = tokens_BT.shape[1]
    prompt_logits_BTV, cache = prefill(model, tokens_BT[:, :prompt_len], max_len=T)
    out = [prompt_logits_BTV]
    for t in range(prompt_len, T):
        logits_BV, cache = decode_step(model, tokens_BT[:, t], cache)
        out.append(logits_BV[:, None])
    return jnp.concatenate(out, axis=1)
