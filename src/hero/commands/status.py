"""`hero status`: the stories' states, the inbox queue and the daemon, as text or JSON.

A configuration that does not load is no error here (the stories are shown without what it
would add: budgets, overlaps), save for an unknown key in a config file: exit 2 naming it."""

from __future__ import annotations

import argparse

from hero.commands import Subparsers, home, home_option
from hero.errors import EXIT_OK, UsageError


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "status",
        parents=[home_option()],
        help="show the stories' states, the inbox queue and the daemon",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.views.status import collect_status, format_status

    where = home(args)
    if not where.is_dir():
        raise UsageError(f"{where}: no such directory")
    report = collect_status(where, strict_keys=True)  # a mistyped key is an error (exit 2)
    # a reader that leaves early (`hero status | head -1`) is handled in hero.cli.main
    import json

    print(json.dumps(report, indent=2) if args.json else format_status(report), flush=True)
    return EXIT_OK
