"""Model outages heal by themselves: the classification of a model error (hero.llm.client), the
circuit breaker of each provider (hero.llm.breaker), and `hero watch` (a real child process)
waiting out an endpoint that refuses connections for a stretch, or stopping its queue on
a 401, with no story spent and none in ``error``.

The model is hero's scripted one over real HTTP on loopback; the outage is real too: its
server is stopped (connections are refused) and started again on the same port.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import MESSAGES, make_client
from watch_support import Daemon, Policy, Procs, wait_for

from hero.cli import main
from hero.llm.breaker import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    STOPPED,
    Backoff,
    Breakers,
    breakers_path,
    read_breakers,
)
from hero.llm.client import LlmError, ModelOutage, ModelRefused, ModelUnavailable
from hero.llm.scripted import HttpError, ScriptedModel, text
from hero.views.status import breaker_lines, collect_status

#: Generous "did not hang" bounds for six stories on a loaded 2-core machine.
ALL_DONE_S = 300.0
FAST = {  # a model call gives up after two quick attempts; a breaker waits about a second
    "llm_max_attempts": 2,
    "outage_backoff_s": 0.5,
    "outage_backoff_max_s": 1.0,
    "max_parallel": 2,
}


# --------------------------------------------------------------------------- classification


def free_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_connections_outlasting_the_retries_are_unavailable() -> None:
    client = make_client(f"http://127.0.0.1:{free_port()}/v1", max_attempts=2)
    with pytest.raises(ModelUnavailable) as info:
        client.complete(MESSAGES)
    exc = info.value
    assert (exc.provider, exc.kind) == ("scripted", "transient")
    assert exc.reason.startswith("connection failed")
    assert "gave up after 2 attempts" in str(exc)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses_outlasting_the_retries_are_unavailable(
    scripted: Callable[..., ScriptedModel], status: int
) -> None:
    model = scripted([HttpError(status, "busy")] * 2)
    with pytest.raises(ModelUnavailable) as info:
        make_client(model.base_url, max_attempts=2).complete(MESSAGES)
    assert info.value.reason == f"HTTP {status}" and len(model.requests) == 2


def test_a_timeout_outlasting_the_retries_is_unavailable() -> None:
    with socket.socket() as listener:  # accepts, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = make_client(f"http://127.0.0.1:{port}/v1", max_attempts=1, timeout_s=0.3)
        with pytest.raises(ModelUnavailable) as info:
            client.complete(MESSAGES)
    assert info.value.reason.startswith("timed out")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_refusals_are_permanent_at_once(
    scripted: Callable[..., ScriptedModel], status: int
) -> None:
    model = scripted([HttpError(status, f"NOPE-{status}"), text("never")])
    with pytest.raises(ModelRefused) as info:
        make_client(model.base_url, max_attempts=5).complete(MESSAGES)
    exc = info.value
    assert (exc.provider, exc.kind, exc.reason) == ("scripted", "permanent", f"HTTP {status}")
    assert f"NOPE-{status}" in str(exc) and len(model.requests) == 1


def test_a_request_too_large_is_the_storys_own_error(
    scripted: Callable[..., ScriptedModel],
) -> None:
    model = scripted([HttpError(413, "too big")])
    with pytest.raises(LlmError) as info:
        make_client(model.base_url).complete(MESSAGES)
    assert not isinstance(info.value, ModelOutage)


# --------------------------------------------------------------------------- the breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def breakers(tmp_path: Path, clock: Clock, **kwargs: Any) -> Breakers:
    return Breakers(tmp_path / "runs" / "breakers.json", Backoff(10.0, 40.0), clock=clock, **kwargs)


def test_transient_outage_opens_then_one_probe_closes(tmp_path: Path) -> None:
    clock, said, opened = Clock(), [], []
    b = breakers(
        tmp_path, clock, say=lambda e, **f: said.append(e), on_open=opened.append, draw=lambda: 1
    )
    assert b.admit(["p"], "a")  # nothing known of p: closed
    b.trip("p", "transient", "HTTP 503", "a")
    b.trip("p", "transient", "HTTP 503", "b")  # another story, same outage: no change
    (state,) = b.snapshot()
    assert (state.state, state.failures, state.retry_at) == (OPEN, 1, clock.now + 10)
    assert opened == [
        {"provider": "p", "kind": "transient", "reason": "HTTP 503", "retry_at": clock.now + 10}
    ]
    assert not b.admit(["p"], "c")
    assert b.next_due() == 10
    clock.now += 10
    assert b.admit(["p"], "c")  # the probe
    assert not b.admit(["p"], "d")  # exactly one
    assert b.snapshot()[0].state == HALF_OPEN and b.snapshot()[0].probe == "c"
    b.answered(["p"], "d")  # not the probe: nothing
    assert b.snapshot()[0].state == HALF_OPEN
    b.answered(["p"], "c")
    assert b.snapshot()[0].state == CLOSED and b.admit(["p"], "d")
    assert said.count("provider unavailable") == 1 and "provider back" in said
    assert len(opened) == 1


def test_failed_probes_double_the_wait_up_to_the_cap(tmp_path: Path) -> None:
    clock = Clock()
    b = breakers(tmp_path, clock, draw=lambda: 1)
    waits = []
    for _ in range(5):
        b.trip("p", "transient", "connection failed", "a")
        retry_at = b.snapshot()[0].retry_at
        assert retry_at is not None
        waits.append(retry_at - clock.now)
        clock.now = retry_at
        assert b.admit(["p"], "a")
    assert waits == [10, 20, 40, 40, 40]


def test_backoff_is_jittered_within_its_upper_half() -> None:
    backoff = Backoff(10.0, 40.0)
    assert backoff.delay(1, lambda: 0.0) == 5.0 and backoff.delay(1, lambda: 1.0) == 10.0
    assert backoff.delay(100, lambda: 0.0) == 20.0 and backoff.delay(100, lambda: 1.0) == 40.0
    assert 20.0 <= backoff.delay(10_000) <= 40.0  # no overflow however long the outage


def test_a_probe_that_ends_without_an_answer_lets_the_next_story_try(tmp_path: Path) -> None:
    clock = Clock()
    b = breakers(tmp_path, clock)
    b.trip("p", "transient", "HTTP 502", "a")
    clock.now += 100
    assert b.admit(["p", "q"], "a")
    b.ended(["p", "q"], "a")
    assert b.snapshot()[0].state == OPEN and b.admit(["p"], "b")


def test_a_story_of_two_providers_waits_for_both(tmp_path: Path) -> None:
    clock = Clock()
    b = breakers(tmp_path, clock)
    b.trip("p", "transient", "HTTP 502", "a")
    clock.now += 100
    b.trip("q", "transient", "HTTP 502", "a")
    assert not b.admit(["p", "q"], "b")
    assert b.snapshot()[0].state == OPEN  # p due but not taken as a probe for nothing


def test_permanent_refusal_stops_once_until_a_restart(tmp_path: Path) -> None:
    clock, said, opened = Clock(), [], []
    b = breakers(tmp_path, clock, say=lambda e, **f: said.append(e), on_open=opened.append)
    b.trip("p", "permanent", "HTTP 401: bad key", "a")
    b.trip("p", "permanent", "HTTP 401: bad key", "b")
    b.trip("p", "transient", "HTTP 503", "c")  # stays stopped
    clock.now += 1e9
    assert not b.admit(["p"], "d") and b.stopped(["p"])
    assert said.count("provider stopped") == 1
    assert opened == [
        {"provider": "p", "kind": "permanent", "reason": "HTTP 401: bad key", "retry_at": None}
    ]
    again = breakers(tmp_path, clock, say=lambda e, **f: said.append(e))
    again.start()  # `hero watch` restarted: the user says it is fixed
    assert again.admit(["p"], "d") and "provider restarted" in said


def test_breakers_persist_across_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    b = breakers(tmp_path, clock, draw=lambda: 0.5)
    b.trip("p", "transient", "HTTP 503", "a")
    b.trip("q", "transient", "HTTP 500", "a")
    clock.now += 100
    assert b.admit(["q"], "b")  # q half-open when the daemon dies
    on_disk = read_breakers(tmp_path / "runs" / "breakers.json")
    assert on_disk["p"].retry_at == 1_000_000.0 + 7.5 and on_disk["q"].state == HALF_OPEN

    clock.now = 1_000_000.0  # a restart before p's retry_at
    again = breakers(tmp_path, clock)
    again.start()
    by_name = {x.provider: x for x in again.snapshot()}
    assert by_name["p"].state == OPEN and by_name["p"].retry_at == 1_000_000.0 + 7.5
    assert by_name["q"].state == OPEN and by_name["q"].retry_at == clock.now  # its probe died
    assert not again.admit(["p"], "b") and again.admit(["q"], "b")


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        b'{"breakers": {"p": {"provider": "q"}}}',
        b'{"breakers": {"p": 1}}',
        b'{"breakers": {"p": {"provider": "p", "state": "open", "retry_at": NaN}}}',
        b'{"breakers": {"p": {"provider": "p", "state": "open", "failures": -1}}}',
        b'{"breakers": {"p": {"provider": "p", "state": "ajar"}}}',
    ],
)
def test_an_unreadable_breakers_file_is_said_and_started_afresh(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "runs" / "breakers.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    said: list[tuple[str, dict[str, Any]]] = []
    b = breakers(tmp_path, Clock(), say=lambda e, **f: said.append((e, f)))
    b.start()
    assert said[0][0] == "breakers unreadable" and str(path) in said[0][1]["reason"]
    assert b.snapshot() == [] and json.loads(path.read_text()) == {"breakers": {}}
    path.write_bytes(content)
    (row,) = collect_status(tmp_path)["breakers"]  # status says so too, and goes on
    assert row["state"] == "unreadable" and str(path) in row["reason"]


def test_an_alert_that_raises_is_said_and_changes_nothing(tmp_path: Path) -> None:
    said = []

    def alert(_event: dict[str, Any]) -> None:
        raise RuntimeError("hook down")

    b = breakers(tmp_path, Clock(), say=lambda e, **f: said.append(e), on_open=alert)
    b.trip("p", "transient", "HTTP 503", "a")
    assert "breaker alert failed" in said and b.snapshot()[0].state == OPEN


def test_status_shows_each_breaker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    clock.now = __import__("time").time()
    b = breakers(tmp_path, clock, draw=lambda: 1)
    b.trip("local", "transient", "connection failed (refused)", "a")
    b.trip("cloud", "permanent", "HTTP 401: invalid key", "b")
    assert main(["status", "--home", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "model provider cloud: STOPPED, none of its stories starts; fix it, then " in out
    assert "restart `hero watch`\n    why: HTTP 401: invalid key (story b)\n" in out
    assert "model provider local: unavailable, its stories wait; next try in " in out
    assert "    why: connection failed (refused) (story a)\n" in out
    rows = {r["provider"]: r for r in collect_status(tmp_path)["breakers"]}
    assert rows["local"]["state"] == OPEN and rows["cloud"]["state"] == STOPPED
    assert breaker_lines({"provider": "x", "state": CLOSED}, 0) == ["model provider x: ok"]


# --------------------------------------------------------------------------- hero watch


def outage_home(make_home: Callable[..., Path], model: ScriptedModel, **knobs: Any) -> Path:
    return make_home(model, **{**FAST, **knobs})


def drop_stories(home: Path, write_story: Callable[..., Path], n: int) -> list[str]:
    ids = [f"s{i}" for i in range(1, n + 1)]
    for sid in ids:
        write_story(home, sid, verify=[f"test -f {sid}-r1.txt"])
    return ids


def record(home: Path, sid: str) -> dict[str, Any] | None:
    try:
        return json.loads((home / "runs" / "state" / f"{sid}.json").read_text())
    except (FileNotFoundError, ValueError):  # none yet, or being replaced
        return None


def all_passed(home: Path, ids: list[str]) -> bool:
    return all((r := record(home, sid)) is not None and r["status"] == "passed" for sid in ids)


def breaker_of(home: Path, provider: str = "scripted") -> Any:
    try:
        return read_breakers(breakers_path(home)).get(provider)
    except ValueError:  # never half-written (atomic), but say nothing of it here
        return None


def events_between(daemon: Daemon, first: str, last: str) -> list[dict[str, Any]]:
    """The daemon's log events from the first ``first`` to the first ``last`` after it."""
    found, on = [], False
    for event in daemon.events():
        on = on or event.get("event") == first
        if on:
            found.append(event)
            if event.get("event") == last:
                break
    return found


