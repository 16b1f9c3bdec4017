"""Contract tests every language model passes; a new model joins by adding one line to ``MODELS``.

Each entry is a model class (built as ``cls(cfg, rngs=...)``, called as ``model(tokens,
segment_ids=, positions=)``) and a tiny config (an :class:`jaxlab.lm.config.LMConfig`). The
contract: logits of the right shape and dtype; causality; document masking; the parameter count of
``nnx.eval_shape`` equals the built model's; the config's ``flops_per_token()`` counts the matrix
products of the lowered forward pass; the sharded train step on a (2, 4) data x fsdp mesh and
a (2, 2, 2) data x fsdp x tensor mesh gives the single-device losses; the train step lowers and
compiles for a simulated 64-device mesh; structured linear maps (``linear=low_rank``, ``btt``,
``mlr``) reach the model and train; generation where supported (:mod:`jaxlab.lm.generate`): prefill
plus one cached step per true token gives the full forward's logits, for prompt lengths on and off
the xLSTM's chunk grid; every model is a :class:`~jaxlab.lm.model.LanguageModel` whose chunked
loss (``LMTask(loss_chunk>0)``) equals the plain one.
"""

import dataclasses
import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.experimental import checkify

from jaxlab.core.aot import run_with_devices
from jaxlab.core.checks import ids_in_range
from jaxlab.core.config import TrainConfig
from jaxlab.core.errors import ConfigError
from jaxlab.core.flops import dot_flops
from jaxlab.core.loop import run_training
from jaxlab.core.mesh import MeshConfig
from jaxlab.core.metrics import read_metrics
from jaxlab.lm.generate import supports_generation, teacher_forced_logits
from jaxlab.lm.model import LanguageModel
from jaxlab.lm.task import LMTask, compile_lm_train_step, cross_entropy
from jaxlab.lm.transformer import Transformer, TransformerConfig
from jaxlab.methods.rmt import RMT, RMTConfig
from jaxlab.methods.xlstm import xLSTM, xLSTMConfig
from jaxlab.nn import pallas_switch
from jaxlab.nn.layers import count_params

T = 16  # every tiny config's seq_len
MODELS = {  # name: (model class, tiny config)
    "transformer": (Transformer, TransformerConfig(seq_len=T, num_layers=2, d_model=32, num_heads=4, num_kv_heads=2)),  # noqa: E501
    "rmt": (RMT, RMTConfig(seq_len=T, num_layers=2, rank=4, d_key=8, d_value=8, d_ff=64)),
    "xlstm": (xLSTM, xLSTMConfig(seq_len=T, num_layers=2, d_model=32, num_heads=4, chunk_size=4)),
}  # fmt: skip
POSITIONS = ("learned", "alibi")
# flops_per_token() must equal the lowered forward's matrix products (jaxlab.core.flops.dot_flops),
# which count a loop's body once: the xLSTM's chunkwise form loops over chunks, so its check runs
# with one chunk of the whole row.
FLOP_OVERRIDES = {"xlstm": dict(chunk_size=T)}
# Structured kinds for the FLOP count (linear.LinearSpec.flops)
STRUCTURED_FLOPS = {
    "low_rank": dict(linear="low_rank", linear_rank=4),
    "btt": dict(linear="btt", linear_btt_rank=2),
}
TRAIN = TrainConfig(
    steps=2,
    batch_size=8,
    warmup_steps=1,
    log_every=1,
    eval_every=2,
    checkpoint_every=2,
    eval_batches=1,
    tensorboard=False,
)


def build(name: str, **overrides):
    cls, cfg = MODELS[name]
    cfg = dataclasses.replace(cfg, **overrides)
    return lambda rngs: cls(cfg, rngs=rngs)


# ---------------------------------------------------------------------------- forward contract


@pytest.fixture(scope="module", params=[(m, p) for m in MODELS for p in POSITIONS], ids=str)
def forward(request):
    name, positions = request.param
    graphdef, state = nnx.split(build(name, positions=positions)(nnx.Rngs(0)))
    return jax.jit(lambda tokens, seg: nnx.merge(graphdef, state)(tokens, segment_ids=seg))


def test_logits_shape_and_dtype(forward):
    logits = forward(jnp.zeros((2, T), jnp.int32), jnp.ones((2, T), jnp.int32))
    assert logits.shape == (2, T, 256) and logits.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(logits)))


def test_causal_future_tokens_do_not_change_the_past(forward):
    tokens = jax.random.randint(jax.random.key(0), (1, T), 1, 256)
    seg = jnp.ones((1, T), jnp.int32)
    a, b = forward(tokens, seg), forward(tokens.at[0, 9:].set(5), seg)
    np.testing.assert_allclose(a[0, :9], b[0, :9], atol=1e-5)
    assert not np.allclose(a[0, 9:], b[0, 9:])


