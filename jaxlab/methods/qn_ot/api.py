"""``solve``: one entry point for SPLR and its baselines, in the inputs' dtype, differentiable.

``solve(a, b, cost, epsilon=η, method=...)`` takes a cost matrix, an ott-jax ``Geometry``
(``PointCloud`` included; its ``ε`` is used) or a balanced ``LinearProblem`` (its ``a, b`` and
``ε``), checks the inputs (finite, positive marginals of equal mass, a positive number for ``ε``,
known options) when they are concrete, runs the chosen solver (each a jit-compiled loop on
:func:`jaxlab.core.iterate.iterate` with the stopping rule ``‖g‖₂ < tol`` of Wang & Qiu, ICML 2025,
Section 5) and returns a :class:`~jaxlab.ot.output.OTOutput`.

Precision follows JAX: the solve computes in the dtype of ``a``, ``b`` and the cost (at least
float32; float64 needs x64 on) and returns that dtype. ``tol=None`` is the paper's ``1e-8`` in
float64 and ``1e-5`` in float32 (:data:`jaxlab.ot.problem.DEFAULT_TOL`); a tolerance the dtype
cannot resolve is refused in one line naming the fix (float64 inputs with ``JAX_ENABLE_X64=1``, or
a larger ``tol``). The paper's claims (``‖g‖ < 1e-8``) are float64 claims: the experiments and the
notebook turn x64 on.

Differentiation: the plan, the potentials and everything formed from them are differentiable in
the cost (and through it in a geometry's points), the marginals and ``ε`` by implicit
differentiation of the dual's optimality conditions (:mod:`jaxlab.ot.implicit`), never through the
iterations. A solve stopped short of ``tol`` keeps ``converged=False`` and, when the flag is
concrete, warns (:class:`~jaxlab.ot.output.NotConvergedWarning`), raises or stays silent as
``unconverged`` asks. Traced calls (``jax.jit``, ``jax.vmap``) skip the input checks and report
``seconds = nan``.

Compilation: a concrete call compiles the solver ahead of time once per (method, settings,
shapes, dtype) and process, and turns on JAX's persistent compilation cache as
``experiments/run.py`` does (:mod:`jaxlab.core.compile_cache`: the user's cache directory;
``JAXLAB_COMPILATION_CACHE`` names another directory or ``off``; a cache directory configured in
JAX itself is left alone), so the first solve of a later process loads the program from disk
instead of compiling it. A first call compiles exactly one program (inputs are converted by numpy,
the plan is formed inside it), and small problems are compiled with options that shorten XLA's
code generation where the running XLA knows them (:func:`compiler_options`). Under an eager
``jax.grad`` the solve inside runs as the same compiled program.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.core.checks import check_positive, compute_dtype, is_traced
from jaxlab.core.compile_cache import enable_compilation_cache
from jaxlab.core.compile_options import compile_lowered, not_refused
from jaxlab.core.errors import ConfigError
from jaxlab.core.timing import time_call
from jaxlab.methods.qn_ot.splr import splr
from jaxlab.methods.qn_ot.ssns import ssns
from jaxlab.ot.implicit import implicit_solution
from jaxlab.ot.lbfgs import lbfgs
from jaxlab.ot.linsolve import LinearSolver
from jaxlab.ot.output import (
    OTOutput,
    RawSolution,
    check_unconverged,
    report_convergence,
    to_output,
)
from jaxlab.ot.problem import (
    check_inputs,
    read_problem,
    resolve_tol,
)
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

# Plans up to this many entries are compiled with XLA CPU's loop emitters instead of its MLIR
# fusion emitters (see compiler_options).
FAST_COMPILE_MAX_ENTRIES = 10_000
FAST_COMPILE_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


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


class _Settings(NamedTuple):
    """What, besides the arrays, one compiled solve depends on (hashable)."""

    method: Method
    max_iter: int
    tol: float
    opts: tuple[tuple[str, Any], ...]

    def describe(self) -> str:
        return f"solve(method={self.method.value!r})"


# How to make an unconverged solve converge, for the warning (every method is a dual solver).
_FIX = "raise max_iter, loosen tol, or increase epsilon"


def _settings(method, tol, max_iter, options, dtype) -> _Settings:
    method = _method(method)
    max_iter = DEFAULT_MAX_ITER[method] if max_iter is None else max_iter
    if isinstance(max_iter, bool) or not (isinstance(max_iter, int | np.integer) and max_iter >= 1):
        raise ConfigError(f"max_iter must be a positive integer, got {max_iter!r}")
    tol = resolve_tol(tol, dtype)
    opts = tuple(sorted(_check_options(method, options).items()))
    return _Settings(method, int(max_iter), tol, opts)


_CACHE: dict[Any, Any] = {}


class CompiledSolve(NamedTuple):
    """A solve ready to run: the AOT-compiled solver and its device inputs.

    Calling it runs the compiled program once and returns its :class:`OTOutput` with
    ``seconds = nan`` (what :mod:`jaxlab.core.timing` times: the solve and its plan, as the
    authors' ``regot`` returns its plan); :meth:`output` fills in the measured seconds.
    """

    compiled: Any
    args: tuple[Any, ...]

    def __call__(self) -> OTOutput:
        return self.compiled(*self.args)

    def output(self, out: OTOutput, seconds: float) -> OTOutput:
        """``out`` with ``seconds`` as its wall time."""
        return out._replace(seconds=seconds)


def compile_solve(
    a: Float[Array, " n"] | None,
    b: Float[Array, " m"] | None,
    cost: Any,
    *,
    epsilon: float | None = None,
    method: str | Method = Method.SPLR,
    tol: float | None = None,
    max_iter: int | None = None,
    init: tuple[Any, Any] | None = None,
    **options: Any,
) -> CompiledSolve:
    """Checks the inputs and compiles the solve without running it.

    Arguments as for :func:`solve` (concrete values only). Compiled programs are cached per
    (method, settings, shapes, dtype), so compiling the same solve again is free.
    """
    cost, a, b, epsilon = read_problem(a, b, cost, epsilon)
    dtype = compute_dtype(a, b, cost)
    settings = _settings(method, tol, max_iter, options, dtype)
    if is_traced(a, b, cost, epsilon, init):
        raise ConfigError("compile_solve needs concrete inputs; call solve() under jax.jit")
    return _compile(settings, cost, a, b, epsilon, init, dtype)


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


def _compile(settings: _Settings, cost, a, b, epsilon, init, dtype) -> CompiledSolve:
    check_inputs(a, b, cost, epsilon, init)
    # Converted by numpy and copied to the device: a jnp conversion of a Python float or of an
    # array of another dtype would compile a one-op program of its own (tens of ms on a first call).
    args = tuple(_to_device(x, dtype) for x in (cost, a, b, epsilon))
    if init is not None:
        init = tuple(_to_device(p, dtype) for p in init)
    # x64 changes the programs' integer types, so it is part of the key.
    key = (settings, init is None, jax.config.jax_enable_x64) + tuple(
        (x.shape, x.dtype) for x in args
    )
    if key not in _CACHE:
        _use_persistent_cache()

        def run(cost, a, b, epsilon, init):
            raw = _dispatch(settings.method, cost, a, b, epsilon, init, settings.tol,
                            settings.max_iter, settings.opts)  # fmt: skip
            # The plan and potentials are formed inside the one compiled program: eagerly,
            # each of their few ops would be a separate compilation on the first call.
            return to_output(raw, cost, epsilon, jnp.nan)

        lowered = jax.jit(run).lower(*args, init)
        options = compiler_options(args[0].shape, args[0].device.platform)
        _CACHE[key] = compile_lowered(lowered, options)
    return CompiledSolve(_CACHE[key], (*args, init))


def compiler_options(cost_shape: tuple[int, ...], platform: str) -> dict[str, Any] | None:
    """XLA options for compiling one solve of a cost of shape ``cost_shape`` on ``platform``.

    On CPU, most of a first call's compile time is XLA's code generation, and its MLIR fusion
    emitters (the default) spend most of that. Its older loop emitters build the same program
    (the same iterations, iterates equal up to rounding) in much less time, but their scatter
    (the ``segment_sum`` of the gathered CG products) and their elementwise passes run slower: on
    idle runs the MNIST pairs and Synthetic I at n = 200 solve faster with the fusion emitters
    (the qn_ot README has the measurements). So the loop emitters serve small plans (at most
    :data:`FAST_COMPILE_MAX_ENTRIES` entries, n = 100), where a solve takes milliseconds and the
    compile is most of a first call; larger plans and other platforms keep XLA's defaults. An
    option the running XLA refused once (JAX 0.11's XLA has no ``xla_cpu_use_fusion_emitters``)
    is no longer asked for. The options apply to this one program only, not to the process.
    """
    if platform == "cpu" and int(np.prod(cost_shape)) <= FAST_COMPILE_MAX_ENTRIES:
        return not_refused(FAST_COMPILE_OPTIONS)
    return None


def _to_device(x: Any, dtype: np.dtype) -> jax.Array:
    """``x`` as a device array of ``dtype``, converted without compiling anything."""
    return jax.device_put(np.asarray(x, dtype))


def _timed(fn: Callable[[], OTOutput]) -> tuple[OTOutput, float]:
    """One blocked call of ``fn``, timed by :mod:`jaxlab.core.timing` (already compiled)."""
    results: list[OTOutput] = []

    def call() -> OTOutput:
        results.append(fn())
        return results[-1]

    timing = time_call(call, repeats=1, warmup=0)
    return results[0], timing.median


def _solve_concrete(settings: _Settings, cost, a, b, epsilon, init, dtype) -> OTOutput:
    compiled = _compile(settings, cost, a, b, epsilon, init, dtype)
    return compiled.output(*_timed(compiled))


def _raw_solve(settings: _Settings, dtype, cost, a, b, epsilon, init) -> RawSolution:
    """The dual solution for :func:`~jaxlab.ot.implicit.implicit_solution`: the compiled program
    when the inputs are concrete (an eager ``jax.grad`` hands them over so), else traced."""
    if is_traced(cost, a, b, epsilon, init):
        return _dispatch(settings.method, cost, a, b, epsilon, init, settings.tol,
                         settings.max_iter, settings.opts)  # fmt: skip
    out = _solve_concrete(settings, cost, a, b, epsilon, init, dtype)
    alpha, beta = (np.asarray(p) for p in out.potentials)
    x = jnp.asarray(np.concatenate([alpha, beta[:-1]]))  # gauge β_m = 0 already holds
    return RawSolution(
        x, out.errors, out.densities, out.n_iter, out.converged, out.hit_max_iter, out.n_evals
    )


def solve(
    a: Float[Array, " n"] | None,
    b: Float[Array, " m"] | None,
    cost: Any,
    *,
    epsilon: float | None = None,
    method: str | Method = Method.SPLR,
    tol: float | None = None,
    max_iter: int | None = None,
    init: tuple[Any, Any] | None = None,
    unconverged: str = "warn",
    **options: Any,
) -> OTOutput:
    """Solves entropic OT ``min <T, M> - η h(T)`` s.t. ``T1 = a, Tᵀ1 = b`` through its dual.

    The dual is Wang & Qiu (ICML 2025), Eq. 3; its solution gives the plan
    ``T = exp((α ⊕ β - M)/η)``.

    Args:
      a, b: marginals (positive, equal mass); None for uniform ones, and None when ``cost`` is a
        ``LinearProblem`` (its own are used).
      cost: cost matrix ``M`` (n × m), an ott-jax ``Geometry`` (``PointCloud`` included; its
        ``epsilon`` is used when ``epsilon`` is None) or a balanced ott-jax ``LinearProblem``.
      epsilon: regularisation ``η``.
      method: one of ``"splr"``, ``"sinkhorn"``, ``"lbfgs"``, ``"newton"``, ``"sparse_newton"``,
        ``"ssns"`` (:class:`Method`).
      tol: stop at ``‖g‖₂ < tol`` (the marginal error); None: ``1e-8`` in float64 (the paper's),
        ``1e-5`` in float32. A tolerance the dtype cannot resolve raises a ConfigError.
      max_iter: iteration budget (default depends on the method).
      init: initial potentials ``(α₀, β₀)`` (warm start); default ``α = 0`` with its exact ``β``.
      unconverged: what a concrete call does when the solve stops short of ``tol``: ``"warn"``
        (:class:`~jaxlab.ot.output.NotConvergedWarning`), ``"raise"``
        (:class:`~jaxlab.ot.output.NotConvergedError`) or ``"ignore"``. Under ``jax.jit`` the
        flag is traced: check ``converged``, or use ``"raise"`` inside
        :func:`jax.experimental.checkify.checkify`.
      **options: solver-specific settings, e.g. ``density_max``, ``shift_max`` for SPLR
        (:func:`options_of` lists them).

    Returns:
      :class:`OTOutput` in the inputs' dtype; ``converged`` is False and ``hit_max_iter`` True
      when the budget ran out. ``matrix`` and ``potentials`` are differentiable (reverse and
      forward mode) in the cost or the geometry's points, ``a``, ``b`` and ``ε`` by implicit
      differentiation (:mod:`jaxlab.ot.implicit`; in ``a, b`` along directions keeping
      ``Σa = Σb``). ``init`` has no derivative (the solution does not depend on it).

    Raises:
      ConfigError: invalid inputs or settings (one line saying what to change).
      NotConvergedError: ``unconverged="raise"`` and the solve stopped short of ``tol``.

    Example:
      >>> import numpy as np
      >>> from jaxlab.methods.qn_ot import solve
      >>> rng = np.random.default_rng(0)
      >>> x, y = rng.random((8, 2)), rng.random((6, 2))
      >>> cost = ((x[:, None] - y[None]) ** 2).sum(-1)  # squared Euclidean
      >>> out = solve(None, None, cost, epsilon=0.05)  # uniform marginals, SPLR
      >>> out.matrix.shape, bool(out.converged)
      ((8, 6), True)
      >>> bool(np.allclose(out.matrix.sum(axis=1), 1 / 8, atol=1e-4))  # T 1 = a
      True
      >>> baseline = solve(None, None, cost, epsilon=0.05, method="sinkhorn")
      >>> bool(np.allclose(out.matrix, baseline.matrix, atol=1e-4))  # the same plan
      True
    """
    check_unconverged(unconverged)
    cost, a, b, epsilon = read_problem(a, b, cost, epsilon)
    dtype = compute_dtype(a, b, cost)
    settings = _settings(method, tol, max_iter, options, dtype)
    if not is_traced(a, b, cost, epsilon, init):
        out = _solve_concrete(settings, cost, a, b, epsilon, init, dtype)
    else:
        if not is_traced(epsilon):
            check_positive("epsilon", epsilon)
        args = tuple(jnp.asarray(x, dtype) for x in (cost, a, b, epsilon))
        if init is not None:
            init = tuple(jnp.asarray(p, dtype) for p in init)
        raw = implicit_solution(partial(_raw_solve, settings, dtype), *args, init)
        out = to_output(raw, args[0], args[3], jnp.nan)
    report_convergence(
        out.converged, out.errors, out.n_iter, unconverged,
        what=settings.describe(), tol=settings.tol, fix=_FIX,
    )  # fmt: skip
    return out
