"""`hero watch`: run the stories dropped into inbox/, as a service (:mod:`hero.daemon.watch`).

Exit 0 once stopped (SIGTERM, Ctrl-C, or an idle inbox with --exit-when-idle); 2 for a
configuration error or another `hero watch` on the home. A second signal exits at once
with 130.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from hero.commands import (
    Subparsers,
    add_log_format,
    home,
    home_option,
    json_logs,
    reader_gone,
    say,
    say_notices,
)
from hero.errors import EXIT_OK

if TYPE_CHECKING:
    from hero.config.home import Config
    from hero.web.apart import ServerProcess


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "watch",
        parents=[home_option()],
        help="run stories dropped into inbox/, as a service",
        description="Take the stories in inbox/, then watch it: at most max_parallel at once, "
        "high priority first, then oldest. SIGTERM or Ctrl-C stops cleanly (running stories "
        "are recorded as interrupted and resumed on the next start); a second signal exits "
        "at once. Logs go to stderr: readable on a terminal, JSON lines otherwise.",
    )
    parser.add_argument(
        "--exit-when-idle",
        action="store_true",
        help="exit once the inbox holds nothing left to run (for scripts and CI)",
    )
    parser.add_argument(
        "--events",
        action="store_true",
        help="print every story's events on stdout as JSON lines, each story's result last "
        "(see docs/events.md); the logs stay on stderr",
    )
    parser.add_argument(
        "--serve",
        metavar="HOST:PORT",
        help="serve the status page and its API too, as `hero serve --bind HOST:PORT` would "
        "(docs/serve.md), from a process of its own started and stopped with the daemon",
    )
    add_log_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.config.loader import load_config
    from hero.daemon import watch
    from hero.daemon.logsetup import configure
    from hero.doctor import preflight
    from hero.run.events import EventSink

    config = load_config(home(args), roles=("worker", "reviewer", "memory"))
    say_notices(config)
    watch.check(config)
    preflight(config, say, repository=True)  # what would fail every story stops it here
    log = configure(json=json_logs(args), secrets=config.secrets)  # on stderr, never stdout
    sink = EventSink(on_gone=reader_gone) if args.events else None
    server = _start_server(config, args.serve, log, args.log_format) if args.serve else None
    try:
        watch.run(config, log, exit_when_idle=args.exit_when_idle, events=sink)
    finally:
        if server is not None:
            server.stop()
    return EXIT_OK


def _start_server(config: Config, bind: str, log: Any, log_format: str) -> ServerProcess:
    """The status page in a process of its own (:mod:`hero.web.apart`): it reads files,
    takes none of the daemon's locks and none of its CPU turns; it is restarted when it
    crashes and never stops the daemon. A refusal (no token, the port taken) stops here."""
    from hero.web import require
    from hero.web.apart import start

    require()
    return start(config, bind, log, log_format)
