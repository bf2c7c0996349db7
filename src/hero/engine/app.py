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
"""

from __future__ import annotations

from typing import Any

from hero.config import EngineSettings

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


def make_app(engine: EngineSettings) -> Any:
    """The Celery application for ``engine`` (imports Celery: only with ``engine: celery``)."""
    from celery import Celery

    app = Celery("hero", broker=engine.broker_url, backend=engine.state_url or None)
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
        result_serializer="json",
        result_expires=24 * 3600,
        task_track_started=False,
        broker_transport_options={"visibility_timeout": engine.visibility_timeout_s},
        result_backend_transport_options={"visibility_timeout": engine.visibility_timeout_s},
        broker_connection_retry=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_send_task_events=False,
        enable_utc=True,
    )
    return app
