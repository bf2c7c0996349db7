"""`hero bench make | run | report`: measure models and settings on the repository's own
history, in SWE-bench's format (docs/bench.md).

- ``make [--last N | --range A..B] [-o TASKS.jsonl]``: tasks from first-parent commits that
  change both code and tests (hero.evals.make);
- ``run TASKS.jsonl -c NAME=OVERRIDES.yaml [-c ...] [--runs N] [--out DIR]``: each task as a
  story under each configuration, judged with its hidden tests (hero.evals.runner);
- ``report DIR [--json] [--html FILE] [--swebench FILE ...]``: resolve rates with 95%
  intervals, cost and time, a paired comparison, beside SWE-bench harness reports
  (hero.evals.report).

Exit codes: 0 done; 1 a run with tasks that could not be judged; 2 a usage or
configuration error (a bad tasks file, an unknown setting in an overrides file); 130
interrupted.
"""

from __future__ import annotations

import argparse

from hero.commands import CommandLineError, Subparsers, home_option


def add_parser(subparsers: Subparsers) -> None:
    bench = subparsers.add_parser(
        "bench",
        parents=[home_option()],
        help="which model or settings resolve more of this repository's work (SWE-bench format)",
        description="Make tasks from the target repository's history, run them under named "
        "configurations, and report resolve rates (docs/bench.md).",
    )
    bench.set_defaults(handler=_no_command)
    sub = bench.add_subparsers(dest="bench_command", metavar="COMMAND")

    make = sub.add_parser(
        "make",
        parents=[home_option()],
        help="tasks from the repository's first-parent history",
        description="Every first-parent commit that changes both code and tests becomes a "
        "candidate task: base = its parent, the code change the reference patch, the test "
        "change the hidden test patch, the commit message the problem statement. FAIL_TO_PASS "
        "and PASS_TO_PASS come from running the tests at base with the test patch and at the "
        "commit, twice; a candidate with no FAIL_TO_PASS, or whose results differ between the "
        "runs, is dropped with its reason.",
    )
    window = make.add_mutually_exclusive_group()
    window.add_argument(
        "--last", type=int, metavar="N", help="the last N first-parent commits (default: 50)"
    )
    window.add_argument("--range", metavar="A..B", help="the first-parent commits in A..B")
    make.add_argument(
        "-o", "--output", metavar="TASKS.jsonl", help="where to write the tasks (default: stdout)"
    )
    make.add_argument(
        "--test-command",
        "--test-cmd",
        dest="test_cmd",
        metavar="CMD",
        help="the pytest command that runs the tests (default: python -m pytest; hero adds "
        "-rA -p no:cacheprovider and reads the test ids from its summary)",
    )
    make.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="the time limit of one test run, in seconds (default: verify_timeout_ms)",
    )
    make.set_defaults(handler=_make)

    run = sub.add_parser(
        "run",
        parents=[home_option()],
        help="run tasks as stories under named configurations, judged by their hidden tests",
        description="Each task runs as a story under each configuration (-c NAME=OVERRIDES.yaml: "
        "settings of config/roles.yaml applied over the home's). The worker's repository holds "
        "nothing after the task's base. A task is resolved when, with the hidden test patch "
        "applied to the worker's final tree, every FAIL_TO_PASS test passes and every "
        "PASS_TO_PASS test still does. Resumable: run it again with the same --out.",
    )
    run.add_argument("tasks", metavar="TASKS.jsonl", help="tasks in SWE-bench's format")
    run.add_argument(
        "-c",
        "--config",
        action="append",
        required=True,
        metavar="NAME=OVERRIDES.yaml",
        help="a configuration: its name and a YAML file of settings (repeatable)",
    )
    run.add_argument("--runs", type=int, default=1, metavar="N", help="runs of each task (1)")
    run.add_argument("--out", metavar="DIR", default="bench-out", help="output folder")
    run.add_argument("--events", action="store_true", help="JSON events on stdout")
    run.add_argument(
        "--test-command",
        metavar="CMD",
        default="python -m pytest",
        help="what runs the hidden tests, given their node ids (default: python -m pytest)",
    )
    run.add_argument(
        "--judge-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="time limit of the hidden tests' run, in seconds (600)",
    )
    run.add_argument(
        "--remote-root",
        metavar="DIR",
        help="engine: celery: where each task-run's own repository is made, a folder the "
        "workers reach (default: DIR/remotes of --out)",
    )
    run.set_defaults(handler=_run)

    report = sub.add_parser(
        "report",
        parents=[home_option()],
        help="resolve rates, cost and time, and a paired comparison of configurations",
    )
    report.add_argument("out", metavar="DIR", help="a `hero bench run` output folder")
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.add_argument("--html", metavar="FILE", help="also write a static HTML page with a chart")
    report.add_argument(
        "--swebench",
        action="append",
        metavar="FILE",
        help="a SWE-bench harness report (<model>.<run_id>.json) or per-instance report.json "
        "to set beside hero's results (repeatable; those in DIR are found by themselves)",
    )
    report.set_defaults(handler=_report)


def _no_command(args: argparse.Namespace) -> int:
    raise CommandLineError("hero bench: give a command: make, run or report")


def _make(args: argparse.Namespace) -> int:
    from hero.evals.make import main

    return main(args)


def _run(args: argparse.Namespace) -> int:
    from hero.evals.runner import main

    return main(args)


def _report(args: argparse.Namespace) -> int:
    from hero.evals.report import main

    return main(args)
