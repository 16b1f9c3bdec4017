"""One learning rate per method from a small grid, chosen on short runs through the seed sweep.

The paper tunes the low-rank methods' learning rates separately (Zhao et al., ICML 2025, App. F);
one shared rate favours whichever method it happens to suit. :func:`choose_rates` trains every
method at every rate of a grid with one seed, usually for a fraction of the comparison's steps,
each as one arm of :func:`jaxlab.core.sweep.sweep` (so a re-run reuses finished grid runs), and
keeps per method the rate with the lowest score. A rate at which a run diverges (the loop's
:class:`~jaxlab.core.errors.RunError` for a non-finite loss, or a non-finite result) scores
+inf and is reported, not fatal, unless every rate of a method diverges.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from jaxlab.core.errors import RunError
from jaxlab.core.sweep import Run, sweep

__all__ = ["choose_rates", "grid_arm", "method_rates"]


def method_rates(rates: Sequence[float], method: str, galore_scale: float) -> tuple[float, ...]:
    """The learning rates ``method`` is trained at when the others get ``rates``.

    GaLore's update of a projected matrix is α·lr times its projected Adam step (Zhao et al.,
    ICML 2024, Algorithm 2; α = ``galore_scale``, 0.25 in their experiments), so GaLore gets
    ``rates`` divided by α: the projected matrices' Adam step sizes α·lr are the other methods' lr,
    while what α does not scale sees the larger rate lr/α, as in GaLore's own recipe (a larger
    rate beside α = 0.25): the decoupled weight decay and the parameters GaLore leaves to plain
    Adam (embeddings, norm scales). Every other method gets ``rates`` unchanged.
    """
    if method != "galore":
        return tuple(rates)
    return tuple(r / galore_scale for r in rates)


def grid_arm(method: str, rate: float) -> str:
    """The sweep arm (sub-workdir prefix) of ``method`` at learning rate ``rate``."""
    return f"{method}_lr{rate:g}"


def choose_rates(
    workdir: str | pathlib.Path,
    methods: Sequence[str],
    rates: Sequence[float],
    seed: int,
    spec: Callable[[str, float, int], Run],
    score: Callable[[dict[str, Any]], float],
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """The best rate of every method and every grid run's score.

    Args:
      workdir: where the grid runs live (``<workdir>/<method>_lr<rate>_seed<seed>``).
      methods, rates: the grid.
      seed: the one seed of the grid runs.
      spec: ``spec(method, rate, seed)`` gives the :class:`~jaxlab.core.sweep.Run` of one point.
      score: lower is better (e.g. the final validation loss) from a run's result.

    Returns:
      ``({method: best rate}, {method: {"<rate>": score}})``; a diverged run scores ``inf``.

    Raises:
      RunError: every rate of some method diverged (lower the grid).
    """
    best, table = {}, {}
    for method in methods:
        scores = {}
        for rate in rates:
            arm = grid_arm(method, rate)
            try:
                run = lambda a, s, m=method, r=rate: spec(m, r, s)  # noqa: E731
                result = sweep(workdir, [arm], (seed,), run)
                value = float(score(result[arm][0]))
            except RunError as err:
                if "non-finite" not in str(err):
                    raise
                value = math.inf
            scores[f"{rate:g}"] = value if math.isfinite(value) else math.inf
        if all(math.isinf(v) for v in scores.values()):
            raise RunError(f"{method} diverged at every learning rate of {list(rates)}; lower them")
        best[method] = float(min(scores, key=scores.get))
        table[method] = scores
    return best, table
