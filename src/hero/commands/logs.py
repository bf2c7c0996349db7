"""`hero logs KEY`: a story's traces round by round, once or following them (-f)."""

from __future__ import annotations

import argparse
import sys

from hero.commands import Subparsers, home, home_option
from hero.errors import EXIT_INTERRUPTED, EXIT_OK, UsageError


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "logs",
        parents=[home_option()],
        help="show a story's traces round by round",
        description="Show a story's traces round by round (runs/ID/, or runs/plans/PLAN/ID/ "
        "for a story of a plan). Exit 0; 2 for an unknown story or round; with -f, 0 once the "
        "story has ended (passed, gave up, error or skipped) and 130 on Ctrl-C. With -f, a "
        "story queued in the inbox that has not started yet is waited for.",
    )
    parser.add_argument("id", metavar="KEY", help="the story: its id, or PLAN/ID for a plan's")
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new events until the story passes, gives up, errors or is skipped "
        "(a queued story: wait for it to start first)",
    )
    parser.add_argument("--round", type=int, metavar="N", help="only round N")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.views.logs import follow, show

    if args.round is not None and args.round < 1:
        raise UsageError(f"--round: expected a round number >= 1; found {args.round}")
    where = home(args)
    try:  # an unknown story or round: LogsError, exit 2
        if args.follow:
            follow(where, args.id, sys.stdout, round_no=args.round)
        else:
            show(where, args.id, sys.stdout, round_no=args.round)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED  # quietly: Ctrl-C is how a follow is usually ended
    return EXIT_OK
