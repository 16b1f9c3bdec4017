"""Partial optimal transport: move exactly ``mass`` between sub-probability marginals.

The problem (Chapel, Alaya & Gasso, NeurIPS 2020, Eq. 1; Naram et al., ICML 2025, Sec. 3, the
``α``-partial transport of WARMPOT) is

    min_π ⟨π, M⟩ (- ε H(π))   s.t.  π ≥ 0,  π 1 ≤ a,  πᵀ 1 ≤ b,  1ᵀ π 1 = m,

with ``0 < m ≤ min(‖a‖₁, ‖b‖₁)``. It is *not* ott-jax's unbalanced transport (``tau_a/tau_b``
relax the marginals with a KL penalty and the mass is free); here the mass is a hard constraint.

* **Entropic** (``epsilon > 0``): the KL projection of ``K = exp(-M/ε)`` onto the intersection of
  the three convex sets, by Dykstra's algorithm with Bregman (KL) projections (Benamou et al.,
  SIAM J. Sci. Comput. 2015, Sec. 5.1 and Prop. 6). The rows-``≤ a`` and columns-``≤ b`` sets are
  not affine, so each keeps a Dykstra correction; every projection and correction is a row, column
  or scalar scaling of ``K``, so the iterate is kept in the log domain as ``log π = R_i + C_j -
  M_ij/ε`` and never under- or overflows. POT 0.9.7's ``entropic_partial_wasserstein`` (both its
  multiplicative default and ``method="sinkhorn_log"``, which is the WARMPOT authors'
  ``entropic_partial_wasserstein_logscale`` in ``sinkhorn.py``) runs the same Dykstra cycle but
  keeps its three corrections as full ``n × m`` matrices, one per set, the mass set's included
  (there it is a constant that the next mass scaling undoes); it starts from ``K`` scaled to mass
  ``m``, checks the Frobenius change of the plan every tenth cycle against ``stopThr`` (default
  ``1e-100``: by default it runs its ``numItermax = 1000`` cycles). On every problem in the tests
  the two reach the same plan.
* **Exact** (``epsilon=None``): the dummy-point augmentation of Chapel et al. (2020, Prop. 1): add
  a dummy source of mass ``‖b‖₁ - m`` and a dummy target of mass ``‖a‖₁ - m``, zero cost to and from
  them and a cost ``A > 2 max|M|`` between the two dummies, and solve that *balanced* problem
  exactly; the real block of its plan is the partial plan. The balanced problem is solved by POT's
  network simplex (``ot.emd``, C++, a main dependency) through ``jax.pure_callback`` in float64
  on the host, its plan cast back to the inputs' dtype; its result code gives ``converged``, and
  its pivot budget scales with the problem (POT's default of 100,000 pivots is a constant). The
  tests compare the plan with scipy's HiGHS on the original partial LP and with POT's own
  ``partial_wasserstein``.

Both return a :class:`PartialOTOutput` in the inputs' dtype (at least float32; the entropic
``tol`` defaults and is checked per dtype as in :mod:`.problem`). The cost may be an ott-jax
``Geometry`` (its ``ε`` then selects the entropic problem) or a balanced ``LinearProblem`` (its
``a, b``). The plan is a constant for gradients (WARMPOT, Sec. 5, treats π as fixed when
differentiating the loss), so ``cost`` = ``⟨stop_gradient(π), M⟩`` has gradient ``π`` with respect
to ``M``: the envelope-theorem gradient of the exact value. Differentiating with respect to ``a``,
``b``, ``mass`` or ``epsilon`` raises a one-line ConfigError instead of a silent zero. An
unconverged solve warns, raises or stays silent as ``unconverged`` asks (:mod:`jaxlab.ot.output`).
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core.checks import check_positive, compute_dtype, is_traced
from jaxlab.core.errors import ConfigError
from jaxlab.core.iterate import below, iterate
from jaxlab.ot.output import check_unconverged, report_convergence
from jaxlab.ot.problem import (
    check_arrays,
    read_problem,
    resolve_tol,
)

__all__ = ["PartialOTOutput", "check_partial_inputs", "partial_ot"]


class PartialOTOutput(NamedTuple):
    """Result of a partial-OT solve.

    Attributes:
      matrix: the plan π (n × m), a constant for gradients.
      cost: ``⟨π, M⟩`` (differentiable in ``M`` with π fixed).
      mass: the transported mass ``1ᵀ π 1``.
      row_error: ``‖(π 1 - a)₊‖₁``, how much the rows exceed ``a``.
      column_error: ``‖(πᵀ 1 - b)₊‖₁``.
      mass_error: ``|1ᵀ π 1 - m|``.
      errors: the driver's trace (entropic: the KKT residual after each Dykstra cycle, NaN
        past ``n_iter``; exact: two entries, the feasibility error of the empty plan, ``m``,
        and of the network simplex's plan).
      n_iter: Dykstra cycles (entropic); exact: network-simplex solves, 1 (0 when the input
        admits no plan). POT's network simplex does not report its pivot count.
      converged: the entropic stopping rule passed on a finite value / the network simplex
        reported an optimal basis (result code ``OPTIMAL``) and the plan is finite.
    """

    matrix: Float[Array, "n m"]
    cost: Float[Array, ""]
    mass: Float[Array, ""]
    row_error: Float[Array, ""]
    column_error: Float[Array, ""]
    mass_error: Float[Array, ""]
    errors: Float[Array, " iters"]
    n_iter: Int[Array, ""]
    converged: Bool[Array, ""]

    @property
    def error(self) -> Float[Array, ""]:
        """Total feasibility error ``row_error + column_error + mass_error``."""
        return self.row_error + self.column_error + self.mass_error


def check_partial_inputs(a, b, cost, mass, epsilon) -> None:
    """Raises a one-line ConfigError for inputs partial OT cannot take (concrete values only).

    Needs an ``(n, m)`` finite cost, finite non-negative marginals of matching lengths, ``0 < mass
    ≤ min(‖a‖₁, ‖b‖₁)`` and ``epsilon`` None or a finite positive number.
    """
    if epsilon is not None:
        check_positive("epsilon", epsilon)
    check_positive("mass", mass)
    a, b, cost = check_arrays(a, b, cost)
    if np.any(a < 0) or np.any(b < 0):
        raise ConfigError("marginals a and b must be non-negative")
    if epsilon is not None and (np.any(a == 0) or np.any(b == 0)):
        raise ConfigError("entropic partial OT needs positive a and b; drop zero-mass points")
    top = min(a.sum(), b.sum())
    if float(mass) > top * (1 + 1e-6):
        raise ConfigError(f"mass {float(mass):.6g} exceeds min(sum a, sum b) = {top:.6g}; lower it")


def _feasibility(pi, a, b, mass):
    rows, cols = pi.sum(1), pi.sum(0)
    row_err = jnp.sum(jnp.maximum(rows - a, 0.0))
    col_err = jnp.sum(jnp.maximum(cols - b, 0.0))
    return row_err, col_err, jnp.abs(pi.sum() - mass)


def _pack(pi, cost, a, b, mass, errors, n_iter, converged) -> PartialOTOutput:
    pi = jax.lax.stop_gradient(pi)
    row_err, col_err, mass_err = _feasibility(pi, a, b, mass)
    return PartialOTOutput(
        pi, jnp.sum(pi * cost), pi.sum(), row_err, col_err, mass_err, errors, n_iter, converged
    )


def _kkt(rows, cols, q_row, q_col, a, b):
    """KKT residual of the entropic problem at the end of a Dykstra cycle.

    Dykstra keeps ``log π = log K - q_row ⊕ q_col + const`` (the corrections are the multipliers
    ``u, v ≥ 0`` of the two inequality constraints), and the mass is exact after the cycle, so π is
    optimal iff it is feasible and complementary: ``u_i > 0`` only on tight rows, ``v_j > 0`` only
    on tight columns. The residual is the excess ``‖(π1 - a)₊‖₁ + ‖(πᵀ1 - b)₊‖₁`` plus the slackness
    ``Σ_i (1 - e^{-u_i}) |a_i - (π1)_i| + Σ_j (1 - e^{-v_j}) |b_j - (πᵀ1)_j|``. (The change of π
    alone is no test: a uniform column correction is undone by the mass scaling, so π can stand
    still while the corrections still have to decay.)
    """
    excess = jnp.sum(jnp.maximum(rows - a, 0.0)) + jnp.sum(jnp.maximum(cols - b, 0.0))
    slack = jnp.sum(-jnp.expm1(-q_row) * jnp.abs(a - rows))
    slack = slack + jnp.sum(-jnp.expm1(-q_col) * jnp.abs(b - cols))
    return excess + slack


class _Dykstra(NamedTuple):
    row: jnp.ndarray  # R (n): log row scaling, the mass scaling folded in
    col: jnp.ndarray  # C (m): log column scaling
    q_row: jnp.ndarray  # log Dykstra correction of the rows-≤-a set (≥ 0)
    q_col: jnp.ndarray  # log Dykstra correction of the columns-≤-b set (≥ 0)


def _entropic(cost, a, b, mass, epsilon, tol, max_iter) -> PartialOTOutput:
    # With the mass fixed, KL(π | cK) = KL(π | K) - m log c + const: scaling K changes nothing, so
    # K is scaled to max 1 and never overflows (costs may be negative, ε small).
    log_k = -cost / epsilon
    log_k = log_k - jnp.max(log_k)
    log_a, log_b, log_m = jnp.log(a), jnp.log(b), jnp.log(mass)

    def row_lse(row, col):
        return row + logsumexp(log_k + col[None, :], axis=1)

    def col_lse(row, col):
        return col + logsumexp(log_k + row[:, None], axis=0)

    def cycle(k, st: _Dykstra):
        # Dykstra on C1 = {π1 ≤ a}: undo the last correction, project, store the new correction.
        row = st.row + st.q_row
        lse = row_lse(row, st.col)
        shrink = jnp.minimum(0.0, log_a - lse)
        row, q_row = row + shrink, -shrink
        # C2 = {πᵀ1 ≤ b}.
        col = st.col + st.q_col
        lse = col_lse(row, col)
        shrink = jnp.minimum(0.0, log_b - lse)
        col, q_col = col + shrink, -shrink
        # C3 = {1ᵀπ1 = m} is affine: the Bregman projection is a scalar scaling, no correction.
        row = row + (log_m - logsumexp(col_lse(row, col)))
        rows, cols = jnp.exp(row_lse(row, col)), jnp.exp(col_lse(row, col))
        return _Dykstra(row, col, q_row, q_col), _kkt(rows, cols, q_row, q_col, a, b)

    n, m = cost.shape
    zeros_n, zeros_m = jnp.zeros(n, cost.dtype), jnp.zeros(m, cost.dtype)
    start = _Dykstra(zeros_n, zeros_m, zeros_n, zeros_m)
    # The start is K itself; were it feasible it would be its own projection (the solution), so its
    # feasibility error is the right starting value (NaN when ε or M is not finite).
    first = sum(_feasibility(jnp.exp(log_k), a, b, mass))
    it = iterate(cycle, start, first, max_iter=max_iter, stop=below(tol))
    st = it.state
    pi = jnp.exp(st.row[:, None] + st.col[None, :] + log_k)
    return _pack(pi, cost, a, b, mass, it.trace, it.n_iter, it.converged)


def pivot_budget(n: int, m: int) -> int:
    """The network simplex's pivot budget for an ``n × m`` partial problem (augmented to
    ``(n + 1) × (m + 1)``): its number of arcs, at least POT's default of 100,000.

    POT's default does not grow with the problem, so a large enough one stops before optimality;
    the pivots a solve needs grow with the problem's size far more slowly than its arcs (on the
    problems of ``partial_ot_bench``), so this bound only stops a solve that cycles.
    """
    return max(100_000, (n + 1) * (m + 1))


def _emd_host(cost, a, b, mass):
    """The augmented balanced problem solved exactly by POT's network simplex, on the host.

    Numpy in (any float dtype), numpy out: the ``(n, m)`` plan in float64, ``converged`` and the
    number of network-simplex solves (1; 0 when the input admits no plan).
    """
    import ot  # a main dependency; its import is slow, so only an exact solve pays for it

    cost, a, b, mass = (np.asarray(x, np.float64) for x in (cost, a, b, mass))
    n, m = cost.shape
    # Under jit the eager checks did not run: an input no plan can satisfy (non-finite values,
    # negative weights, a mass outside (0, min(‖a‖₁, ‖b‖₁)]) gives a NaN plan, not converged.
    finite = all(np.all(np.isfinite(x)) for x in (cost, a, b, mass))
    if (
        not finite
        or a.min() < 0
        or b.min() < 0
        or not 0 < mass <= min(a.sum(), b.sum()) * (1 + 1e-6)
    ):
        return np.full((n, m), np.nan), np.asarray(False), np.asarray(0, np.int32)
    # Chapel et al. (2020), Prop. 1: dummies of masses ‖b‖₁ - m and ‖a‖₁ - m (clipped at 0 for a
    # mass at most rounding above the smaller total), and A > 2 max|M| between them.
    big = 2.0 * np.abs(cost).max() + 1.0
    aug = np.zeros((n + 1, m + 1))
    aug[:n, :m], aug[n, m] = cost, big
    a_ext = np.append(a, max(b.sum() - mass, 0.0))
    b_ext = np.append(b, max(a.sum() - mass, 0.0))
    with warnings.catch_warnings():
        # POT warns on a non-optimal result code; it is reported through `converged` instead.
        warnings.simplefilter("ignore", UserWarning)
        plan, log = ot.emd(
            a_ext,
            b_ext,
            aug,
            numItermax=pivot_budget(n, m),
            log=True,
            center_dual=False,
            check_marginals=False,  # balanced by construction: both sides sum to ‖a‖₁ + ‖b‖₁ - m
        )
    ok = log["result_code"] == 1  # OPTIMAL in POT's network simplex
    pi = np.maximum(np.asarray(plan)[:n, :m], 0.0)
    return pi, np.asarray(ok), np.asarray(1, np.int32)


def _exact(cost, a, b, mass) -> PartialOTOutput:
    # JAX converts a callback's inputs and outputs with the x64 setting of the thread that runs
    # it, not the caller's scoped `jax.enable_x64`: when XLA ran the callback on a worker thread,
    # float64 inputs arrived as float32 and a float64 plan failed the call. 32-bit words pass
    # unchanged in either mode, so every float crosses as its raw words (a trailing axis of 2 in
    # float64), bitcast on each side.
    dtype = np.dtype(cost.dtype)
    words = dtype.itemsize // 4

    def to_words(x):
        return jax.lax.bitcast_convert_type(jax.lax.stop_gradient(x), jnp.uint32)

    def from_words(raw, shape):
        return np.ascontiguousarray(raw).view(dtype).reshape(shape)

    n, m = cost.shape
    raw_plan = (n, m) if words == 1 else (n, m, words)
    shapes = (
        jax.ShapeDtypeStruct(raw_plan, jnp.uint32),
        jax.ShapeDtypeStruct((), jnp.bool_),
        jax.ShapeDtypeStruct((), jnp.int32),
    )

    def host(cost_w, a_w, b_w, mass_w):
        x = (
            from_words(w, s)
            for w, s in zip(
                (cost_w, a_w, b_w, mass_w), (cost.shape, a.shape, b.shape, ()), strict=True
            )
        )
        pi, ok, runs = _emd_host(*x)
        raw = np.ascontiguousarray(pi, dtype).view(np.uint32).reshape(raw_plan)
        return raw, np.asarray(ok, np.bool_), np.asarray(runs, np.int32)

    args = [to_words(jnp.asarray(x, dtype)) for x in (cost, a, b, mass)]
    raw, ok, runs = jax.pure_callback(host, shapes, *args, vmap_method="sequential")
    pi = jax.lax.bitcast_convert_type(raw, dtype)
    err = sum(_feasibility(pi, a, b, mass))
    # errors[n_iter] is the reported one: the empty plan's error (the mass) before the solve.
    errors = jnp.stack([mass, err])
    return _pack(pi, cost, a, b, mass, errors, runs, ok & jnp.isfinite(err))


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _held_fixed(x, name: str):
    """``x``; differentiating through it raises a one-line ConfigError naming ``name``."""
    return x


@_held_fixed.defjvp
def _held_fixed_jvp(name, primals, tangents):
    raise ConfigError(
        f"partial_ot is not differentiable with respect to {name}: its plan is held fixed for "
        "gradients (WARMPOT, Naram et al. 2025, Sec. 5), so only its cost <pi, M> has a gradient "
        "(in M); for a plan differentiable in a, b and epsilon use jaxlab.methods.qn_ot.solve"
    )


def partial_ot(
    a: Float[Array, " n"] | None,
    b: Float[Array, " m"] | None,
    cost: Any,
    *,
    mass,
    epsilon=None,
    tol: float | None = None,
    max_iter: int = 2000,
    unconverged: str = "warn",
) -> PartialOTOutput:
    """Partial transport of ``mass`` between ``a`` and ``b`` under ``cost`` (entropic or exact).

    Args:
      a: source weights (n,), non-negative; the rows of π sum to at most ``a``. None: uniform
        (and None when ``cost`` is a ``LinearProblem``).
      b: target weights (m,), non-negative; the columns of π sum to at most ``b``.
      cost: cost matrix ``M`` (n × m), an ott-jax ``Geometry`` (its ``ε`` is used when
        ``epsilon`` is None: pass ``geom.cost_matrix`` for the exact problem) or a balanced
        ``LinearProblem`` (its ``a``, ``b`` and ``ε``).
      mass: total mass ``m`` to move, ``0 < m ≤ min(‖a‖₁, ‖b‖₁)``.
      epsilon: entropic regularisation ``ε``; None (with a matrix) solves the exact problem.
      tol: entropic only: stop when the KKT residual (feasibility excess + complementary
        slackness, see :func:`_kkt`) after a Dykstra cycle is below ``tol``; None: ``1e-8`` in
        float64, ``1e-5`` in float32 (:data:`~jaxlab.ot.problem.DEFAULT_TOL`); a tolerance the
        dtype cannot resolve raises a ConfigError.
      max_iter: entropic only: the cycle budget.
      unconverged: ``"warn"``, ``"raise"`` or ``"ignore"`` when a concrete solve stops without
        converging (:func:`~jaxlab.ot.output.report_convergence`; under ``jax.jit`` check
        ``converged``).

    Returns:
      A :class:`PartialOTOutput` in the dtype of ``a``, ``b`` and the cost (at least float32);
      jit-able (the exact solve is a host callback to POT's ``ot.emd``).

    Raises:
      ConfigError: on concrete bad input (see :func:`check_partial_inputs`), or when
        differentiated with respect to ``a``, ``b``, ``mass`` or ``epsilon``.
    """
    check_unconverged(unconverged)
    cost, a, b, epsilon = read_problem(a, b, cost, epsilon, require_epsilon=False)
    dtype = compute_dtype(a, b, cost)
    if epsilon is not None:
        tol = resolve_tol(tol, dtype)
    if not is_traced(a, b, cost, mass, epsilon):
        check_partial_inputs(a, b, cost, mass, epsilon)
    cost = jnp.asarray(cost, dtype)
    named = ((a, "a"), (b, "b"), (mass, "mass"))
    a, b, mass = (_held_fixed(jnp.asarray(x, dtype), name) for x, name in named)
    if epsilon is None:
        out = _exact(cost, a, b, mass)
        what = "partial_ot(epsilon=None)"
        fix = (
            "check that 0 < mass <= min(sum a, sum b) and the cost is finite (a valid input that "
            "fails ran past jaxlab.ot.partial.pivot_budget pivots of POT's network simplex)"
        )
    else:
        what = "partial_ot" if is_traced(epsilon) else f"partial_ot(epsilon={float(epsilon):g})"
        epsilon = _held_fixed(jnp.asarray(epsilon, dtype), "epsilon")
        inputs = [jax.lax.stop_gradient(x) for x in (cost, a, b, mass, epsilon)]
        out = _entropic(*inputs, tol, max_iter)
        out = out._replace(cost=jnp.sum(out.matrix * cost))
        fix = "raise max_iter, loosen tol, or increase epsilon"
    report_convergence(
        out.converged, out.errors, out.n_iter, unconverged, what=what, tol=tol, fix=fix
    )
    return out
