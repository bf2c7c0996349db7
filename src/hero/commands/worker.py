"""`hero worker`: load the home's config, then run a Celery worker for the stories a
coordinator sends (:func:`hero.engine.worker.run_worker`). Exit 0 once stopped; 2 for a
usage or configuration error (``engine: celery`` not set, Celery not installed)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from hero import __version__
from hero.commands import Subparsers, home, home_option, say, say_notices
from hero.errors import EXIT_OK, ConfigurationError, UsageError

if TYPE_CHECKING:
    from hero.engine.warm import Warmed
    from hero.engine.worker import Fleet


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "worker",
        parents=[home_option()],
        help="run stories a coordinator sends (engine: celery), as a Celery worker",
        description="A Celery worker that runs the stories `hero watch` sends with engine: "
        "celery in config/roles.yaml. It keeps a clone of target_remote and a home of its own "
        "in --workdir, and pushes each story's branch to the remote. Before its first story it "
        "warms up (imports, its clone of the remote, the project's environment), each step "
        "said on a `hero worker warm-up:` line. SIGTERM stops it: the "
        "stories it runs are recorded as interrupted and sent to another worker. Arguments "
        "after `--` go to `celery worker` as they are.",
    )
    parser.add_argument(
        "--workdir", metavar="DIR", help="where the clone and the runs live (default HOME/worker)"
    )
    parser.add_argument(
        "--concurrency", "-c", type=int, default=1, metavar="N", help="stories at once (default 1)"
    )
    parser.add_argument(
        "--queues", "-Q", metavar="Q1,Q2", help="queues to take stories from (default engine_queue)"
    )
    parser.add_argument(
        "--hostname", "-n", metavar="NAME", help="the worker's name (celery's -n; default: host)"
    )
    parser.add_argument("--loglevel", "-l", default="INFO", help="celery's log level (INFO)")
    parser.add_argument("celery_args", nargs="*", help=argparse.SUPPRESS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.config.loader import load_config
    from hero.engine.app import missing

    config = load_config(home(args), roles=("worker", "reviewer"), worker=True)
    say_notices(config)
    engine = config.engine
    if not engine.remote:
        raise ConfigurationError(
            "config/roles.yaml: engine: `hero worker` runs stories sent through Celery; set "
            "`engine: celery` (with broker_url and target_remote)"
        )
    problem = missing()
    if problem is not None:
        raise UsageError(problem)
    if args.concurrency < 1:
        raise UsageError("--concurrency: expected 1 or more")
    from hero.doctor import preflight

    # Its clone of target_remote is made as it starts: the repository is not checked here.
    preflight(config, say, repository=False)
    from hero.engine.worker import run_worker

    queue = args.queues or engine.queue

    def ready(fleet: Fleet) -> None:
        print(
            f"hero worker ready: {fleet.name}, hero {__version__}, {args.concurrency} slot(s), "
            f"queue {queue}, workdir {fleet.workdir}",
            flush=True,
        )

    def warmed(step: Warmed) -> None:
        print(f"hero worker warm-up: {step.line()}", flush=True)

    run_worker(
        config,
        Path(args.workdir) if args.workdir else config.home / "worker",
        concurrency=args.concurrency,
        queues=args.queues,
        hostname=args.hostname,
        loglevel=args.loglevel,
        celery_args=args.celery_args,
        on_ready=ready,
        on_warm=warmed,
    )
    return EXIT_OK
