"""The daemon behind `hero watch`: the dispatcher over the inbox, the GitHub watcher beside
it when config/roles.yaml has a ``github:`` block, one daemon per home.

The command (the configuration it loads, the logging, the exit code) is
:mod:`hero.commands.watch`; ``hero run-plan`` runs the same dispatcher through
:func:`model_factory` and :func:`serve`.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from hero.errors import EXIT_INTERRUPTED, ConfigurationError

if TYPE_CHECKING:
    from hero.config.home import Config
    from hero.daemon.dispatcher import Dispatcher, ModelFactory
    from hero.run.events import EventSink


def check(config: Config) -> None:
    """ConfigurationError when `hero watch` cannot run on this configuration: the Celery
    engine without its extra, no target repository (a worker's home has none), a
    ``github:`` block the watcher cannot use (no token, say)."""
    from hero.engine.app import require_extra
    from hero.github.watch import github_problem

    require_extra(config.engine)
    if not (config.target_repo / ".git").exists():  # a worker home has none: no coordinator
        raise ConfigurationError(
            "config/roles.yaml: target_repo: required for `hero watch`; expected the path of "
            "the git repository hero works on"
        )
    problem = github_problem(config)  # a github: block without a token, say
    if problem is not None:
        raise ConfigurationError(problem)


def run(
    config: Config, log: Any, *, exit_when_idle: bool = False, events: EventSink | None = None
) -> None:
    """Hold the home's daemon lock (DaemonRunning when another `hero watch` has it) and run
    the dispatcher, and the GitHub watcher on a thread, until a signal stops them (or, with
    ``exit_when_idle``, until the inbox holds nothing left to run). ``events``: where the
    stories' events go (`--events`, hero.run.events)."""
    from hero.daemon.dispatcher import Dispatcher
    from hero.github.watch import start_in_process
    from hero.locks import DaemonLock

    lock = DaemonLock(config.home)
    lock.acquire()
    dispatcher = Dispatcher(config, model_factory(config, log), log=log, events=events)
    started = time.monotonic()
    # Issues become inbox stories on a thread beside the dispatcher (roles.yaml's github:
    # block); with --exit-when-idle its first sweep ends before the inbox is looked at.
    github = start_in_process(config, log, wait_first_sweep=exit_when_idle)
    try:
        serve(dispatcher, log, exit_when_idle=exit_when_idle)
    finally:
        if github is not None:
            github.stop()
        lock.release()
    log.info("stopped", uptime_s=round(time.monotonic() - started, 1))


def model_factory(config: Config, log: Any) -> ModelFactory:
    """A story's worker and reviewer clients (its own models: the roles of the story's
    configuration it is given), each cancelled by the story's event. One HTTP
    client serves every story's model calls: the pool is thread-safe, and a story picked up
    from the inbox then pays no client start-up before its first request."""
    from hero.llm.client import make_client, story_clients

    shared = make_client(config, "worker")

    def note(msg: str) -> None:
        log.info("model retry", detail=msg)

    def make_models(cancel: threading.Event, story: Config) -> tuple[Any, Any]:
        # ``story``: the story's configuration, its roles carrying its models (hero.llm.models)
        return story_clients(story, cancel=cancel, on_retry=note, share_http_with=shared)

    return make_models


def serve(dispatcher: Dispatcher, log: Any, *, exit_when_idle: bool) -> bool:
    """Run ``dispatcher`` until it stops, SIGTERM and SIGINT stopping it cleanly (running
    stories are recorded as interrupted); a second signal exits at once. Returns whether a
    signal stopped it."""
    signals = {"count": 0}

    def on_signal(signum: int, frame: Any) -> None:
        signals["count"] += 1
        if signals["count"] == 1:
            log.info(
                "stopping",
                signal=signal.Signals(signum).name,
                note="interrupting running stories; a second signal exits at once",
            )
            dispatcher.stop()
        else:
            dispatcher.kill_now()
            os._exit(EXIT_INTERRUPTED)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        dispatcher.serve(exit_when_idle=exit_when_idle)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return bool(signals["count"])