def test_document_mask_isolates_documents(forward):
    tokens = jax.random.randint(jax.random.key(1), (1, T), 1, 256)
    seg = jnp.array([[1] * 7 + [2] * (T - 7)])
    a, b = forward(tokens, seg), forward(tokens.at[0, :7].set(3), seg)
    # Learned positions are absolute, and the second document's are the same in both rows.
    np.testing.assert_allclose(a[0, 7:], b[0, 7:], atol=1e-5)
    assert not np.allclose(a[0, :7], b[0, :7])


@pytest.mark.parametrize("name", MODELS)
def test_the_chunked_loss_equals_the_plain_loss(name):
    """Every model is a LanguageModel (hidden states, then a head), so ``LMTask(loss_chunk>0)``
    trains it: the chunked loss, its z-loss and its gradient equal the plain loss's over the full
    logits (a chunk of 6 is off the row's grid of 16)."""
    model = build(name)(nnx.Rngs(0))
    assert isinstance(model, LanguageModel)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, (2, T + 1))
    batch = {
        "inputs": jnp.asarray(tokens[:, :-1]),
        "targets": jnp.asarray(tokens[:, 1:]),
        "segment_ids": jnp.asarray([[1] * 7 + [2] * (T - 7), [1] * T]),
        "positions": jnp.asarray(np.tile(np.arange(T), (2, 1))),
    }
    results = []
    for chunk in (0, 6):
        task = LMTask(build=lambda r: model, seq_len=T, z_loss=1e-3, loss_chunk=chunk)
        task.build_model(nnx.Rngs(0))  # the check of the model's methods
        grad = nnx.jit(nnx.value_and_grad(lambda m, t=task: t.loss(m, batch), has_aux=True))
        (loss, metrics), grads = grad(model)
        results.append((loss, metrics["z_loss"], nnx.to_pure_dict(grads)))
    (loss0, z0, g0), (loss1, z1, g1) = results
    # float32 sums in another order: a few ulps of the loss, not bitwise
    np.testing.assert_allclose(loss1, loss0, rtol=2e-6)
    np.testing.assert_allclose(z1, z0, rtol=2e-6)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.max(np.abs(b)))  # noqa: E731,E501
    jax.tree.map(close, g1, g0)


@pytest.mark.parametrize("name", MODELS)
def test_parameter_count_from_eval_shape_equals_the_built_model(name):
    make = build(name)
    assert count_params(nnx.eval_shape(lambda: make(nnx.Rngs(0)))) == count_params(
        make(nnx.Rngs(0))
    )


@pytest.mark.parametrize("kind", [None, *STRUCTURED_FLOPS])
@pytest.mark.parametrize("name", MODELS)
def test_flops_per_token_counts_the_matrix_products_of_the_forward(name, kind):
    """Dense, and with each structured linear kind whose forward is its factors' products (the
    count follows the shapes the factory builds)."""
    cls, cfg = MODELS[name]
    cfg = dataclasses.replace(cfg, **STRUCTURED_FLOPS.get(kind, {}), **FLOP_OVERRIDES.get(name, {}))
    graphdef, state = nnx.split(cls(cfg, rngs=nnx.Rngs(0)))
    lowered = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t)).lower(state, jnp.zeros((1, T), int))
    counted = cfg.flops_per_token().forward * T
    assert counted == dot_flops(lowered)


@pytest.mark.parametrize("name", MODELS)
def test_generate_matches_the_full_forward(name):
    """Cached decoding gives the logits of the full forward (prompt 8: on the xLSTM's chunk grid of
    4; prompt 7: off it)."""
    model = build(name)(nnx.Rngs(0))
    if not supports_generation(model):
        pytest.skip(f"{name} has no cache (init_cache / extend)")
    tokens = jax.random.randint(jax.random.key(2), (2, T), 0, 256)
    full = model(tokens)
    for prompt_len in (8, 7):
        cached = teacher_forced_logits(model, tokens, prompt_len)
        np.testing.assert_allclose(cached, full, atol=1e-5 * float(jnp.max(jnp.abs(full))))


