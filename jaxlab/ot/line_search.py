"""Strong-Wolfe line search of Moré & Thuente (1994), as a ``lax.while_loop``.

SPLR (Wang & Qiu, ICML 2025, Algorithm 1, step 4) and the L-BFGS baseline pick the step ``t`` along
``d`` by this search: find ``t`` with::

    φ(t) ≤ φ(0) + c₁ t φ'(0)      and      |φ'(t)| ≤ c₂ |φ'(0)|,          φ(t) = f(x + t d).

Moré & Thuente keep an interval ``[stx, sty]`` known to contain such a ``t`` and pick the next trial
by safeguarded cubic / quadratic / secant interpolation (their Section 4, cases 1-4), working on the
modified function ``ψ(t) = φ(t) - φ(0) - c₁ t φ'(0)`` until a point with ``ψ ≤ 0`` and ``φ' ≥ 0`` is
seen (their "stage 1"). Written here from the paper. A non-finite ``φ(t)`` (``exp`` overflow for a
huge trial step) halves the step towards ``stx``. The search returns the values at the accepted
step, and falls back to the best point seen (``stx``) if it runs out of evaluations without a
sufficient decrease (its ``aux`` is then evaluated again, in one more trip of the loop so that
the compiled program holds one traced evaluation: the loop carries only the last trial's
``aux``, since selecting a plan-sized array per trial costs more), so the objective never
increases beyond rounding (near the optimum, where
the change of ``φ`` is below its rounding error, values within ten ulps of ``φ(0)`` are replaced by
the trapezoid estimate from the derivatives, in the spirit of Hager & Zhang's approximate Wolfe).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["LineSearchResult", "more_thuente"]

XTRAPL, XTRAPU = 1.1, 4.0  # extrapolation bounds of the interval before bracketing
XTOL = 1e-12


class LineSearchResult(NamedTuple):
    """Accepted step, objective, gradient, auxiliary output (the plan) and evaluation count."""

    step: Any
    value: Any
    grad: Any
    aux: Any
    n_evals: Any
    wolfe: Any  # True when both strong-Wolfe conditions hold at the returned step


def _cubic_min(u, fu, du, v, fv, dv):
    """Minimiser of the cubic interpolating ``(u, fu, du)`` and ``(v, fv, dv)`` (may be nan)."""
    theta = 3.0 * (fu - fv) / (v - u) + du + dv
    s = jnp.maximum(jnp.maximum(jnp.abs(theta), jnp.abs(du)), jnp.abs(dv))
    gamma = s * jnp.sqrt(jnp.maximum(0.0, (theta / s) ** 2 - (du / s) * (dv / s)))
    gamma = jnp.where(v < u, -gamma, gamma)
    p = (gamma - du) + theta
    q = ((gamma - du) + gamma) + dv
    return u + (p / q) * (v - u), gamma, p / q


def _step(stx, fx, dx, sty, fy, dy, stp, fp, dp, brackt, stpmin, stpmax):
    """One safeguarded trial-step update (Moré & Thuente, Section 4, cases 1-4)."""
    sgnd = dp * jnp.sign(dx)
    secant = stp + (dp / (dp - dx)) * (stx - stp)
    # Case 1: higher value; the minimum is bracketed.
    c1_cubic, _, _ = _cubic_min(stx, fx, dx, stp, fp, dp)
    c1_quad = stx + (dx / ((fx - fp) / (stp - stx) + dx)) / 2.0 * (stp - stx)
    f1 = jnp.where(
        jnp.abs(c1_cubic - stx) < jnp.abs(c1_quad - stx),
        c1_cubic,
        c1_cubic + (c1_quad - c1_cubic) / 2.0,
    )
    # Case 2: derivatives of opposite sign; bracketed.
    c2_cubic, _, _ = _cubic_min(stp, fp, dp, stx, fx, dx)
    f2 = jnp.where(jnp.abs(c2_cubic - stp) > jnp.abs(secant - stp), c2_cubic, secant)
    # Case 3: lower value, same sign, derivative decreasing in magnitude.
    c3_cubic, gamma3, r3 = _cubic_min(stp, fp, dp, stx, fx, dx)
    c3_cubic = jnp.where((r3 < 0) & (gamma3 != 0), c3_cubic, jnp.where(stp > stx, stpmax, stpmin))
    near = jnp.where(jnp.abs(c3_cubic - stp) < jnp.abs(secant - stp), c3_cubic, secant)
    near = jnp.where(
        stp > stx,
        jnp.minimum(stp + 0.66 * (sty - stp), near),
        jnp.maximum(stp + 0.66 * (sty - stp), near),
    )
    far = jnp.where(jnp.abs(c3_cubic - stp) > jnp.abs(secant - stp), c3_cubic, secant)
    far = jnp.clip(far, stpmin, stpmax)
    f3 = jnp.where(brackt, near, far)
    # Case 4: lower value, same sign, derivative not decreasing.
    c4_cubic, _, _ = _cubic_min(stp, fp, dp, sty, fy, dy)
    f4 = jnp.where(brackt, c4_cubic, jnp.where(stp > stx, stpmax, stpmin))

    case1 = fp > fx
    case2 = ~case1 & (sgnd < 0)
    case3 = ~case1 & ~case2 & (jnp.abs(dp) < jnp.abs(dx))
    stpf = jnp.where(case1, f1, jnp.where(case2, f2, jnp.where(case3, f3, f4)))
    brackt = brackt | case1 | case2
    # Interval update.
    new_sty = jnp.where(case1, stp, jnp.where(sgnd < 0, stx, sty))
    new_fy = jnp.where(case1, fp, jnp.where(sgnd < 0, fx, fy))
    new_dy = jnp.where(case1, dp, jnp.where(sgnd < 0, dx, dy))
    new_stx = jnp.where(case1, stx, stp)
    new_fx = jnp.where(case1, fx, fp)
    new_dx = jnp.where(case1, dx, dp)
    return new_stx, new_fx, new_dx, new_sty, new_fy, new_dy, stpf, brackt


class _State(NamedTuple):
    stx: Any
    fx: Any
    dx: Any
    sty: Any
    fy: Any
    dy: Any
    stp: Any
    brackt: Any
    stage: Any
    width: Any
    width1: Any
    stmin: Any
    stmax: Any
    stpmax: Any
    n_evals: Any
    done: Any
    # values at the last evaluated step and at stx
    f: Any
    g: Any
    aux: Any
    wolfe: Any
    best_f: Any
    best_g: Any
    fetched: Any  # the fallback's aux (at stx) has been evaluated


def more_thuente(
    fun,
    x,
    d,
    f0,
    g0,
    aux0,
    step0,
    *,
    c1: float = 1e-4,
    c2: float = 0.9,
    max_evals: int = 30,
    step_max: float = 1e10,
    along=None,
) -> LineSearchResult:
    """Strong-Wolfe step along ``d`` from ``x`` (Moré & Thuente 1994, Algorithm "dcsrch").

    Args:
      fun: ``x ↦ (f(x), ∇f(x), aux)``; ``aux`` (e.g. the plan) is carried for the caller.
      x, d: point and descent direction (``∇f(x)ᵀd < 0``).
      f0, g0, aux0: ``f(x)``, ``∇f(x)`` and ``aux`` at ``x``.
      step0: first trial step.
      c1, c2: sufficient-decrease and curvature constants.
      max_evals: evaluation budget.
      step_max: largest step allowed.
      along: optional ``t ↦ fun(x + t d)``, for a caller that evaluates a point on the line more
        cheaply from ``t`` than from the point (SPLR rescales the plan at ``x``); None calls
        ``fun(x + t d)``.
    """
    if along is None:

        def along(t):
            return fun(x + t * d)

    dg0 = g0 @ d
    gtest = c1 * dg0
    dtype = f0.dtype
    fuzz = 10.0 * jnp.finfo(dtype).eps * jnp.abs(f0)
    zero = jnp.zeros((), dtype)
    step0 = jnp.asarray(step0, dtype)
    init = _State(
        stx=zero,
        fx=f0,
        dx=dg0,
        sty=zero,
        fy=f0,
        dy=dg0,
        stp=step0,
        brackt=jnp.array(False),
        stage=jnp.array(1),
        width=jnp.asarray(step_max, dtype),
        width1=jnp.asarray(2.0 * step_max, dtype),
        stmin=zero,
        stmax=step0 + XTRAPU * step0,
        stpmax=jnp.asarray(step_max, dtype),
        n_evals=jnp.array(0),
        done=jnp.array(False),
        f=f0,
        g=g0,
        aux=aux0,
        wolfe=jnp.array(False),
        best_f=f0,
        best_g=g0,
        fetched=jnp.array(False),
    )

    def use_last(st):
        # When done, st.stp is the step of the last evaluation; otherwise fall back to stx.
        ok = st.done & jnp.isfinite(st.f) & ((st.f <= f0 + st.stp * gtest) | st.wolfe)
        return ok & (st.f <= f0 + fuzz)

    def cond(st):
        searching = ~st.done & (st.n_evals < max_evals)
        # One more trip evaluates the fallback's aux at stx (at stx = 0 too, where it is aux0
        # again): the loop carries only the last trial's aux (selecting a plan-sized array per
        # trial costs more), and evaluating it in the loop's own body keeps one traced
        # evaluation in the compiled program, not two. The result's aux is then always the
        # loop's: a select between it and aux0 after the loop would keep aux0 alive across the
        # loop, and XLA would copy the plan twice per call (into the loop and out of the select).
        return searching | (~use_last(st) & ~st.fetched)

    def body(st):
        fetch = st.done | (st.n_evals >= max_evals)  # the search is over: evaluate at stx
        stp = st.stp
        f_true, g, aux = along(jnp.where(fetch, st.stx, stp))
        dg = g @ d
        finite = jnp.isfinite(f_true) & jnp.all(jnp.isfinite(g))
        # Near the optimum the change of φ is below its rounding error and the raw values would
        # mislead the interpolation; within ten ulps of φ(0) use the trapezoid estimate
        # φ(0) + t (φ'(0) + φ'(t)) / 2, which is exact up to O(t³) (Hager & Zhang 2005, §4).
        flat = jnp.abs(f_true - f0) <= fuzz
        f = jnp.where(flat, f0 + 0.5 * stp * (dg0 + dg), f_true)
        ftest = f0 + stp * gtest
        stage = jnp.where((st.stage == 1) & (f <= ftest) & (dg >= 0), 2, st.stage)
        wolfe = finite & (f <= ftest) & (jnp.abs(dg) <= c2 * (-dg0))
        stuck = st.brackt & ((stp <= st.stmin) | (stp >= st.stmax))
        stuck |= st.brackt & (st.stmax - st.stmin <= XTOL * st.stmax)
        stuck |= (stp >= st.stpmax) & (f <= ftest) & (dg <= gtest)
        done = wolfe | (finite & stuck)

        # Stage 1 works on the modified function ψ (Moré & Thuente, Section 3).
        modified = (stage == 1) & (f <= st.fx) & (f > ftest)
        shift = jnp.where(modified, gtest, 0.0)
        stx, fx, dx, sty, fy, dy, stpf, brackt = _step(
            st.stx,
            st.fx - st.stx * shift,
            st.dx - shift,
            st.sty,
            st.fy - st.sty * shift,
            st.dy - shift,
            stp,
            f - stp * shift,
            dg - shift,
            st.brackt,
            st.stmin,
            st.stmax,
        )
        fx, dx = fx + stx * shift, dx + shift
        fy, dy = fy + sty * shift, dy + shift
        # Bisection safeguard when the bracket does not shrink fast enough.
        wide = brackt & (jnp.abs(sty - stx) >= 0.66 * st.width1)
        stpf = jnp.where(wide, stx + 0.5 * (sty - stx), stpf)
        width1 = jnp.where(brackt, st.width, st.width1)
        width = jnp.where(brackt, jnp.abs(sty - stx), st.width)
        stmin = jnp.where(brackt, jnp.minimum(stx, sty), stpf + XTRAPL * (stpf - stx))
        stmax = jnp.where(brackt, jnp.maximum(stx, sty), stpf + XTRAPU * (stpf - stx))
        stpf = jnp.clip(stpf, 0.0, st.stpmax)
        bad = brackt & ((stpf <= stmin) | (stpf >= stmax) | (stmax - stmin <= XTOL * stmax))
        stpf = jnp.where(bad, stx, stpf)
        moved = stx == stp  # stx moved to the trial: remember its gradient and aux
        new = _State(
            stx,
            fx,
            dx,
            sty,
            fy,
            dy,
            jnp.where(done, stp, stpf),
            brackt,
            stage,
            width,
            width1,
            stmin,
            stmax,
            st.stpmax,
            st.n_evals + 1,
            done,
            f_true,
            g,
            aux,
            wolfe,
            jnp.where(moved, f_true, st.best_f),
            jnp.where(moved, g, st.best_g),
            st.fetched,
        )
        # A non-finite value: shrink towards stx and cap the step there.
        shrunk = st._replace(
            stp=st.stx + 0.5 * (stp - st.stx),
            stpmax=stp,
            n_evals=st.n_evals + 1,
            stmax=jnp.minimum(st.stmax, stp),
        )
        # ``aux`` (the plan: the one large array here) is never selected: after a non-finite
        # value the search is not done, so the aux of that trial is never returned.
        merged = _tree_where(finite, new._replace(aux=None), shrunk._replace(aux=None))
        fetched = st._replace(aux=None, n_evals=st.n_evals + 1, fetched=jnp.array(True))
        return _tree_where(fetch, fetched, merged)._replace(aux=aux)

    st = lax.while_loop(cond, body, init)
    last = use_last(st)
    step = jnp.where(last, st.stp, st.stx)
    return LineSearchResult(
        step=step,
        value=jnp.where(last, st.f, st.best_f),
        grad=jnp.where(last, st.g, st.best_g),
        aux=st.aux,
        n_evals=st.n_evals,
        wolfe=st.wolfe & last,
    )


def _tree_where(pred, a, b):
    return jax.tree.map(lambda u, v: jnp.where(pred, u, v), a, b)
