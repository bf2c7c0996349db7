"""`hero run-plan NAME`: run a plan's stories in dependency order (:mod:`hero.daemon.runplan`),
then print a table of every story and the plan's branch.

Exit 0 only if every story passed and the plan's branch was made; 124 when the stories that
failed all stopped on a time budget; 1 otherwise; 2 usage or configuration error; 130
interrupted (running it again continues). The table is docs/run.md's "Exit codes".
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hero.commands import Subparsers, home, home_option, say, say_notices
from hero.errors import EXIT_INTERRUPTED, UsageError


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run-plan",
        parents=[home_option()],
        help="run a plan's stories in dependency order, code flowing along the DAG",
        description="Run the stories of inbox/<NAME>/ in dependency order, independent ones "
        "in parallel up to max_parallel. A story branches from its dependencies' branches "
        "(merged when there are several); a failure skips its descendants. Running it again "
        "continues. When every story passed, hero/plan/<NAME> holds the merge of the plan's "
        "leaves. Exit 0 only if every story passed; 124 when the stories that failed all "
        "stopped on a time budget; 1 otherwise; 2 usage or configuration error; 130 "
        "interrupted.",
    )
    parser.add_argument("name", help="the plan's name (its folder in inbox/)")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show progress even off a terminal"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.config.loader import load_config
    from hero.daemon.logsetup import configure
    from hero.daemon.runplan import check_plan, plan_exit_code, plan_table, run_plan
    from hero.engine.app import require_extra
    from hero.names import plan_name_problem

    name: str = args.name
    problem = plan_name_problem(name)
    if problem:
        raise UsageError(f"plan name: {problem}")
    config = load_config(home(args), roles=("worker", "reviewer", "memory"))
    say_notices(config)
    require_extra(config.engine)
    check_plan(config, name)
    show = args.verbose or sys.stderr.isatty()
    log = configure(json=False, secrets=config.secrets) if show else _Quiet()
    ended = run_plan(config, name, log)
    if ended.interrupted:
        say(f"interrupted; run `hero run-plan {name}` again to continue")
        return EXIT_INTERRUPTED
    print(plan_table(config.home, name, ended.outcome))
    return plan_exit_code(config.home, name, ended)


class _Quiet:
    """A logger that says nothing (``hero run-plan`` off a terminal, without -v)."""

    def bind(self, **_kw: Any) -> _Quiet:
        return self

    def __getattr__(self, _name: str) -> Any:
        return lambda *_a, **_kw: None
