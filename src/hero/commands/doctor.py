"""`hero doctor`: check the home before stories run (:mod:`hero.doctor`), a line each.

Exit 0 when nothing failed (warnings allowed), 1 when a check failed, 2 when the
configuration does not load (a failed line too, after which the checks that need no
configuration still run) or for a bad command line: 2 is a configuration error, as for every
command (see hero.errors). In a `hero worker`'s home, or with --worker, the checks are what
a worker needs (:func:`hero.doctor.worker_checks`).
"""

from __future__ import annotations

import argparse
import math

from hero.commands import CommandLineError, Subparsers, home, home_option, reader_gone
from hero.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        parents=[home_option()],
        help="check the configuration, models, git, sandbox, remotes and disk before a run",
        description="Check what stories need, one line each (ok, warn or FAIL, with the fix): "
        "the configuration loads; git is new enough; the target repository and its base ref; "
        "the sandbox works; ripgrep; free disk; a USD budget's prices; then one tiny request with a tool to each "
        "configured role's model (endpoint, key, model name, tool calling); the push remote "
        "(with github or engine: celery); the GitHub token's scopes; Redis (engine: celery). "
        "Exit 1 when a check failed, 2 when the configuration does not load. --quick leaves out everything that goes over the "
        "network (models, remote, GitHub, Redis): what `hero watch` and `hero worker` check "
        "at start. In a `hero worker`'s home (engine: celery, no target_repo of its own; "
        "--worker makes any home one) it checks what a worker needs and nothing else: "
        "Celery installed, the worker's and reviewer's models, target_remote, Redis, the "
        "sandbox (docs/doctor.md).",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only the local checks: no model request, nothing over the network",
    )
    parser.add_argument(
        "--worker",
        action="store_true",
        help="check what `hero worker` needs, as in a worker's home (the default there: "
        "engine: celery and no target_repo of its own)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds each model request may take (default 60)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.doctor import CONFIGURATION, FAIL, MODEL_TIMEOUT_S, WARN, run_all

    timeout = MODEL_TIMEOUT_S if args.timeout is None else args.timeout
    if not (math.isfinite(timeout) and timeout > 0):
        raise CommandLineError(f"--timeout: expected seconds > 0; found {args.timeout}")
    failures = warnings = 0
    unloadable = False
    try:
        found = run_all(
            home(args), quick=args.quick, model_timeout_s=timeout, worker=args.worker or None
        )
        for finding in found:
            failures += finding.status == FAIL
            unloadable |= finding.status == FAIL and finding.what == CONFIGURATION
            warnings += finding.status == WARN
            print(finding.line(), flush=True)
        summary = f"{failures} check(s) failed" if failures else "all checks passed"
        print(summary + (f", {warnings} warning(s)" if warnings else ""), flush=True)
    except BrokenPipeError:
        reader_gone()
    if unloadable:
        return EXIT_USAGE
    return EXIT_FAILED if failures else EXIT_OK
