"""Command line: parse arguments, call one command, map the result to an exit code.

The commands live in ``hero.commands``, one module each (``COMMANDS``). Exit codes: 0 passed,
1 did not pass (gave_up, budget_exceeded on tokens or cost, or error, including a story that
could not start), 124 a story stopped on a time budget, 2 usage or configuration error, an
invalid story, or a story id that already passed from another file; 75 a model provider
unavailable (`hero run`); 130 interrupted. The one table is in docs/run.md ("Exit codes"). An
error that ends a command is said here, once: see ``hero.errors``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from hero import __version__
from hero.commands import CommandLineError, home_option, reader_gone, stdout_closed
from hero.errors import EXIT_OK, EXIT_USAGE, HeroError, Interrupted

#: The commands, each a module of hero.commands, in the order ``hero --help`` lists them.
COMMANDS = (
    "run init new demo doctor status logs export report memory watch serve plan run_plan "
    "retry revise clean github bench worker"
).split()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hero",
        parents=[home_option()],
        description="Turn user stories into git commits: Worker -> Verifier -> Reviewer rounds.",
    )
    parser.add_argument("--version", action="version", version=f"hero {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"hero.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            # What is still buffered is written here, where a reader that has gone can be
            # answered, rather than at the interpreter's exit, which would print a traceback.
            sys.stdout.flush()
    except BrokenPipeError:
        # stdout's reader left early (`hero plan --dry-run | head -1`): it had what it wanted,
        # so hero ends quietly, whichever command was writing. A broken pipe to anything
        # else (a child process hero feeds) is a real error and goes on up.
        if not stdout_closed():
            raise
        reader_gone()
        return EXIT_OK


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        code: int = args.handler(args)
    except CommandLineError as exc:
        parser.error(str(exc))  # exits with 2
    except HeroError as exc:
        print(f"hero: {exc.for_user()}", file=sys.stderr)
        return exc.exit_code
    except (KeyboardInterrupt, Interrupted):
        print("hero: interrupted", file=sys.stderr)
        return Interrupted.exit_code
    return code
