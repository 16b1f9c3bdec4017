"""``solve``: one entry point for SPLR and its baselines, in float64, with input checks and timing.

``solve(a, b, cost, epsilon=η, method=...)`` takes a cost matrix or an ott-jax ``Geometry``, checks
the inputs (finite, positive marginals of equal mass, a positive number for ``ε``, known options)
when they are concrete, runs the chosen solver (each a jit-compiled loop on
:func:`jaxlab.core.iterate.iterate` with the stopping rule ``‖g‖₂ < tol`` of Wang & Qiu, ICML 2025,
Section 5) and returns a :class:`~jaxlab.ot.output.OTOutput`.

Precision: ``‖g‖₂ < 10⁻⁸`` is out of reach in float32, so a concrete call always solves in float64,
switching JAX's x64 mode on for the call only (:func:`jax.enable_x64`; the rest of the process keeps
its precision) and returning float64 arrays. Under ``jax.jit`` the mode cannot change inside the
trace: the caller's precision is used, and with x64 off a ``tol`` below :data:`FLOAT32_MIN_TOL`
raises a ConfigError naming the fix. Traced calls also skip the input checks and report
``seconds = nan``.

Compilation: a concrete call compiles the solver ahead of time once per (method, settings,
shapes) and process, and turns on JAX's persistent compilation cache as ``experiments/run.py``
does (:mod:`jaxlab.core.compile_cache`: the user's cache directory; ``JAXLAB_COMPILATION_CACHE``
names another directory or ``off``; a cache directory configured in JAX itself is left alone), so
the first solve of a later process loads the program from disk instead of compiling it. A first
call compiles exactly one program (inputs are converted by numpy, the plan is formed inside it),
and small problems are compiled with options that shorten XLA's code generation
(:func:`compiler_options`).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.core.compile_cache import enable_compilation_cache
from jaxlab.core.errors import ConfigError
from jaxlab.core.timing import time_call
from jaxlab.methods.qn_ot.splr import splr
from jaxlab.methods.qn_ot.ssns import ssns
from jaxlab.ot.lbfgs import lbfgs
from jaxlab.ot.linsolve import LinearSolver
from jaxlab.ot.output import OTOutput, RawSolution, to_output
from jaxlab.ot.problem import check_inputs, check_positive, is_traced, unpack_cost
from jaxlab.ot.sinkhorn import sinkhorn

__all__ = [
    "CompiledSolve",
    "Method",
    "OTOutput",
    "compile_solve",
    "compiler_options",
    "options_of",
    "solve",
]

# The smallest ‖g‖₂ tolerance a float32 solve is asked to reach (marginals of mass 1 carry
# rounding errors of ~1e-7 per entry).
FLOAT32_MIN_TOL = 1e-6
# Plans up to this many entries are compiled with XLA CPU's loop emitters instead of its MLIR
# fusion emitters (see compiler_options).
FAST_COMPILE_MAX_ENTRIES = 40_000


class Method(enum.StrEnum):
    """Solvers of the entropic-OT dual; ``SPLR`` is the default."""

    SPLR = "splr"
    SINKHORN = "sinkhorn"
    LBFGS = "lbfgs"
    NEWTON = "newton"
    SPARSE_NEWTON = "sparse_newton"
    SSNS = "ssns"


DEFAULT_MAX_ITER = {
    Method.SPLR: 1_000,
    Method.SINKHORN: 20_000,
    Method.LBFGS: 10_000,
    Method.NEWTON: 500,
    Method.SPARSE_NEWTON: 2_000,
    Method.SSNS: 2_000,
}


class _Solver(NamedTuple):
    """A solver function, the options a method fixes, and the defaults it sets (overridable)."""

    fn: Callable[..., RawSolution]
    fixed: dict[str, Any]
    defaults: dict[str, Any]


# Full mask and no shift: H_Ω = H, so this is Newton's method with a Wolfe search.
_NEWTON = dict(
    density_max=1.0,
    density_min=1.0,
    density_init=1.0,
    shift_max=0.0,
    low_rank=False,
    linear_solver=LinearSolver.CHOLESKY,
)
# The one place that maps names to solvers.
SOLVERS: dict[Method, _Solver] = {
    Method.SPLR: _Solver(splr, {}, {}),
    Method.SPARSE_NEWTON: _Solver(splr, {"low_rank": False}, {}),
    Method.NEWTON: _Solver(splr, {}, _NEWTON),
    Method.SINKHORN: _Solver(sinkhorn, {}, {}),
    Method.LBFGS: _Solver(lbfgs, {}, {}),
    Method.SSNS: _Solver(ssns, {}, {}),
}
# Arguments solve() passes itself rather than through **options.
_OWN = ("tol", "max_iter", "init")


def options_of(method: str | Method) -> tuple[str, ...]:
    """The names ``solve(method=method, **options)`` accepts as options."""
    solver = SOLVERS[Method(method)]
    params = inspect.signature(solver.fn).parameters.values()
    return tuple(
        p.name
        for p in params
        if p.kind is inspect.Parameter.KEYWORD_ONLY
        and p.name not in _OWN
        and p.name not in solver.fixed
    )


def _method(method: Any) -> Method:
    try:
        return Method(method)
    except ValueError:
        names = ", ".join(m.value for m in Method)
        raise ConfigError(f"unknown OT method {method!r}; choose one of {names}") from None


def _check_options(method: Method, options: dict[str, Any]) -> dict[str, Any]:
    """Refuses unknown options (naming the valid ones) and normalises ``linear_solver``."""
    valid = options_of(method)
    for name in options:
        if name not in valid:
            raise ConfigError(
                f"unknown option {name!r} for method {method.value}; "
                f"valid options: {', '.join(valid)}"
            )
    if options.get("linear_solver") is not None:
        try:
            options = {**options, "linear_solver": LinearSolver(options["linear_solver"])}
        except ValueError:
            names = ", ".join(s.value for s in LinearSolver)
            raise ConfigError(
                f"unknown linear_solver {options['linear_solver']!r}; choose one of {names}"
            ) from None
    return options


def _dispatch(method: Method, cost, a, b, epsilon, init, tol, max_iter, opts) -> RawSolution:
    solver = SOLVERS[method]
    kw = {**solver.defaults, **dict(opts), **solver.fixed}
    return solver.fn(cost, a, b, epsilon, tol=tol, max_iter=max_iter, init=init, **kw)


_CACHE: dict[Any, Any] = {}


class CompiledSolve(NamedTuple):
    """A solve ready to run: the AOT-compiled solver and its float64 inputs.

    Calling it runs the compiled program once and returns its :class:`OTOutput` with
    ``seconds = nan`` (what :mod:`jaxlab.core.timing` times: the solve and its plan, as the
    authors' ``regot`` returns its plan); :meth:`output` fills in the measured seconds.
    """

    compiled: Any
    args: tuple[Any, ...]

    def __call__(self) -> OTOutput:
        with jax.enable_x64(True):
            return self.compiled(*self.args)

    def output(self, out: OTOutput, seconds: float) -> OTOutput:
        """``out`` with ``seconds`` as its wall time."""
        return out._replace(seconds=seconds)


def _settings(method, tol, max_iter, options):
    method = _method(method)
    max_iter = DEFAULT_MAX_ITER[method] if max_iter is None else max_iter
    if isinstance(max_iter, bool) or not (isinstance(max_iter, int | np.integer) and max_iter >= 1):
        raise ConfigError(f"max_iter must be a positive integer, got {max_iter!r}")
    check_positive("tol", tol)
    return method, int(max_iter), float(tol), _check_options(method, options)


def compile_solve(
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    cost: Any,
    *,
    epsilon: float | None = None,
    method: str | Method = Method.SPLR,
    tol: float = 1e-8,
    max_iter: int | None = None,
    init: tuple[Any, Any] | None = None,
    **options: Any,
) -> CompiledSolve:
    """Checks the inputs and compiles the solve in float64 without running it.

    Arguments as for :func:`solve` (concrete values only). Compiled programs are cached per
    (method, settings, shapes), so compiling the same solve again is free.
    """
    method, max_iter, tol, options = _settings(method, tol, max_iter, options)
    cost, epsilon = unpack_cost(cost, epsilon)
    if is_traced(a, b, cost, epsilon, init):
        raise ConfigError("compile_solve needs concrete inputs; call solve() under jax.jit")
    return _compile(method, max_iter, tol, options, a, b, cost, epsilon, init)


def _use_persistent_cache() -> None:
    """Turns JAX's persistent compilation cache on as ``experiments/run.py`` does, unless the
    user configured JAX's own cache or set ``JAXLAB_COMPILATION_CACHE=off``.

    Compiling SPLR takes seconds and its program depends only on the method, settings and shapes,
    so a later process (a re-run script, a notebook restarted) loads it from disk instead. JAX
    decides once per process whether the cache is used, at its first compilation: when the caller
    compiled something before the first ``solve``, the cache stays off for that process.
    """
    if jax.config.jax_compilation_cache_dir is None:
        enable_compilation_cache()


def _compile(method, max_iter, tol, options, a, b, cost, epsilon, init) -> CompiledSolve:
    check_inputs(a, b, cost, epsilon, init)
    opts = tuple(sorted(options.items()))
    with jax.enable_x64(True):
        # Converted by numpy and copied to the device: a jnp conversion of a Python float or a
        # float32 array would compile a one-op program of its own (tens of ms on a first call).
        args = tuple(_to_device(x) for x in (cost, a, b, epsilon))
        if init is not None:
            init = tuple(_to_device(p) for p in init)
        key = (method, tol, max_iter, opts, init is None) + tuple((x.shape, x.dtype) for x in args)
        if key not in _CACHE:
            _use_persistent_cache()

            def run(cost, a, b, epsilon, init):
                raw = _dispatch(method, cost, a, b, epsilon, init, tol, max_iter, opts)
                # The plan and potentials are formed inside the one compiled program: eagerly,
                # each of their few ops would be a separate compilation on the first call.
                return to_output(raw, cost, epsilon, jnp.nan)

            options = compiler_options(args[0].shape, args[0].device.platform)
            _CACHE[key] = jax.jit(run).lower(*args, init).compile(compiler_options=options)
    return CompiledSolve(_CACHE[key], (*args, init))


def compiler_options(cost_shape: tuple[int, ...], platform: str) -> dict[str, Any] | None:
    """XLA options for compiling one solve of a cost of shape ``cost_shape`` on ``platform``.

    On CPU, most of a first call's compile time is XLA's code generation, and its MLIR fusion
    emitters (the default) spend most of that. Its older loop emitters build the same program
    (the same iterations, iterates equal up to rounding) in much less time, but their scatter
    (the ``segment_sum`` of the gathered CG products) runs slower, which shows on CG-heavy large
    solves such as the MNIST pairs (the qn_ot README has the measurements). So the loop emitters
    serve small plans (at most :data:`FAST_COMPILE_MAX_ENTRIES` entries), where a solve takes
    milliseconds and the compile is nearly all of a first call; larger plans and other platforms
    keep XLA's defaults.
    The options apply to this one program only, not to the process.
    """
    if platform == "cpu" and int(np.prod(cost_shape)) <= FAST_COMPILE_MAX_ENTRIES:
        return {"xla_cpu_use_fusion_emitters": False}
    return None


def _to_device(x: Any) -> jax.Array:
    """``x`` as a float64 device array, converted without compiling anything."""
    return jax.device_put(np.asarray(x, np.float64))


def _timed(fn: Callable[[], OTOutput]) -> tuple[OTOutput, float]:
    """One blocked call of ``fn``, timed by :mod:`jaxlab.core.timing` (already compiled)."""
    results: list[OTOutput] = []

    def call() -> OTOutput:
        results.append(fn())
        return results[-1]

    timing = time_call(call, repeats=1, warmup=0)
    return results[0], timing.median


def solve(
    a: Float[Array, " n"],
    b: Float[Array, " m"],
    cost: Any,
    *,
    epsilon: float | None = None,
    method: str | Method = Method.SPLR,
    tol: float = 1e-8,
    max_iter: int | None = None,
    init: tuple[Any, Any] | None = None,
    **options: Any,
) -> OTOutput:
    """Solves entropic OT ``min <T, M> - η h(T)`` s.t. ``T1 = a, Tᵀ1 = b`` through its dual.

    Args:
      a, b: marginals (positive, equal mass).
      cost: cost matrix ``M`` (n × m) or an ott-jax ``Geometry`` (its ``epsilon`` is used when
        ``epsilon`` is None).
      epsilon: regularisation ``η``.
      method: one of ``"splr"``, ``"sinkhorn"``, ``"lbfgs"``, ``"newton"``, ``"sparse_newton"``,
        ``"ssns"`` (:class:`Method`).
      tol: stop at ``‖g‖₂ < tol`` (the marginal error).
      max_iter: iteration budget (default depends on the method).
      init: initial potentials ``(α₀, β₀)`` (warm start); default ``α = 0`` with its exact ``β``.
      **options: solver-specific settings, e.g. ``density_max``, ``shift_max`` for SPLR
        (:func:`options_of` lists them).

    Returns:
      :class:`OTOutput` in float64 (see the module docstring for calls under ``jax.jit``);
      ``converged`` is False and ``hit_max_iter`` True when the budget ran out.

    Raises:
      ConfigError: invalid inputs or settings (one line saying what to change).
    """
    method, max_iter, tol, options = _settings(method, tol, max_iter, options)
    cost, epsilon = unpack_cost(cost, epsilon)
    if not is_traced(a, b, cost, epsilon, init):
        compiled = _compile(method, max_iter, tol, options, a, b, cost, epsilon, init)
        return compiled.output(*_timed(compiled))
    if not is_traced(epsilon):
        check_positive("epsilon", epsilon)
    if not jax.config.jax_enable_x64 and tol < FLOAT32_MIN_TOL:
        raise ConfigError(
            f"solve under jax.jit with x64 off runs in float32, where tol={tol:g} is out of reach; "
            "call jax.config.update('jax_enable_x64', True) first, or pass tol >= "
            f"{FLOAT32_MIN_TOL:g}"
        )
    dtype = jnp.result_type(float)
    args = tuple(jnp.asarray(x, dtype) for x in (cost, a, b, epsilon))
    if init is not None:
        init = tuple(jnp.asarray(p, dtype) for p in init)
    opts = tuple(sorted(options.items()))
    raw = _dispatch(method, *args, init, tol, max_iter, opts)
    return to_output(raw, args[0], args[3], jnp.nan)