@pytest.mark.slow
def test_watch_waits_out_an_outage_and_every_story_passes(
    scripted, make_home, write_story, procs: Procs
) -> None:
    # the first two stories wait inside their first model call, so that none can end
    # while the endpoint goes away (and no slot frees up for a story the breaker let by)
    gates = {"s1": threading.Event(), "s2": threading.Event()}
    policy = Policy(gates=gates)
    model = scripted(policy)
    port = model.port
    home = outage_home(make_home, model)
    ids = drop_stories(home, write_story, 6)
    daemon = procs.start(home)

    assert wait_for(lambda: len(model.requests) >= 2, ALL_DONE_S), daemon.output()
    model.stop()  # their connections are cut, and new ones refused
    for gate in gates.values():
        gate.set()
    daemon.wait_event("provider unavailable", timeout=ALL_DONE_S)
    # ... and stays away over a failed probe, its wait doubled
    assert wait_for(lambda: (b := breaker_of(home)) and b.failures >= 2, ALL_DONE_S), (
        daemon.output()
    )
    assert not all_passed(home, ids)
    back = scripted(policy, port=port)  # the same endpoint, answering again

    assert wait_for(lambda: all_passed(home, ids), ALL_DONE_S), daemon.output()
    assert back.requests  # the stories finished against the endpoint come back
    for sid in ids:
        state = record(home, sid)
        assert state is not None
        assert len(state["rounds"]) == 1 and "outage" not in state  # resumed, not re-run
    daemon.wait_event("finished", count=len(ids))  # logged just after the record is saved
    finished = daemon.events("finished")
    assert sorted(e["story"] for e in finished) == ids  # each ended once: passed
    assert {e["status"] for e in finished} == {"passed"}
    assert not [line for line in daemon.output().splitlines() if '"status": "error"' in line]
    paused = daemon.events("paused")
    assert paused and {e["kind"] for e in paused} == {"transient"}
    assert daemon.events("rejected") == []
    # while the breaker was open only its probes started
    window = events_between(daemon, "provider unavailable", "provider back")
    assert window[-1]["event"] == "provider back"
    started = [e for e in window if e["event"] == "started"]
    probes = [e for e in window if e["event"] == "provider probed"]
    assert len(started) == len(probes) >= 2
    breaker = breaker_of(home)
    assert breaker is not None and breaker.state == CLOSED
    assert len(daemon.events("provider unavailable")) == 1
    assert daemon.proc.poll() is None  # still watching


