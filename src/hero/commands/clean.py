"""`hero clean`: remove what finished stories leave behind (:mod:`hero.run.housekeeping`): their
repositories in worktrees/, old run logs and, when asked, their branches. Prints each
removal and the space freed. Exit 0; 2 for a bad argument or configuration."""

from __future__ import annotations

import argparse
import math

from hero.commands import CommandLineError, Subparsers, home, home_option
from hero.errors import EXIT_OK

#: How the summary counts what was removed: (what, one, more than one).
_COUNTED = (
    ("repository", "1 repository", "{n} repositories"),
    ("logs", "the logs of 1 story", "the logs of {n} stories"),
    ("branch", "1 branch", "{n} branches"),
    ("environment", "1 project environment", "{n} project environments"),
)
_BRANCH_HELP = "; ".join(
    f"{name}: {doc}"
    for name, doc in {
        "none": "no branch (the default)",
        "merged": "hero/<id> of each passed story already merged into its base",
        "passed": "hero/<id> of each passed story, merged or not",
    }.items()
)


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "clean",
        parents=[home_option()],
        help="remove the repositories, old logs (and branches) of finished stories",
        description="Remove what finished stories (passed, gave_up, error, skipped, "
        "budget_exceeded) leave behind: their repositories in worktrees/ and their run logs "
        "(runs/<id>/) older than housekeeping_logs_after_days. A queued, running or "
        "interrupted story is never touched, nor is a run record: `hero status` and "
        "`hero retry` still work, a retried story's repository is made again from its "
        "branch. What a story that did not pass left uncommitted is committed on its branch "
        "first. Project environments (envs/) that no queued, running or interrupted story "
        "uses go too (the next story with setup makes its own again). Branches are deleted only with --branches. Exit 0; 2 for a bad argument.",
    )
    parser.add_argument(
        "keys", nargs="*", metavar="KEY", help="only these stories (ID, or PLAN/ID)"
    )
    parser.add_argument(
        "--older-than",
        type=_days,
        default=0.0,
        metavar="DAYS",
        help="only the repositories of stories that finished at least DAYS ago (default 0)",
    )
    parser.add_argument(
        "--logs-older-than",
        type=_days,
        default=None,
        metavar="DAYS",
        help="remove the run logs of stories that finished at least DAYS ago (default: "
        "housekeeping_logs_after_days; a run record is always kept)",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="remove no run logs, whatever their age"
    )
    parser.add_argument(
        "--branches",
        choices=("none", "merged", "passed"),
        default="none",
        help=f"which hero branches to delete in the target repository: {_BRANCH_HELP}",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be removed; remove nothing"
    )
    parser.set_defaults(handler=run)


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of days >= 0; found {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from hero.config.loader import load_config
    from hero.git.ops import TargetRepo
    from hero.names import StoryRef
    from hero.run.housekeeping import Housekeeper, Rules, human_bytes

    for key in args.keys:
        if not StoryRef.of(key).valid():
            raise CommandLineError(f"KEY: expected a story id or PLAN/ID; found {key!r}")
    config = load_config(home(args), roles=())
    logs_days = (
        args.logs_older_than
        if args.logs_older_than is not None
        else config.housekeeping.logs_after_days
    )
    rules = Rules(
        repos_after_s=args.older_than * 86400.0,
        logs_after_s=None if args.keep_logs or logs_days is None else logs_days * 86400.0,
        branches=args.branches,
        only=frozenset(args.keys),
        environments=not args.keys,  # a clean of named stories leaves the home's alone
    )
    keeper = Housekeeper(config, TargetRepo(config.target_repo))
    outcome = keeper.run(rules, dry_run=args.dry_run)
    verb = "would remove" if outcome.dry_run else "removed"
    for item in outcome.removed:
        size = f" ({human_bytes(item.bytes)})" if item.what != "branch" else ""
        print(f"{item.key}: {verb} {item.what} {item.where}{size}: {item.why}")
    for key, why in outcome.kept:
        print(f"{key}: {why}")
    if not outcome.removed:
        print("nothing to clean")
        return EXIT_OK
    listed = ", ".join(
        words
        for what, one, many in _COUNTED
        if (n := sum(1 for r in outcome.removed if r.what == what))
        for words in [f"{one if n == 1 else many.format(n=n)}"]
    )
    freed = "would free" if outcome.dry_run else "freed"
    print(f"{freed} {human_bytes(outcome.freed)} ({listed})")
    return EXIT_OK
