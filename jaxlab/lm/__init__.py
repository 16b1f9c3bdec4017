"""The language-model machinery every LM of jaxlab shares, built from :mod:`jaxlab.nn`'s layers.

- :mod:`jaxlab.lm.config`: :class:`~jaxlab.lm.config.LMConfig`, the fields every LM config shares,
  and the model's cost (``flops_per_token``);
- :mod:`jaxlab.lm.transformer`: the baseline Transformer LM;
- :mod:`jaxlab.lm.task`: the language-modelling Task (packed text, the loss, the AOT train step);
- :mod:`jaxlab.lm.generate` and :mod:`jaxlab.lm.kv_cache`: prefill, fixed-size-cache decoding and
  sampling for every LM; the Transformer's preallocated KV cache.

Imports ``core``, ``data`` and ``nn``; the methods' language models (RMT, xLSTM, SST's) build on it.
"""