@pytest.mark.slow
def test_a_refused_key_stops_the_queue_once_and_spends_no_story(
    scripted, make_home, write_story, procs: Procs, capsys: pytest.CaptureFixture[str]
) -> None:
    fixed = {"key": False}
    policy = Policy()

    def handler(body: dict[str, Any]) -> Any:
        return policy(body) if fixed["key"] else HttpError(401, "Incorrect API key provided")

    model = scripted(handler)
    alerts = procs.log_dir / "alerts.jsonl"
    home = outage_home(make_home, model, notify_command=f"{{ cat; echo; }} >> {alerts}")
    ids = drop_stories(home, write_story, 6)
    daemon = procs.start(home, rescan_s=0.5)
    daemon.wait_event("provider stopped", timeout=ALL_DONE_S)

    def settled() -> bool:  # every story it started has come back
        started = daemon.events("started")
        return bool(started) and len(daemon.events("paused")) == len(started)

    assert wait_for(settled, ALL_DONE_S), daemon.output()
    daemon.wait_rescans(2)  # the queue was looked at again: still nothing starts
    started = sorted(e["story"] for e in daemon.events("started"))
    assert len(started) == 2  # the two that ran when the key was refused
    assert len(model.requests) == 2  # one refusal each, never retried
    stopped = daemon.events("provider stopped")
    assert len(stopped) == 1 and "Incorrect API key provided" in stopped[0]["reason"]
    for sid in ids:
        state = record(home, sid)
        if sid not in started:
            assert state is None  # unstarted
            continue
        assert state is not None and state["status"] == "interrupted"  # not error
        assert state["outage"]["kind"] == "permanent" and state["usage"]["llm_calls"] == 0
    assert (home / "inbox" / f"{ids[0]}.md").exists()
    assert main(["status", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "model provider scripted: STOPPED" in out and "paused on model provider" in out
    # the alert hook (hero.run.notify) heard of the breaker once; a paused story is no end
    assert wait_for(lambda: alerts.exists() and alerts.read_text().strip(), ALL_DONE_S)
    daemon.wait_rescans(1)
    sent = [json.loads(line) for line in alerts.read_text().splitlines() if line.strip()]
    assert [(e["event"], e["provider"], e["kind"]) for e in sent] == [
        ("breaker_open", "scripted", "permanent")
    ]
    assert "Incorrect API key provided" in sent[0]["reason"]

    # the user fixes the key and restarts `hero watch`: every story passes
    fixed["key"] = True
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.wait_exit()
    again = procs.start(home, name="watch-2")
    assert wait_for(lambda: all_passed(home, ids), ALL_DONE_S), again.output()
    again.wait_event("finished", count=len(ids))
    assert {e["status"] for e in again.events("finished")} == {"passed"}

    def story_ends() -> list[dict[str, Any]]:
        lines = alerts.read_text().splitlines()
        return [
            e for line in lines if line.strip() and (e := json.loads(line))["event"] == "story_end"
        ]

    assert wait_for(lambda: len(story_ends()) >= len(ids), ALL_DONE_S)
    assert sorted(e["id"] for e in story_ends()) == ids  # one each, when it passed


@pytest.mark.slow
def test_kill_9_while_a_breaker_is_open_then_restart_recovers(
    scripted, make_home, write_story, procs: Procs, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = Policy()
    model = scripted(policy)
    port = model.port
    model.stop()  # down from the start
    home = outage_home(make_home, model)
    ids = drop_stories(home, write_story, 3)
    daemon = procs.start(home)
    daemon.wait_event("provider unavailable", timeout=ALL_DONE_S)
    os.kill(daemon.pid, signal.SIGKILL)  # open, or half-open with a probe under way
    daemon.wait_exit()

    report = collect_status(home)
    assert [b["state"] for b in report["breakers"]] in ([OPEN], [HALF_OPEN])
    assert not report["daemon"]["running"]
    assert main(["status", "--home", str(home)]) == 0
    assert "model provider scripted: " in capsys.readouterr().out

    back = scripted(policy, port=port)  # the endpoint is back
    again = procs.start(home, name="watch-2")
    held = again.wait_event("provider still held back", timeout=ALL_DONE_S)
    assert held["provider"] == "scripted"  # the breaker outlived the daemon
    assert wait_for(lambda: all_passed(home, ids), ALL_DONE_S), again.output()
    assert back.requests
    again.wait_event("finished", count=len(ids))
    assert {e["status"] for e in again.events("finished")} == {"passed"}
    assert again.events("provider back")
    assert not [line for line in again.output().splitlines() if '"status": "error"' in line]
    breaker = breaker_of(home)
    assert breaker is not None and breaker.state == CLOSED


# --------------------------------------------------------------------------- the Celery engine


@pytest.mark.slow
def test_on_the_celery_engine_a_story_paused_on_its_worker_waits_for_the_breaker(
    cluster: Any, scripted, write_story
) -> None:
    """The coordinator learns a remote story's outage from the record its worker published:
    the story is not sent on to another worker (they share the provider) nor failed; it
    waits for the breaker, and passes once the provider answers again."""
    from engine_support import Policy as RemotePolicy

    policy = RemotePolicy()
    down = {"on": True}

    def handler(body: dict[str, Any]) -> Any:
        return HttpError(503, "overloaded") if down["on"] else policy(body)

    model = scripted(handler)
    home = cluster.home(model, outage_backoff_s=0.5, outage_backoff_max_s=1.0)
    ids = drop_stories(home, write_story, 2)
    cluster.start_worker(concurrency=2)
    coordinator = cluster.start_coordinator("--exit-when-idle")
    coordinator.wait_event("provider unavailable", timeout=ALL_DONE_S)
    paused = coordinator.wait_event("paused")
    assert (paused["provider"], paused["kind"]) == ("scripted", "transient")
    down["on"] = False

    assert coordinator.wait_exit(timeout=ALL_DONE_S) == 0, cluster.outputs()
    for sid in ids:
        state = coordinator.state(sid)
        assert state is not None and state["status"] == "passed", (sid, state)
        assert [r["round"] for r in state["rounds"]] == [1] and "outage" not in state
    assert {e["status"] for e in coordinator.events("finished")} == {"passed"}
    assert coordinator.events("provider back")
    assert not coordinator.events("sent again")  # waited for the breaker, not resent


def test_only_the_probe_failing_reopens_a_half_open_breaker(tmp_path: Path) -> None:
    clock = Clock()
    b = breakers(tmp_path, clock, draw=lambda: 1)
    b.trip("p", "transient", "HTTP 503", "a")
    clock.now += 10
    assert b.admit(["p"], "probe")
    b.trip("p", "transient", "HTTP 503", "old")  # running since before it opened
    assert b.snapshot()[0].state == HALF_OPEN
    b.answered(["p"], "probe")
    assert b.snapshot()[0].state == CLOSED


def test_a_restart_drops_the_breakers_of_providers_no_role_uses(tmp_path: Path) -> None:
    clock = Clock()
    b = breakers(tmp_path, clock)
    b.trip("gone", "transient", "HTTP 503", "a")
    b.trip("kept", "transient", "HTTP 503", "a")
    again = breakers(tmp_path, clock)
    again.start(["kept"])
    assert [x.provider for x in again.snapshot()] == ["kept"]
    assert list(read_breakers(tmp_path / "runs" / "breakers.json")) == ["kept"]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "This model's maximum context length is 8192 tokens"),
        (400, "Input is too long for requested model."),
        (400, "The response was filtered due to our content filter"),
        (422, "Your request was rejected by our content management policy"),
    ],
)
def test_a_refusal_of_one_storys_conversation_is_that_storys_error(
    scripted: Callable[..., ScriptedModel], status: int, message: str
) -> None:
    """What the worker wrote (a huge tool result, text a filter refuses) must not stop
    every story of the provider: only its own story ends in error."""
    model = scripted([HttpError(status, message)])
    with pytest.raises(LlmError) as info:
        make_client(model.base_url).complete(MESSAGES)
    assert not isinstance(info.value, ModelOutage) and message in str(info.value)


def test_an_unsupported_parameter_refuses_every_request(
    scripted: Callable[..., ScriptedModel],
) -> None:
    model = scripted(
        [HttpError(400, "Unsupported parameter: 'max_tokens'; use 'max_completion_tokens'")]
    )
    with pytest.raises(ModelRefused):
        make_client(model.base_url).complete(MESSAGES)


def test_a_retry_at_far_ahead_holds_stories_back_no_longer_than_the_cap(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "runs" / "breakers.json"
    path.parent.mkdir(parents=True)
    far = {"provider": "p", "state": "open", "retry_at": clock.now + 1e9, "failures": 3}
    path.write_text(json.dumps({"breakers": {"p": far}}))
    b = breakers(tmp_path, clock)
    b.start()
    assert b.snapshot()[0].retry_at == clock.now + 40  # Backoff(10, 40)
