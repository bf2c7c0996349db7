"""`hero report KEY`: one self-contained Markdown report of a story."""

from __future__ import annotations

import argparse
import sys

from hero.commands import Subparsers, home, home_option, say
from hero.errors import EXIT_OK


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        parents=[home_option()],
        help="write a story's Markdown report (rounds, verdicts, checks, diff stat, usage)",
        description="Write one self-contained Markdown report of a story, for a pull request "
        "or a chat: its status and branch, a table of its rounds (worker, checks, verdict), "
        "the final verdict's criteria and comments, the diff stat of its branch and its usage. "
        "Every secret the configuration knows is taken out. Exit 0; 2 for an unknown story.",
    )
    parser.add_argument("id", metavar="KEY", help="the story: its id, or PLAN/ID for a plan's")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hero.config.loader import load_config
    from hero.fsio import atomic_write
    from hero.redact import Redactor
    from hero.views.export import chosen_states
    from hero.views.report import build_report

    where = home(args)
    config = load_config(where, roles=())
    (state,) = chosen_states(where, [args.id])
    text = build_report(state, repo=config.target_repo, redactor=Redactor(config.secrets))
    if args.output:
        atomic_write(Path(args.output), text.encode("utf-8"))
        say(f"report of {state.ref.key} written to {args.output}")
    else:
        sys.stdout.write(text)
    return EXIT_OK
