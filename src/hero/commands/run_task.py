"""The ``--task`` options of `hero run`: a story made on the spot (see :mod:`hero.run.adhoc`).

Kept apart from hero.commands.run, which only calls :func:`add_task_arguments` and
:func:`task_of`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from hero.commands import CommandLineError

if TYPE_CHECKING:  # hero.run.adhoc (and its dataclasses) only when a command line has --task
    from hero.run.adhoc import Task


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """``--task``, ``--verify``, ``--scope`` and ``--id`` on ``hero run``."""
    parser.add_argument(
        "--task", metavar="TEXT", help="run a story made from TEXT (instead of STORY)"
    )
    parser.add_argument(
        "--verify",
        metavar="CMD",
        action="append",
        default=[],
        help="with --task: a check run after each round (repeatable)",
    )
    parser.add_argument(
        "--scope",
        metavar="GLOB",
        action="append",
        default=[],
        help="with --task: what the worker may change (repeatable)",
    )
    parser.add_argument("--id", dest="task_id", metavar="ID", help="with --task: the story's id")


def task_of(args: argparse.Namespace) -> Task | None:
    """The task ``hero run`` was given, None for a STORY file; CommandLineError when both
    or neither were given, or --verify/--scope/--id without --task."""
    if args.task is None:
        if args.story is None:
            raise CommandLineError("give a STORY file or --task TEXT")
        extra = [
            flag
            for flag, value in (
                ("--verify", args.verify),
                ("--scope", args.scope),
                ("--id", args.task_id),
            )
            if value
        ]
        if extra:
            raise CommandLineError(f"{', '.join(extra)}: only with --task")
        return None
    if args.story is not None:
        raise CommandLineError("give a STORY file or --task TEXT, not both")
    from hero.run.adhoc import task_from

    return task_from(args.task, args.verify, args.scope, args.task_id)
