"""Where a run's start-up time goes: ``python experiments/run.py ... --profile-startup``.

A short run on a CPU spends most of its wall time before and around its first steps: the Python
imports, building the config and the data, and compiling (or loading from the persistent cache) the
init, train and eval programs. :class:`StartupProfile` measures those parts of one real run without
changing it:

* **imports** — the first import of each heavy package (:data:`WATCHED`), timed by a finder at the
  front of ``sys.meta_path``. Times are inclusive: a package imported while another is being
  imported counts in both, as in ``python -X importtime``;
* **phases** — wall time between the marks the runner sets (interpreter start, runner imports,
  experiment import, run, exit);
* **compilation** — JAX's own monitoring events, per program: tracing, lowering to MLIR, and the
  backend compile, which on a persistent-cache hit is only the cache read. The cache hit and miss
  counts show whether a second start recompiled anything.

The report is printed to stderr at the end of the run, so it never mixes with the summary lines.
"""

from __future__ import annotations

import collections
import importlib.abc
import importlib.util
import os
import sys
import time
from typing import Any

__all__ = [
    "GC_THRESHOLD",
    "WATCHED",
    "StartupProfile",
    "process_seconds",
    "raise_gc_threshold",
    "skip_notebook_probes",
]

# Python's cyclic garbage collector runs a collection every 700 net allocations of container objects
# by default; importing JAX, Flax and orbax and tracing the first programs allocate millions, so a
# short run spent a noticeable part of its start-up in collections that found little (the root
# README, "Start-up"). Processes that start runs collect every GC_THRESHOLD instead.
GC_THRESHOLD = 50_000


def raise_gc_threshold() -> None:
    """Sets the collector's first threshold to :data:`GC_THRESHOLD`, keeping the older generations'
    ratios. For a process that starts runs (``experiments/run.py``, its figure helper, the test
    workers); library code leaves the caller's settings alone."""
    import gc

    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


# Packages that import IPython, where it is installed, only to display in a notebook.
_NOTEBOOK_PROBERS = ("flax.", "treescope.")


