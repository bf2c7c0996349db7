"""The commands a user runs, one module each, and what they share.

A command module has two functions: ``add_parser(subparsers)`` declares the command and
its arguments (and sets ``handler`` to its ``run``), and ``run(args) -> int`` does the
command and returns its exit code. A command calls services (``hero.run.launch``, the daemon,
the planner, the views, ...) and prints what they did; the services take plain values,
print nothing and raise :class:`hero.errors.HeroError`s, which ``hero.cli.main`` turns
into one line on stderr and the error's exit code.

Importing a command module imports nothing heavy: ``hero --help`` builds every parser,
so a command imports what it uses inside ``run``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from hero.errors import UsageError

if TYPE_CHECKING:
    from hero.config.home import Config

#: What ``add_parser`` is given: the top parser's ``add_subparsers()``.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CommandLineError(UsageError):
    """The command line itself is wrong: ``hero.cli.main`` shows the usage, then this."""


def home_option() -> argparse.ArgumentParser:
    """The ``--home`` option, as a parent parser: accepted before or after the command."""
    home = argparse.ArgumentParser(add_help=False)
    home.add_argument(
        "--home",
        default=argparse.SUPPRESS,
        help="hero home directory (default: $HERO_HOME, else the current directory)",
    )
    return home


def home(args: argparse.Namespace) -> Path:
    """The hero home the command works on: ``--home``, else $HERO_HOME, else the cwd."""
    from hero.config.loader import resolve_home

    return resolve_home(getattr(args, "home", None))


def add_log_format(parser: argparse.ArgumentParser) -> None:
    """``--log-format`` for a command that runs as a service and logs."""
    parser.add_argument(
        "--log-format",
        choices=("auto", "console", "json"),
        default="auto",
        help="log format (default: console on a terminal, else json)",
    )


def json_logs(args: argparse.Namespace) -> bool | None:
    """``--log-format`` as ``hero.daemon.logsetup.configure`` takes it (None: by terminal)."""
    return {"auto": None, "console": False, "json": True}[args.log_format]


def say(message: str) -> None:
    """One line for the user on stderr: ``hero: <message>``."""
    print(f"hero: {message}", file=sys.stderr, flush=True)


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone: the write end of such a pipe polls
    as an error at once, while a pipe with a reader, a file or a terminal does not."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no stdout at all (closed, detached): nothing to tell
        return False


def reader_gone() -> None:
    """stdout's reader has gone (``hero status | head``), and that is fine: point stdout at
    /dev/null so the interpreter's final flush does not complain."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def say_notices(config: Config) -> None:
    """Say once what loading the configuration set aside (a placeholder where a key goes),
    so that a key taken from elsewhere is no surprise."""
    for notice in config.notices:
        say(f"warning: {notice}")
