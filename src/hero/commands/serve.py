"""`hero serve`: the status page, a story's page, a plan's DAG and the JSON API, read-only
(:mod:`hero.web`; docs/serve.md).

Runs until SIGTERM or Ctrl-C (exit 0, as `hero watch`). Exit 2 when the optional extra `serve` is
not installed (it says what to install), for a bad --bind, for a non-loopback --bind
without serve_token, and for an address it cannot listen on.
"""

from __future__ import annotations

import argparse
import signal

from hero.commands import Subparsers, add_log_format, home, home_option, json_logs, say_notices
from hero.errors import EXIT_OK

DEFAULT_BIND = "127.0.0.1:8765"  # hero.web.server.DEFAULT_BIND (not imported: --help stays light)


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        parents=[home_option()],
        help="serve a read-only web page of the stories, the queue and the daemon",
        description="Serve the board (every story, the queue, the daemon's health), each "
        "story's rounds, each plan's DAG, and a JSON API of the same (docs/serve.md). "
        "Read-only; listens on loopback unless --bind says otherwise, which needs serve_token "
        "in config.local.yaml. Needs the optional extra: pip install 'hero[serve]'. Logs go "
        "to stderr; SIGTERM or Ctrl-C stops it.",
    )
    parser.add_argument(
        "--bind",
        default=DEFAULT_BIND,
        metavar="HOST:PORT",
        help=f"where to listen (default {DEFAULT_BIND}; port 0: any free port, logged)",
    )
    add_log_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.web import require

    require()  # before anything else: the one line that says what to install
    from hero.config.loader import load_config
    from hero.daemon.logsetup import configure
    from hero.web.server import prepare, serve_forever

    config = load_config(home(args), roles=())
    say_notices(config)
    log = configure(json=json_logs(args), secrets=config.secrets)
    prepared = prepare(config, args.bind, log)
    stopped: list[int] = []
    # uvicorn stops cleanly on SIGTERM and SIGINT, then raises the signal again to the
    # handler found before: this one, so that a stop asked for is exit 0, as `hero watch`'s
    stops = (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, lambda signum, _frame: stopped.append(signum)) for s in stops}
    try:
        serve_forever(prepared)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    log.info("stopped", url=prepared.url)
    return EXIT_OK
