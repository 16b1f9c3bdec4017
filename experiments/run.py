"""Runs one jaxlab experiment: ``python experiments/run.py --exp=NAME [--set a.b=v] [--smoke]``.

``--list`` prints one line per experiment (name, then the claim it tests); ``--list-keys`` prints
the config keys of ``--exp`` with their current values. Experiments are the modules of this folder,
found by name. User errors (unknown keys, wrong types, invalid combinations) print one line and exit
with status 2; a run that cannot go on (non-finite loss, damaged checkpoint) exits with status 1.
Re-running the same command on the same ``--workdir`` (default ``runs/NAME``) resumes the run.
JAX's persistent compilation cache is on (``JAXLAB_COMPILATION_CACHE=<dir>|off`` changes it; see
:mod:`jaxlab.core.compile_cache`), so a second start of the same shapes skips most compilation.
Every ``JAXLAB_*`` environment variable is checked first (:mod:`jaxlab.core.environment`).
After a run, the experiment's ``headline`` (the numbers that answer its claim) is printed first.
"""

from __future__ import annotations

import argparse
import atexit
import os
import pathlib
import sys

EXP_DIR = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(EXP_DIR.parent))  # Run from a checkout without installing, too.

# Before the heavy imports, so that --profile-startup can time them.
from jaxlab.core.startup import (  # noqa: E402
    StartupProfile,
    raise_gc_threshold,
    skip_notebook_probes,
)

PROFILE = StartupProfile().start() if "--profile-startup" in sys.argv[1:] else None

from jaxlab.core import experiment, figure_helper  # noqa: E402
from jaxlab.core.compile_cache import enable_compilation_cache  # noqa: E402
from jaxlab.core.config import flat_keys, parse_overrides  # noqa: E402
from jaxlab.core.environment import check_environment  # noqa: E402
from jaxlab.core.errors import ConfigError, RunError, disk_full, is_disk_full  # noqa: E402


def print_headline(headline: dict | None) -> None:
    """Prints an experiment's headline (a flat dict) as aligned ``name  value`` lines."""
    if not headline:
        return
    print("headline:")
    width = max(map(len, headline))
    for name, value in headline.items():
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"  {name:<{width}}  {shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exp", help="experiment name (see --list)")
    parser.add_argument("--list", action="store_true", help="list experiments and their claims")
    parser.add_argument("--list-keys", action="store_true", help="list the config keys of --exp")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set train.steps=100 (repeatable)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, under a minute")
    parser.add_argument("--workdir", help="run directory (default runs/NAME)")
    parser.add_argument(
        "--profile-startup",
        action="store_true",
        help="print where the wall time went (imports, compilation, run) to stderr at the end",
    )
    args = parser.parse_args(argv)
    profile = PROFILE if args.profile_startup else None
    if profile is not None:
        profile.mark("runner imports (jaxlab.core)")

    try:
        check_environment()  # a bad JAXLAB_* value fails here, before anything starts
        if args.list:
            names = experiment.available(EXP_DIR)
            width = max(map(len, names), default=0)
            for name in names:
                print(f"{name:<{width}}  {experiment.claim(EXP_DIR, name)}")
            return 0
        if not args.exp:
            parser.print_usage(sys.stderr)
            print("error: give --exp NAME or --list", file=sys.stderr)
            return 2
        overrides = parse_overrides(args.set)
        if args.list_keys:
            module = experiment.load(EXP_DIR, args.exp)
            _, cfg = experiment.resolve_config(module, overrides, args.smoke)
            for key in flat_keys(cfg):
                value = cfg
                for part in key.split("."):
                    value = getattr(value, part)
                print(f"{key} = {value!r}")
            return 0
        # First, so that the figure helper's imports overlap everything after (figure_helper).
        with figure_helper.drawing():
            enable_compilation_cache()
            summary = experiment.launch(
                EXP_DIR,
                args.exp,
                overrides=overrides,
                smoke=args.smoke,
                workdir=args.workdir,
                profile=profile,
            )
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    except OSError as err:  # a full disk outside the checkpoints, or a file a library could not use
        if is_disk_full(err):
            where = args.workdir or f"runs/{args.exp}"
            print(f"error: {disk_full(where, 'writing the run')}", file=sys.stderr)
            return 1
        if err.filename is None:
            raise
        print(
            f"error: {err.filename}: {err.strerror or err}; fix or move it, then re-run the same "
            "command",
            file=sys.stderr,
        )
        return 1
    print_headline(summary.get("headline"))
    shown = {k: v for k, v in summary.items() if isinstance(v, int | float | str | bool)}
    print("summary:", ", ".join(f"{k}={v}" for k, v in shown.items()))
    print(
        f"full summary: {args.workdir or 'runs/' + args.exp + ('_smoke' if args.smoke else '')}"
        "/summary.json"
    )
    if profile is not None:
        profile.mark("summary printed")
        print(profile.report(), file=sys.stderr)
    return 0


def exit_now(code: int) -> None:
    """Ends the process with ``code`` once the run is over, without Python's finalisation.

    By the time :func:`main` returns, everything the run writes is closed (checkpoints waited
    for, metrics, logs and figures written), and the exit handlers that libraries register (logging,
    wandb, multiprocessing) are run here; what is skipped is the interpreter's teardown of its
    modules and of XLA's objects, a noticeable part of a short run's wall time (the root README,
    "Start-up"). Only the command line ends so; :func:`main` called from Python returns.
    """
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    raise_gc_threshold()  # only the command line: main() called from Python leaves these
    skip_notebook_probes()
    exit_now(main())
