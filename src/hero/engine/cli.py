"""``hero worker``: load the home's config, then hand over to ``celery worker``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hero import __version__
from hero.errors import EXIT_OK, EXIT_USAGE


def cmd_worker(args: argparse.Namespace, home: Path) -> int:
    from hero.config import ConfigError, load_config

    try:
        config = load_config(home, roles=("worker", "reviewer"))
    except ConfigError as exc:
        print(f"hero: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    engine = config.engine
    if not engine.remote:
        print(
            "hero: configuration error: config/roles.yaml: engine: `hero worker` runs stories "
            "sent through Celery; set `engine: celery` (with broker_url and target_remote)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from hero.engine.app import missing

    problem = missing()
    if problem is not None:
        print(f"hero: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.concurrency < 1:
        print("hero: --concurrency: expected 1 or more", file=sys.stderr)
        return EXIT_USAGE
    from celery.signals import worker_ready, worker_shutting_down

    from hero.engine.app import make_app
    from hero.engine.worker import make_fleet, register, worker_name

    app = make_app(engine)
    workdir = Path(args.workdir) if args.workdir else config.home / "worker"
    fleet = make_fleet(config, workdir, worker_name(args.hostname))
    register(app, lambda: fleet)

    def ready(**_: Any) -> None:
        print(
            f"hero worker ready: {fleet.name}, hero {__version__}, {args.concurrency} slot(s), "
            f"queue {args.queues or engine.queue}, workdir {fleet.workdir}",
            flush=True,
        )

    def shutting_down(**_: Any) -> None:
        fleet.stop_all()

    worker_ready.connect(ready, weak=False)
    worker_shutting_down.connect(shutting_down, weak=False)
    argv = [
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        str(args.concurrency),
        "--queues",
        args.queues or engine.queue,
        "--loglevel",
        args.loglevel,
        "--prefetch-multiplier",
        "1",
        "--without-gossip",
        "--without-mingle",
    ]
    if args.hostname:
        argv += ["--hostname", args.hostname]
    argv += list(args.celery_args)
    app.worker_main(argv)
    return EXIT_OK