@pytest.mark.parametrize("name", MODELS)
def test_token_ids_are_checked_where_they_enter(name):
    """Ids outside [0, vocab) and unbatched tokens: a one-line error on concrete tokens (the
    embedding's gather would read NaNs for 256 and wrap -1 round to 255 without a word); under
    ``jax.jit`` a checkify check that reports them when the caller checkifies, and nothing
    otherwise (the forward with valid ids is unchanged)."""
    model = build(name)(nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(3), (2, T), 0, 256)
    for bad in (256, -1):
        with pytest.raises(ConfigError, match=r"token ids must lie in \[0, 256\).* at \[1, 3\]"):
            model(tokens.at[1, 3].set(bad))
    with pytest.raises(ConfigError, match="add a batch axis"):
        model(tokens[0])
    if supports_generation(model):
        cache = model.init_cache(2, T)
        with pytest.raises(ConfigError, match=r"token ids must lie in \[0, 256\)"):
            model.extend(tokens.at[0, 0].set(-1), cache)
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, tokens: nnx.merge(graphdef, state)(tokens))
    checked = checkify.checkify(forward)
    err, logits = checked(state, tokens)
    err.throw()  # valid ids: no error, the plain forward's logits
    np.testing.assert_allclose(logits, forward(state, tokens), rtol=1e-6, atol=1e-6)
    err, _ = checked(state, tokens.at[1, 3].set(-1))
    with pytest.raises(checkify.JaxRuntimeError, match=r"token ids must lie in \[0, 256\)"):
        err.throw()
    assert bool(jax.jit(ids_in_range, static_argnums=1)(tokens, 256))
    assert not bool(jax.jit(ids_in_range, static_argnums=1)(tokens.at[0, 0].set(256), 256))


# ---------------------------------------------------------------------------- sharded training


@pytest.fixture(scope="module")
def losses(tmp_path_factory):
    """``losses(name, mesh_shape)``: per-step (loss, grad_norm) of a 2-step run, cached."""
    cache = {}

    def run(name, shape):
        if (name, shape) not in cache:
            task = LMTask(build=build(name), seq_len=T)
            workdir = tmp_path_factory.mktemp(f"{name}_{'x'.join(map(str, shape))}")
            run_training(task, TRAIN, workdir, mesh_cfg=MeshConfig(*shape), verbose=False)
            cache[name, shape] = [(r["loss"], r["grad_norm"]) for r in read_metrics(workdir)]
        return cache[name, shape]

    return run


# Every model over data × fsdp × tensor; a 4-way FSDP split once (the sharding rules are shared,
# and a third layout per model cost about 40 s of the suite).
SHARDED_CASES = [(name, (2, 2, 2)) for name in MODELS] + [("transformer", (2, 4, 1))]
SHARDED_IDS = [f"{n}-data{a}-fsdp{b}-tp{c}" for n, (a, b, c) in SHARDED_CASES]


@pytest.mark.parametrize("name, shape", SHARDED_CASES, ids=SHARDED_IDS)
def test_sharded_step_equals_single_device(losses, name, shape):
    sharded, single = losses(name, shape), losses(name, (1, 1, 1))
    assert len(sharded) == len(single) == TRAIN.steps
    for (loss, gnorm), (ref_loss, ref_gnorm) in zip(sharded, single, strict=True):
        assert loss == pytest.approx(ref_loss, abs=1e-5)
        assert gnorm == pytest.approx(ref_gnorm, rel=1e-4)


def compile_every_model(mesh: MeshConfig, batch_size: int) -> dict:
    """Module-level, so that :func:`run_with_devices` can pickle it into its child process."""
    return {
        name: compile_lm_train_step(cls, cfg, batch_size=batch_size, mesh_cfg=mesh)
        for name, (cls, cfg) in MODELS.items()
    }


@pytest.fixture(scope="module")
def compiled_for_64_devices():
    job = functools.partial(compile_every_model, MeshConfig(data=8, fsdp=8), batch_size=64)
    return run_with_devices(job, 64)


@pytest.mark.slow  # a child process with 64 simulated devices: start-up plus two compiles
@pytest.mark.parametrize("name", MODELS)
def test_train_step_compiles_for_a_64_device_mesh(compiled_for_64_devices, name):
    res = compiled_for_64_devices[name]
    assert res["num_devices"] == 64
    # fsdp = 8 splits every parameter with an "embed" axis 8 ways; the tiny models' norm scales and
    # (RMT) storage/retrieval keys stay replicated, a few percent of the state.
    assert 1 / 8 <= res["sharded_fraction"] < 1.3 / 8
    assert res["temp_bytes_per_device"] > 0


# ---------------------------------------------------------------------------- linear factory

STRUCTURED = {
    "low_rank": dict(linear="low_rank", linear_rank=4),
    "btt": dict(linear="btt", linear_btt_rank=2),
    "mlr": dict(linear="mlr", linear_mlr_ranks=(4, 2)),
    "spectral": dict(linear="spectral", linear_rank=4),
}


