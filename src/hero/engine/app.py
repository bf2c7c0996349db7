"""The Celery application hero runs stories on, and the settings that make it safe.

- A task is acknowledged when a worker starts it (``task_acks_late`` off): the broker
  never redelivers a story that is running, however long it runs, so Redis's visibility
  timeout (a redelivery of what was taken but not acknowledged) cannot start a second run
  of a healthy story. A worker that dies mid-story is hero's to notice: its lease expires
  and the coordinator sends the story again (see hero.engine.remote).
- No task reserved ahead (``worker_disable_prefetch``, ``worker_prefetch_multiplier`` 1):
  a waiting story goes to the next free worker, not to one busy with a long story, and
  a worker that dies takes no waiting story with it.
- A threads pool: a story is threads already (its model calls, its commands), and a
  worker killed with ``kill -9`` takes its stories with it (no orphaned child process
  keeps renewing a lease).
- Redis reconnections are retried for ever: a broker restart pauses the fleet, it does not
  stop it.
- Celery's keys and channels in Redis are under ``<engine_queue>:kombu:`` (kombu's
  ``global_keyprefix``), beside hero's own ``<engine_queue>:*``: a Redis ACL user limited to
  ``~hero:* &hero:*`` runs everything. No result backend (hero reads no task result: a
  worker publishes into hero's keys) and no remote control (its pattern subscription is
  one an ACL user limited to a prefix cannot be granted).
- A ``rediss://`` URL checks the server's certificate: kombu, left alone, connects to a bare
  ``rediss://`` without checking it (redis-py checks by default; hero's own keys).
"""

from __future__ import annotations

from typing import Any

from hero.config.sections import EngineSettings
from hero.errors import ConfigurationError

#: The one task: run a story (see hero.engine.worker.run_story_task).
TASK_NAME = "hero.run_story"


def missing() -> str | None:
    """Why the Celery engine cannot run in this Python (its extra is not installed), or
    None when it can."""
    import importlib.util

    absent = [m for m in ("celery", "redis") if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (
        f"engine: celery needs {' and '.join(absent)}, which this Python lacks; install "
        "hero with its Celery extra: pip install 'hero[celery]' (from a checkout: "
        "pip install -e '.[celery]')"
    )


def require_extra(engine: EngineSettings) -> None:
    """ConfigurationError saying what to install when ``engine`` is Celery and this Python
    lacks its extra (:func:`missing`)."""
    problem = missing() if engine.remote else None
    if problem is not None:
        raise ConfigurationError(problem)


def make_app(engine: EngineSettings) -> Any:
    """The Celery application for ``engine`` (imports Celery: only with ``engine: celery``)."""
    from celery import Celery

    app = Celery("hero", broker=engine.broker_url)
    transport: dict[str, Any] = {"visibility_timeout": engine.visibility_timeout_s}
    if engine.broker_url.startswith(("redis://", "rediss://", "unix://")):
        transport["global_keyprefix"] = kombu_prefix(engine.queue)
    app.conf.update(
        task_acks_late=False,
        task_reject_on_worker_lost=False,
        worker_prefetch_multiplier=1,
        # and none reserved while all slots are busy (Redis brokers): a busy worker holds no
        # waiting story that a free one could run, or that would be lost with it
        worker_disable_prefetch=True,
        task_default_queue=engine.queue,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_track_started=False,
        broker_transport_options=transport,
        broker_connection_retry=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_send_task_events=False,
        worker_enable_remote_control=False,
        enable_utc=True,
    )
    if _unchecked_tls(engine.broker_url):
        import ssl

        app.conf.broker_use_ssl = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    return app


def kombu_prefix(queue: str) -> str:
    """Where Celery keeps its keys and channels in Redis, under hero's prefix."""
    return f"{queue}:kombu:"


#: kombu's Redis transport: a queue's tasks of priority 0-2 are the list ``<queue>``, of
#: priority 3-5, 6-8 and 9 the lists ``<queue>\x06\x16<step>``.
_PRIORITY_STEPS = (3, 6, 9)
_PRIORITY_SEP = "\x06\x16"


def broker_keys(engine: EngineSettings) -> tuple[list[str], str] | None:
    """The Redis keys where a story's task waits (the queue's lists, one per priority step) and
    where it is while taken but not acknowledged (kombu's ``unacked`` hash: delivery tag ->
    the message, whose headers name the task id), when the broker is the Redis that holds
    hero's own keys; None otherwise (they cannot be read).

    The layout is kombu's, not an interface it promises: pyproject.toml pins kombu to the
    line whose layout this is, and tests/engine/test_broker_layout.py fails when it moves."""
    if not engine.broker_url.startswith(("redis://", "rediss://", "unix://")):
        return None
    if engine.state_url != engine.broker_url:
        return None
    prefix = kombu_prefix(engine.queue)
    queue = f"{prefix}{engine.queue}"
    return [queue, *(f"{queue}{_PRIORITY_SEP}{p}" for p in _PRIORITY_STEPS)], f"{prefix}unacked"


def _unchecked_tls(url: str) -> bool:
    """A ``rediss://`` URL that does not say how to check the server (kombu would not)."""
    from urllib.parse import parse_qs, urlsplit

    if not url.startswith("rediss://"):
        return False
    try:
        return "ssl_cert_reqs" not in parse_qs(urlsplit(url).query)
    except ValueError:
        return True


#: After a story ends, when the worker's event loop looks again for the next task (seconds):
#: a few looks, so that one lands after the thread pool has released the task's slot.
WAKE_AFTER_TASK_S = (0.01, 0.05, 0.25)


def wake_after_tasks() -> None:
    """A worker looks for its next story as soon as one ends, not at its event loop's next
    tick (up to a second later). With ``worker_disable_prefetch`` a busy worker does not
    listen on the queue, and a story ending in the threads pool does not wake the loop that
    would listen again: each story's end, from its pool thread, schedules a few looks on the
    loop (kombu's hub: ``call_soon`` is thread-safe and wakes it). A look is a tick: the Redis
    transport asks for the next task once a slot is free."""
    from celery.signals import task_postrun
    from kombu.asynchronous import get_event_loop

    def look() -> None:
        return None

    def schedule() -> None:
        hub = get_event_loop()
        if hub is not None:
            for delay in WAKE_AFTER_TASK_S:
                hub.call_later(delay, look)

    def ended(**_: Any) -> None:
        hub = get_event_loop()
        if hub is not None:
            hub.call_soon(schedule)

    task_postrun.connect(ended, weak=False)
