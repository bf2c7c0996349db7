"""`hero watch` and stories whose scopes overlap (hero.story.overlap, hero.daemon.overlap),
end to end on the scripted model: with `overlap: serial` two overlapping stories run one
after the other, with the default (`parallel`) side by side and flagged; a third story whose
scope overlaps neither runs beside them either way.

Order is proven by the run records' start and end times, and "side by side" by holding the
stories' first model calls (Policy's gates) until every one of them is running: no test here
measures a duration."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import backlog
from watch_support import Policy, Procs, wait_for, worker_rounds

from hero.run.events import schema
from hero.views.status import collect_status

pytestmark = pytest.mark.slow  # end to end: hero watch runs for real

#: a and b share /shared; c shares nothing. Each story's worker commits <id>-r1.txt at the
#: root (watch_support.Policy), inside its scope.
SCOPES = {
    "a": ["/shared", "/a-r1.txt"],
    "b": ["/shared", "/b-r1.txt"],
    "c": ["/c-r1.txt"],
}
VALIDATOR = jsonschema.Draft202012Validator(schema())


def record(home: Path, sid: str) -> dict[str, Any] | None:
    try:
        loaded: dict[str, Any] = json.loads((home / "runs" / "state" / f"{sid}.json").read_text())
    except (FileNotFoundError, ValueError):  # not yet, or being replaced
        return None
    return loaded


def running(home: Path, *ids: str) -> bool:
    return all((record(home, sid) or {}).get("status") == "running" for sid in ids)


def stories(home: Path, write_story: Any) -> None:
    paths = [
        write_story(home, sid, verify=[f"test -f {sid}-r1.txt"], scope=scope)
        for sid, scope in SCOPES.items()
    ]
    for n, path in enumerate(paths):  # a is the oldest: the queue takes a, b, c
        backlog(path)
        t = path.stat().st_mtime + n
        os.utime(path, (t, t))


def events_of(stdout: Path) -> list[dict[str, Any]]:
    events = []
    for line in stdout.read_text().splitlines():
        event = json.loads(line)
        errors = [e.message for e in VALIDATOR.iter_errors(event)]
        assert not errors, f"{errors}\n{line}"
        events.append(event)
    return events


def by_key(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["key"]: item for item in items}


def test_serial_runs_overlapping_stories_one_after_the_other(
    scripted, make_home, write_story, procs: Procs
) -> None:
    gates = {"a": threading.Event(), "c": threading.Event()}
    model = scripted(Policy(gates=gates))
    home = make_home(model, max_parallel=3, overlap="serial")
    stories(home, write_story)
    daemon = procs.start(home, "--exit-when-idle", "--events")
    try:
        # a and c run side by side, each held in its first model call
        assert wait_for(lambda: running(home, "a", "c") or daemon.proc.poll() is not None)
        assert wait_for(lambda: worker_rounds(model, "a") and worker_rounds(model, "c"))
        waited = daemon.wait_event("waiting", story="b")
        assert waited["reason"] == "waits for a to end: their scopes overlap (overlap: serial)"
        # b stays queued, never started, with the reason in status
        assert record(home, "b") is None
        report = collect_status(home)
        assert report["overlap"] == "serial"
        queued = by_key(report["queue"])
        assert list(queued) == ["b"]
        assert queued["b"]["overlap_waits_for"] == ["a"]
        assert "waits for a to end" in queued["b"]["overlap_reason"]
        rows = by_key(report["stories"])
        assert rows["a"]["overlaps"] == ["b"] and rows["c"]["overlaps"] == []
    finally:
        for gate in gates.values():
            gate.set()
    assert daemon.wait_exit() == 0, daemon.output()

    a, b, c = (record(home, sid) for sid in "abc")
    assert a and b and c
    assert {r["status"] for r in (a, b, c)} == {"passed"}
    assert a["finished_at"] <= b["started_at"]  # b ran after a ended
    assert c["started_at"] < a["finished_at"] and a["started_at"] < c["finished_at"]  # beside
    assert [e["story"] for e in daemon.events("started")] == ["a", "c", "b"]
    assert len(daemon.events("waiting", story="b")) == 1  # said once, not on every look
    events = events_of(daemon.out)
    assert not [e for e in events if e["type"] == "overlap"]  # none started beside another


def test_parallel_runs_them_side_by_side_and_flags_them(
    scripted, make_home, write_story, procs: Procs
) -> None:
    gates = {sid: threading.Event() for sid in SCOPES}
    model = scripted(Policy(gates=gates))
    home = make_home(model, max_parallel=3)  # overlap: parallel, the default
    stories(home, write_story)
    daemon = procs.start(home, "--exit-when-idle", "--events")
    try:
        assert wait_for(lambda: running(home, *SCOPES) or daemon.proc.poll() is not None)
        assert wait_for(lambda: all(worker_rounds(model, sid) for sid in SCOPES))
        report = collect_status(home)
        assert report["overlap"] == "parallel"
        rows = by_key(report["stories"])
        assert rows["a"]["overlaps"] == ["b"] and rows["b"]["overlaps"] == ["a"]
        assert rows["c"]["overlaps"] == []
    finally:
        for gate in gates.values():
            gate.set()
    assert daemon.wait_exit() == 0, daemon.output()

    records = [record(home, sid) for sid in SCOPES]
    assert all(r and r["status"] == "passed" for r in records)
    starts = [r["started_at"] for r in records if r]
    ends = [r["finished_at"] for r in records if r]
    assert max(starts) < min(ends)  # all three ran at once
    # b started beside a: the log and the event stream say so, right after its run_start
    said = daemon.events("overlap")
    assert [(e["story"], e["overlaps"]) for e in said] == [("b", ["a"])]
    events = events_of(daemon.out)
    flagged = [e for e in events if e["type"] == "overlap"]
    assert [(e["story"], e["with"], e["scope"], e["mode"]) for e in flagged] == [
        ("b", ["a"], SCOPES["b"], "parallel")
    ]
    mine = [e["type"] for e in events if e["story"] == "b"]
    assert mine[:2] == ["run_start", "overlap"] and mine[-1] == "result"


def test_serial_waits_for_an_overlapping_story_another_home_runs_on_the_repository(
    scripted, make_home, write_story, procs: Procs
) -> None:
    """One home has one `hero watch`; two homes on one repository are two daemons. The
    second, with `overlap: serial`, holds its story back while the first home's overlapping
    one runs (its lock in the repository says so), and runs it once that one ended."""
    gate = threading.Event()
    model = scripted(Policy(gates={"x": gate}))
    home = make_home(model, max_parallel=2)
    other = home.parent / "home2"
    shutil.copytree(home / "config", other / "config")
    roles = other / "config" / "roles.yaml"
    roles.write_text(roles.read_text() + "overlap: serial\n")
    backlog(write_story(home, "x", verify=["test -f x-r1.txt"], scope=["/shared", "/x-r1.txt"]))
    backlog(write_story(other, "y", verify=["test -f y-r1.txt"], scope=["/shared/y", "/y-r1.txt"]))
    first = procs.start(home, "--exit-when-idle")
    try:
        assert wait_for(lambda: running(home, "x") or first.proc.poll() is not None)
        assert wait_for(lambda: worker_rounds(model, "x"))
        second = procs.start(other, "--exit-when-idle", rescan_s=0.5)
        waited = second.wait_event("waiting", story="y")
        assert waited["reason"] == (
            f"waits for x (hero home {home.resolve()}) to end: their scopes overlap "
            "(overlap: serial)"
        )
        assert record(other, "y") is None
        queued = by_key(collect_status(other)["queue"])
        assert queued["y"]["overlap_waits_for"] == [f"x (hero home {home.resolve()})"]
    finally:
        gate.set()
    assert first.wait_exit() == 0, first.output()
    assert second.wait_exit() == 0, second.output()
    x, y = record(home, "x"), record(other, "y")
    assert x and y and x["status"] == y["status"] == "passed"
    assert x["finished_at"] <= y["started_at"]
    # said once in the log, not on every look at the queue
    assert len(second.events("waiting", story="y")) == 1