class _NoNotebookProbe(importlib.abc.MetaPathFinder):
    """Refuses ``import IPython`` to the :data:`_NOTEBOOK_PROBERS` (skip_notebook_probes)."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 (importlib protocol)
        if fullname != "IPython":
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith("importlib"):
            frame = frame.f_back  # the import machinery, between the importer and this finder
        importer = "" if frame is None else frame.f_globals.get("__name__", "")
        if importer.startswith(_NOTEBOOK_PROBERS):
            raise ModuleNotFoundError("IPython is not probed in a script", name=fullname)
        return None


def skip_notebook_probes() -> None:
    """Has Flax and treescope find no IPython, for a process that is a script
    (``experiments/run.py``) and so never inside an IPython shell.

    Importing ``flax.nnx`` imports IPython, where it is installed, twice over: treescope (Flax's
    pretty-printer) for its notebook display functions, and Flax's colour check
    (``flax.nnx.reprlib``) only to ask ``get_ipython()`` whether it runs in a notebook. In a script
    neither is used, and importing IPython and traitlets is a noticeable part of a short run's
    start-up (the root README, "Start-up"). The two are told IPython is not installed, which both
    handle (their displays then say they need IPython); every other importer finds it as usual,
    and where IPython is already imported (``%run`` in a notebook) nothing changes.
    """
    if "IPython" not in sys.modules and not any(
        isinstance(f, _NoNotebookProbe) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _NoNotebookProbe())


# Top-level packages whose first import is timed. jax, then what jaxlab pulls in on top of it.
WATCHED = (
    "jax",
    "flax",
    "optax",
    "orbax",
    "grain",
    "matplotlib",
    "scipy",
    "sklearn",
    "tokenizers",
    "tensorboardX",
    "wandb",
    "ott",
    "pandas",
    "IPython",
)

# JAX's monitoring events for one compilation (jax/_src/dispatch.py and compiler.py).
_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_BACKEND = "/jax/core/compile/backend_compile_duration"
_HIT = "/jax/compilation_cache/cache_hits"
_MISS = "/jax/compilation_cache/cache_misses"


def process_seconds() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None where that is unknown."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class _ImportTimer(importlib.abc.MetaPathFinder):
    """Times the first import of each watched top-level package (inclusive of what it imports)."""

    def __init__(self, watched: tuple[str, ...], seconds: dict[str, float]) -> None:
        self.watched = set(watched)
        self.seconds = seconds
        self.busy: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 (importlib protocol)
        if fullname not in self.watched or fullname in self.busy:
            return None
        self.busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, seconds = spec.loader, self.seconds

        class _Timed(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                start = time.perf_counter()
                try:
                    loader.exec_module(module)
                finally:
                    seconds[fullname] = time.perf_counter() - start

        spec.loader = _Timed()
        return spec


class StartupProfile:
    """Collects import, phase and compilation times of one run and formats them as a table.

    Create it before the heavy imports (``StartupProfile().start()``), call :meth:`mark` after each
    phase, and :meth:`report` at the end.
    """

    def __init__(self, watched: tuple[str, ...] = WATCHED) -> None:
        self.imports: dict[str, float] = {}
        self._finder = _ImportTimer(watched, self.imports)
        self._t0 = time.perf_counter()
        before = process_seconds()
        self.interpreter = before if before is not None else 0.0
        self.phases: list[tuple[str, float]] = []
        self._last = self._t0
        self.compiles: dict[str, dict[str, float]] = collections.defaultdict(
            lambda: collections.defaultdict(float)
        )
        self.cache = collections.Counter()

    def start(self) -> StartupProfile:
        """Installs the import timer (must run before the packages are first imported)."""
        already = [name for name in self._finder.watched if name in sys.modules]
        for name in already:
            self.imports[name] = 0.0  # imported before profiling began: counted in "interpreter"
        sys.meta_path.insert(0, self._finder)
        return self

    def listen_to_jax(self) -> None:
        """Registers listeners for JAX's compile and cache events (call once JAX is importable)."""
        from jax import monitoring  # deferred: the profile is set up before JAX is imported

        def duration(event: str, seconds: float, **kw: Any) -> None:
            kind = {_TRACE: "trace", _LOWER: "lower", _BACKEND: "compile"}.get(event)
            if kind is not None:  # tracing names the function "f", compiling names it "jit(f)"
                name = str(kw.get("fun_name", "?"))
                if name.startswith("jit(") and name.endswith(")"):
                    name = name[4:-1]
                self.compiles[name][kind] += seconds

        def count(event: str, **kw: Any) -> None:
            if event in (_HIT, _MISS):
                self.cache[event.rsplit("_", 1)[-1]] += 1

        monitoring.register_event_duration_secs_listener(duration)
        monitoring.register_event_listener(count)

    def mark(self, phase: str) -> None:
        """Ends ``phase`` now: its time is the wall time since the previous mark."""
        now = time.perf_counter()
        self.phases.append((phase, now - self._last))
        self._last = now

    def report(self, top: int = 8) -> str:
        """The profile as printable lines: phases, imports, compilation per program."""
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        total = self.interpreter + (self._last - self._t0)
        lines = ["start-up profile (seconds, wall):"]
        rows = [("interpreter start (before run.py)", self.interpreter), *self.phases]
        lines += [f"  {name:<40} {sec:7.2f}" for name, sec in rows]
        lines.append(f"  {'total':<40} {total:7.2f}")
        lines.append("first imports (inclusive; nested packages count in their importer too):")
        for name, sec in sorted(self.imports.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {name:<40} {sec:7.2f}")
        sums = {k: sum(p[k] for p in self.compiles.values()) for k in ("trace", "lower", "compile")}
        lines.append(
            f"compilation: {len(self.compiles)} programs; trace {sums['trace']:.2f}, lower "
            f"{sums['lower']:.2f}, backend compile or cache read {sums['compile']:.2f}; "
            f"persistent cache: {self.cache['hits']} hits, {self.cache['misses']} misses"
        )
        ranked = sorted(self.compiles.items(), key=lambda kv: -sum(kv[1].values()))
        for name, parts in ranked[:top]:
            lines.append(
                f"  {name[:40]:<40} {sum(parts.values()):7.2f}  (trace {parts['trace']:.2f}, "
                f"lower {parts['lower']:.2f}, compile {parts['compile']:.2f})"
            )
        return "\n".join(lines)
