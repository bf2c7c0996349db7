"""`hero export [KEY ...]`: each round's worker conversation as OpenAI chat-format JSONL."""

from __future__ import annotations

import argparse
import sys

from hero.commands import Subparsers, home, home_option, say
from hero.errors import EXIT_OK


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        parents=[home_option()],
        help="write stories' worker conversations as OpenAI chat JSONL",
        description="Write one JSON line per round: the worker's conversation as OpenAI chat "
        "messages, the tool schemas, and a metadata object (story, round, status, checks, "
        "verdict, usage, condensation). Every secret the configuration knows is taken out. "
        "Rounds that cannot be exported are named on stderr. Exit 0; 2 for an unknown story.",
    )
    parser.add_argument(
        "ids",
        nargs="*",
        metavar="KEY",
        help="the stories: an id, or PLAN/ID for a plan's (default: every story)",
    )
    parser.add_argument(
        "--status",
        action="append",
        type=_status,
        metavar="STATUS",
        help="only stories with this status (repeatable): a status `hero status` shows, such "
        "as passed, gave_up, budget_exceeded, error, cancelled",
    )
    parser.add_argument(
        "--history",
        choices=("full", "seen"),
        default="full",
        help="full: every message as it entered the round (default); seen: the history as "
        "the model last saw it, condensed messages marked",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    parser.set_defaults(handler=run)


def _status(value: str) -> str:
    """``--status``'s check, when it is given: hero.state is not imported by `hero --help`."""
    from hero.state import STATUSES

    if value not in STATUSES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(STATUSES)}; found {value!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hero.config.loader import load_config
    from hero.config.schema import ConfigError
    from hero.fsio import atomic_write
    from hero.redact import Redactor
    from hero.views.export import chosen_states, export

    where = home(args)
    config = load_config(where, roles=())  # every key it knows, to take out of the export
    try:
        model = load_config(where, roles=("worker",)).roles["worker"].model
    except ConfigError:
        model = ""  # the worker's key is missing, say: the export goes on without its name
    notes: list[str] = []
    states = chosen_states(where, args.ids, args.status or (), notes=notes)
    result = export(
        where, states, redactor=Redactor(config.secrets), history=args.history, model=model
    )
    for note in notes + result.notes:
        say(note)
    if not result.lines:
        say("no round to export")
    data = result.jsonl()
    if args.output:
        atomic_write(Path(args.output), data)
        say(f"{len(result.lines)} round(s) of {len(states)} story(ies) written to {args.output}")
    else:
        sys.stdout.write(data.decode("utf-8"))
    return EXIT_OK
