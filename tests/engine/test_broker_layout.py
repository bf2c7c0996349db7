"""kombu's Redis key layout, as hero reads it: where a story's task waits and where it is
while a worker holds it unacknowledged.

The coordinator tells a story lost between a worker taking its task and taking its lease
by looking for the task in the broker (hero.engine.remote.RemoteRun._dropped): in the
queue's lists, one per priority, and in the hash of messages taken but not acknowledged.
Those keys are kombu's, not a documented interface: hero names them itself
(hero.engine.app.broker_keys) and pins kombu to the releases whose layout it has read
(pyproject.toml). These tests send and take a task through the real transport, on a real
redis-server, with hero's own Celery application, and look for it only through
``broker_keys`` and ``Store.in_broker``: a kombu release that moves a key fails here rather
than leave the coordinator blind to a task it would then send again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from engine_support import Cluster, Policy
from helpers import Log

#: A generous "did not hang" bound for a message to come back from a local redis-server.
TAKE_TIMEOUT_S = 60.0


def coordinator(home: Path, path: Path) -> tuple[Any, Any, Any, tuple[list[str], str]]:
    """(RemoteRun, Store, Celery app, broker keys) for the story file ``path`` of ``home``,
    made as the coordinator makes them."""
    from hero.config.loader import load_config
    from hero.engine.app import broker_keys, make_app
    from hero.engine.remote import RemoteRun
    from hero.engine.seal import Seal
    from hero.engine.store import Store
    from hero.git.ops import TargetRepo
    from hero.story.format import parse_story

    config = load_config(home, roles=("worker", "reviewer"))
    engine = config.engine
    keys = broker_keys(engine)
    assert keys is not None, "a Redis broker that holds hero's keys: its keys can be read"
    store = Store(engine.state_url, engine.queue, engine.lease_s, Seal(engine.key))
    app = make_app(engine)
    log = Log()  # the daemon's structlog logger, recording
    run = RemoteRun(
        parse_story(path),
        path,
        config,
        store,
        app,
        TargetRepo(config.target_repo),
        log,
        threading.Event(),
    )
    return run, store, app, keys


def kombu_keys(cluster: Cluster) -> list[str]:
    """Every key under Celery's prefix, for a failure's message (what kombu did write)."""
    from hero.engine.app import kombu_prefix

    return sorted(cluster.redis.client().scan_iter(f"{kombu_prefix('hero')}*"))


def take_unacknowledged(app: Any, queue: str) -> tuple[Any, Any, Any]:
    """Take one message off ``queue`` as a worker's consumer does (BRPOP through kombu's
    poller, acknowledgement left for later): (connection, consumer, message)."""
    from kombu import Consumer

    taken: list[Any] = []
    conn = app.connection_for_read()
    consumer = Consumer(
        conn.channel(),
        queues=[app.amqp.queues[queue]],
        callbacks=[lambda body, message: taken.append(message)],
        accept=["json"],
        no_ack=False,
    )
    consumer.qos(prefetch_count=1)
    consumer.consume()
    deadline = time.monotonic() + TAKE_TIMEOUT_S
    while not taken and time.monotonic() < deadline:
        try:
            conn.drain_events(timeout=1.0)
        except TimeoutError:  # nothing yet: look again, until the deadline
            continue
    assert taken, f"no message came off {queue!r} within {TAKE_TIMEOUT_S} s"
    return conn, consumer, taken[0]


def test_a_waiting_then_taken_task_is_found_and_an_acked_one_is_not(
    cluster: Cluster, scripted, write_story
) -> None:
    """The coordinator sends a story as it always does: its task is found in the queue's
    lists; a consumer takes it without acknowledging it: it is found in the unacknowledged
    hash (and no longer in the lists); acknowledged, it is found nowhere. A task never sent
    is found in neither, so a look that finds anything would fail here."""
    home = cluster.home(scripted(Policy()))
    # a story's priority orders the coordinator's own queue; its task carries none
    path = write_story(home, "k1", verify=["true"], priority="high")
    run, store, app, (queues, unacked) = coordinator(home, path)
    try:
        run._send()  # the coordinator's one way to send a story
        broker = cluster.redis.client()
        task_id = run._task_id(run.dispatch)
        assert store.in_broker(queues, unacked, task_id), kombu_keys(cluster)
        assert not store.in_broker(queues, unacked, run._task_id("f" * 32))

        conn, consumer, message = take_unacknowledged(app, run.config.engine.queue)
        try:
            assert message.headers["id"] == task_id
            assert store.in_broker([], unacked, task_id), kombu_keys(cluster)
            assert not store.in_broker([], unacked, run._task_id("f" * 32))
            assert not any(broker.llen(q) for q in queues)  # taken off the lists
            message.ack()
            assert not store.in_broker(queues, unacked, task_id), kombu_keys(cluster)
        finally:
            consumer.cancel()
            conn.close()
    finally:
        app.close()


def test_every_prioritys_list_is_one_hero_reads(cluster: Cluster, scripted, write_story) -> None:
    """kombu keeps a queue's tasks in one Redis list per priority step: hero sends stories
    without a priority (the plain list), but names every step's list, and each of the ten
    priorities a task may carry lands in one of them."""
    home = cluster.home(scripted(Policy()))
    path = write_story(home, "k2", verify=["true"])
    run, store, app, (queues, unacked) = coordinator(home, path)
    queue = run.config.engine.queue
    try:
        sent = {p: f"k2-priority-{p}" for p in range(10)}
        for priority, task_id in sent.items():
            app.send_task(
                "hero.run_story", args=[{}], queue=queue, task_id=task_id, priority=priority
            )
        # (a publish is one LPUSH, made before send_task returns)
        missed = [p for p, task_id in sent.items() if not store.in_broker(queues, unacked, task_id)]
        assert not missed, kombu_keys(cluster)
        assert not store.in_broker(queues, unacked, "k2-priority-never-sent")
    finally:
        app.close()