def two_steps(model, lr=1e-2):
    """Two jitted Adam steps of the next-token loss on random tokens: (loss before, loss after,
    the step's jaxpr as text)."""
    tokens = jax.random.randint(jax.random.key(0), (4, T + 1), 0, 256)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    graphdef, state = nnx.split((model, nnx.Optimizer(model, optax.adam(lr), wrt=nnx.Param)))

    def step(state):
        model, opt = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: cross_entropy(m(inputs), targets)[0])(model)
        opt.update(model, grads)
        return nnx.split((model, opt))[1], loss

    program = str(jax.make_jaxpr(step)(state))
    state, before = jax.jit(step)(state)
    _, after = jax.jit(step)(state)
    return float(before), float(after), program


@pytest.mark.parametrize("kind", STRUCTURED)
@pytest.mark.parametrize("name", MODELS)
def test_structured_linear_maps_reach_the_model_and_train(name, kind):
    model = build(name, **STRUCTURED[kind])(nnx.Rngs(0))
    paths = {"/".join(map(str, p)) for p, _ in nnx.iter_graph(model)}
    factor = {
        "low_rank": "/mlp/up/u",
        "btt": "/mlp/up/first",
        "mlr": "/mlp/up/right/0",
        "spectral": "/mlp/up/u_active",
    }[kind]
    assert any(p.endswith(factor) for p in paths)
    before, after, _ = two_steps(model)
    assert np.isfinite(before) and after < before


# ---------------------------------------------------------------------------- implementations

# Every attention / matmul / cell implementation of every model trains (issue 46: the xLSTM with
# form="pallas" could not be differentiated). One layer, Pallas in interpret mode. "pallas" asks
# for the kernels by name; "auto_pallas_on" builds the defaults ("auto") with the repo-wide switch
# on as on a GPU (fixture below), so every "auto" dispatch picks its kernel. "cudnn" needs an
# NVIDIA GPU and is not run here.
PALLAS_ALL = dict(attention_impl="pallas", matmul_impl="pallas")
IMPLS = {
    "transformer": {
        "xla": dict(attention_impl="xla", matmul_impl="xla"),
        "xla_chunked": dict(attention_impl="xla_chunked", matmul_impl="xla"),
        "pallas": PALLAS_ALL,
        "pallas_mlr": dict(PALLAS_ALL, attention="mlr", attention_ranks=(4, 4), num_kv_heads=0),
        "auto_pallas_on": {},
    },
    "rmt": {
        "xla": dict(attention_impl="xla", matmul_impl="xla"),
        "xla_chunked": dict(attention_impl="xla_chunked", matmul_impl="xla"),
        "pallas": PALLAS_ALL,
        "pallas_mlr": dict(PALLAS_ALL, attention="mlr", attention_ranks=(4, 4)),
        "auto_pallas_on": {},
    },
    "xlstm": {
        "recurrent": dict(cell_form="recurrent", matmul_impl="xla"),
        "parallel": dict(cell_form="parallel", matmul_impl="xla"),
        "chunkwise": dict(cell_form="chunkwise", matmul_impl="xla"),
        "pallas": dict(cell_form="pallas", chunk_size=8, matmul_impl="pallas"),
        "auto_pallas_on": dict(chunk_size=8),
    },
}


@pytest.fixture
def pallas_switch_on(monkeypatch):
    """Every ``"auto"`` dispatch picks its Pallas kernel, as ``JAXLAB_PALLAS=on`` does on a GPU or
    TPU (the CPU never picks them; here they run interpreted): ``pallas_ready`` is replaced in
    every jaxlab module that imported it."""
    original = pallas_switch.pallas_ready
    for module in list(sys.modules.values()):
        if (
            module
            and module.__name__.startswith("jaxlab")
            and (getattr(module, "pallas_ready", None) is original)
        ):
            monkeypatch.setattr(module, "pallas_ready", lambda platform=None, kernel=None: True)


CASES = [(name, impl) for name, impls in IMPLS.items() for impl in impls]


@pytest.mark.parametrize(("name", "impl"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_every_implementation_trains_two_steps(request, name, impl):
    if impl == "auto_pallas_on":
        request.getfixturevalue("pallas_switch_on")
    model = build(name, num_layers=1, **IMPLS[name][impl])(nnx.Rngs(0))
    before, after, program = two_steps(model)
    assert np.isfinite(before) and after < before
    # The kernels are in the step (forward and backward), not an XLA fallback.
    assert ("pallas_call" in program) == ("pallas" in impl), program.count("pallas_call")
