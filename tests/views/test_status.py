"""Tests for `hero status`: state rows, the inbox queue, rejected stories, the daemon lock."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hero.cli import main
from hero.state import MAX_STATE_BYTES, RunState, file_digest, save_state, state_path
from hero.story.record import MAX_STORY_BYTES
from hero.views.status import (
    WIDTH,
    collect_status,
    daemon_status,
    format_cost,
    format_duration,
    format_status,
    format_tokens,
)

NOW = 1_800_000_000.0


def write_story(home: Path, name: str, text: str | None = None, **fm: str) -> Path:
    path = home / "inbox" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        front = {"id": name, "title": f"Story {name}", **fm}
        text = "---\n" + "".join(f"{k}: {v}\n" for k, v in front.items()) + "---\n\n## Goal\nx\n"
    path.write_text(text, encoding="utf-8")
    return path


def set_age(path: Path, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(path, (t, t))


def status_json(home: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["status", "--json", "--home", str(home)]) == 0
    return json.loads(capsys.readouterr().out)


def status_text(home: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["status", "--home", str(home)]) == 0
    return capsys.readouterr().out


def running_state() -> RunState:
    return RunState(
        id="fix-login",
        status="running",
        title="Fix the login",
        branch="hero/fix-login",
        current_round=2,
        phase="verify",
        rounds=[{"round": 1}],
        usage={"tokens_in": 10_000, "tokens_out": 2_345, "llm_calls": 4, "cost_usd": 0.0123},
        started_at=NOW - 192,
    )


# --------------------------------------------------------------------------- rows


def hold_story_lock(home: Path, story_id: str) -> Any:
    """Be the live run of a story, as `hero run` or `hero watch` is while running it."""
    lock = home / "runs" / "locks" / f"{story_id}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    held = open(lock, "a")  # noqa: SIM115 - closed by the caller
    fcntl.flock(held, fcntl.LOCK_EX)
    return held


def test_rows_carry_every_field(tmp_path: Path) -> None:
    save_state(tmp_path, running_state())
    held = hold_story_lock(tmp_path, "fix-login")
    save_state(
        tmp_path,
        RunState(
            id="add-slug",
            status="passed",
            branch="hero/add-slug",
            current_round=3,
            rounds=[{"round": 1}, {"round": 2}, {"round": 3}],
            usage={"tokens_in": 500, "tokens_out": 20, "llm_calls": 6, "cost_usd": 0.0},
            started_at=NOW - 10_000,
            finished_at=NOW - 10_000 + 3725,
        ),
    )
    save_state(
        tmp_path,
        RunState(
            id="broken",
            status="error",
            branch="hero/broken",
            current_round=1,
            error="model error: the endpoint answered 503\nafter 3 attempts",
            started_at=NOW - 50,
            finished_at=NOW - 8,
        ),
    )

    report = collect_status(tmp_path, now=NOW)

    rows = {r["id"]: r for r in report["stories"]}
    assert report["stories"][0]["id"] == "fix-login"  # running first
    run = rows["fix-login"]
    assert run["status"] == "running"
    assert run["current_round"] == 2
    assert run["rounds_done"] == 1
    assert run["phase"] == "verify"
    assert run["elapsed_s"] == 192
    assert (run["tokens"], run["tokens_in"], run["tokens_out"]) == (12_345, 10_000, 2_345)
    assert run["cost_usd"] == 0.0123
    assert run["branch"] == "hero/fix-login"
    assert rows["add-slug"]["elapsed_s"] == 3725  # finished_at - started_at
    assert rows["add-slug"]["rounds_done"] == 3
    assert rows["broken"]["error"].startswith("model error")

    text = format_status(report)
    lines = text.splitlines()
    assert lines[0] == "daemon: not running"
    header = next(line for line in lines if line.startswith("STORY"))
    for column in ("STATUS", "ROUND", "DONE", "PHASE", "ELAPSED", "TOKENS", "COST", "BRANCH"):
        assert column in header
    run_line = next(line for line in lines if line.startswith("fix-login"))
    assert run_line.split() == [
        "fix-login",
        "running",
        "2",
        "1",
        "verify",
        "3m12s",
        "12.3k",
        "$0.0123",
        "hero/fix-login",
    ]
    slug_line = next(line for line in lines if line.startswith("add-slug"))
    assert slug_line.split() == ["add-slug", "passed", "3", "3", "-", "1h02m", "520", "-"] + [
        "hero/add-slug"
    ]
    # the columns line up
    assert run_line.index("running") == header.index("STATUS") == slug_line.index("passed")
    held.close()
    error_line = lines[lines.index(next(x for x in lines if x.startswith("broken"))) + 1]
    assert error_line == "    error: model error: the endpoint answered 503 after 3 attempts"
    assert "queue: empty" in lines


def test_cached_input_tokens_are_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = running_state()
    state.usage = {**state.usage, "tokens_cached": 8_100}
    save_state(tmp_path, state)
    save_state(tmp_path, RunState(id="plain", status="passed", usage={"tokens_in": 9}))

    rows = {r["id"]: r for r in status_json(tmp_path, capsys)["stories"]}
    text = status_text(tmp_path, capsys)

    assert rows["fix-login"]["tokens_cached"] == 8_100
    assert rows["plain"]["tokens_cached"] == 0
    lines = text.splitlines()
    run_line = next(line for line in lines if line.startswith("fix-login"))
    assert "  12.3k (8100 cached)  " in run_line
    plain_line = next(line for line in lines if line.startswith("plain"))
    assert "cached" not in plain_line
    header = next(line for line in lines if line.startswith("STORY"))
    assert run_line.index("12.3k") == header.index("TOKENS") == plain_line.index("9 ")


def test_estimated_usage_is_said_to_be_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Calls whose answer had no token counts were counted by hero's estimate: the spend is
    marked ``~`` and a line says how much of it is estimated; an older record (no such keys)
    reads as counted."""
    state = running_state()
    state.usage = {**state.usage, "llm_calls": 9, "estimated_calls": 4, "estimated_tokens": 5_000}
    save_state(tmp_path, state)
    save_state(tmp_path, RunState(id="plain", status="passed", usage={"tokens_in": 9}))

    rows = {r["id"]: r for r in status_json(tmp_path, capsys)["stories"]}
    lines = status_text(tmp_path, capsys).splitlines()

    assert (rows["fix-login"]["estimated_calls"], rows["fix-login"]["estimated_tokens"]) == (
        4,
        5_000,
    )
    assert (rows["plain"]["estimated_calls"], rows["plain"]["estimated_tokens"]) == (0, 0)
    run_line = next(line for line in lines if line.startswith("fix-login"))
    assert run_line.split()[6:8] == ["~12.3k", "~$0.0123"]
    assert lines[lines.index(run_line) + 1] == (
        "    estimated: 4 of 9 calls came without token counts; ~5000 tokens are hero's estimate"
    )
    plain_line = next(line for line in lines if line.startswith("plain"))
    assert "~" not in plain_line and not lines[lines.index(plain_line) + 1].startswith("    ")


def test_json_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = running_state()
    state.started_at = time.time() - 192
    save_state(tmp_path, state)

    report = status_json(tmp_path, capsys)

    assert set(report) == {"daemon", "breakers", "overlap", "stories", "queue", "rejected"}
    assert report["daemon"] == {"running": False, "pid": None}
    (row,) = report["stories"]
    for key in (
        "id",
        "status",
        "current_round",
        "rounds_done",
        "phase",
        "elapsed_s",
        "tokens",
        "cost_usd",
        "branch",
        "error",
    ):
        assert key in row
    assert row["elapsed_s"] >= 192  # running: measured up to now
    assert report["queue"] == [] and report["rejected"] == []


def test_interrupted_elapsed_runs_to_the_last_update(tmp_path: Path) -> None:
    state = RunState(id="s1", status="interrupted", current_round=1, started_at=time.time() - 30)
    save_state(tmp_path, state)  # stamps updated_at = now

    (row,) = collect_status(tmp_path, now=time.time() + 10_000)["stories"]

    assert 29 <= row["elapsed_s"] <= 60  # not "now - started_at": nothing is running


def test_home_without_runs_or_inbox_is_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = status_json(tmp_path, capsys)
    assert report == {
        "daemon": {"running": False, "pid": None},
        "breakers": [],
        "overlap": None,  # no configuration to read it from
        "stories": [],
        "queue": [],
        "rejected": [],
    }
    text = status_text(tmp_path, capsys)
    assert "stories: none" in text and "queue: empty" in text
    assert not (tmp_path / "runs").exists()  # status creates nothing


def test_missing_home_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--home", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


# --------------------------------------------------------------------------- unreadable


def test_unreadable_state_is_a_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_state(tmp_path, running_state())
    state_path(tmp_path, "garbled").write_text("{not json", encoding="utf-8")
    state_path(tmp_path, "other").write_text(json.dumps({"id": "someone-else"}), encoding="utf-8")
    state_path(tmp_path, "typed").write_text(
        json.dumps({"id": "typed", "status": "passed", "usage": {"tokens_in": "lots"}}),
        encoding="utf-8",
    )

    report = status_json(tmp_path, capsys)

    rows = {r["id"]: r for r in report["stories"]}
    assert rows["fix-login"]["status"] == "running"
    for story_id in ("garbled", "other", "typed"):
        assert rows[story_id]["status"] == "unreadable"
        assert f"runs/state/{story_id}.json" in rows[story_id]["error"]
    assert "Expecting property name" in rows["garbled"]["error"]
    assert "not a state record" in rows["other"]["error"]
    assert "lots" in rows["typed"]["error"]

    text = status_text(tmp_path, capsys)
    garbled = next(line for line in text.splitlines() if line.startswith("garbled"))
    assert garbled.split()[1] == "unreadable"
    assert "error: runs/state/garbled.json: Expecting property name" in text


def _nested_story(path: Path) -> None:
    text = "---\nid: n\ntitle: T\nscope: " + "[" * 1000 + "]" * 1000 + "\n---\nx\n"
    path.write_text(text)


def _huge(path: Path, size: int) -> None:
    path.write_text("---\nid: huge\ntitle: T\n---\nx\n")
    os.truncate(path, size)  # sparse: as large as it says, at no cost


BAD_INBOX_FILES: dict[str, tuple[Any, str]] = {  # name -> (make it, what status says)
    "binary": (
        lambda p: p.write_bytes(bytes(range(256)) * 8),
        "file: expected a UTF-8 markdown file; found binary data (NUL bytes)",
    ),
    "huge": (lambda p: _huge(p, 2 * MAX_STORY_BYTES), "file: too large: expected at most"),
    "fifo": (os.mkfifo, "file: expected a regular markdown file; found a FIFO (named pipe)"),
    "dev-zero": (
        lambda p: p.symlink_to("/dev/zero"),
        "file: expected a regular markdown file; found a character device",
    ),
    "not-utf8": (
        lambda p: p.write_bytes(b"---\nid: l\ntitle: caf\xe9\n---\nx\n"),
        "file: expected UTF-8 text; found byte 0xe9 at offset 20",
    ),
    "nested-yaml": (_nested_story, "levels of nested lists and mappings"),
    "empty-body": (lambda p: p.write_text("---\nid: e\ntitle: T\n---\n\n"), "body: expected"),
}


def status_in_a_child(home: Path, *args: str) -> str:
    """`hero status` as a child process: a hang fails the test instead of hanging it."""
    out = subprocess.run(
        [sys.executable, "-m", "hero", "status", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    return out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(BAD_INBOX_FILES))
def test_a_bad_inbox_file_is_a_rejected_row(tmp_path: Path, kind: str) -> None:
    make, reason = BAD_INBOX_FILES[kind]
    write_story(tmp_path, "good")
    make(tmp_path / "inbox" / f"{kind}.md")

    report = json.loads(status_in_a_child(tmp_path, "--json"))

    assert [item["id"] for item in report["queue"]] == ["good"]
    (rejected,) = report["rejected"]
    assert rejected["path"] == f"inbox/{kind}.md"
    assert reason in rejected["reason"] and "\n" not in rejected["reason"]
    assert f"inbox/{kind}.md: " in status_in_a_child(tmp_path)


def _sparse_state(path: Path) -> None:
    path.write_text("{}")
    os.truncate(path, MAX_STATE_BYTES + 1)


BAD_STATE_FILES: dict[str, tuple[Any, str]] = {
    "garbage": (lambda p: p.write_bytes(b"\x00\xff not json"), "invalid"),
    "a-list": (lambda p: p.write_text("[1, 2, 3]"), "not a state record"),
    "not-utf8": (lambda p: p.write_bytes(b'{"id": "not-utf8", "title": "caf\xe9"}'), "utf-8"),
    "fifo": (os.mkfifo, "expected a regular state file; found a FIFO (named pipe)"),
    "a-directory": (lambda p: p.mkdir(), "expected a regular state file; found a directory"),
    "huge": (_sparse_state, "too large"),
    "deep-json": (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "recursion"),
    "infinite": (
        lambda p: p.write_text(
            '{"id": "infinite", "status": "running", "usage": {"tokens_in": Infinity}}'
        ),
        "unexpected field value",
    ),
    "wrong-status": (lambda p: p.write_text('{"id": "wrong-status", "status": 7}'), "status"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(BAD_STATE_FILES))
def test_a_bad_state_file_is_an_unreadable_row(tmp_path: Path, kind: str) -> None:
    make, reason = BAD_STATE_FILES[kind]
    save_state(tmp_path, RunState(id="fine", status="passed"))
    make(state_path(tmp_path, kind))

    report = json.loads(status_in_a_child(tmp_path, "--json"))

    rows = {r["id"]: r for r in report["stories"]}
    assert rows["fine"]["status"] == "passed"
    assert rows[kind]["status"] == "unreadable"
    assert rows[kind]["error"].startswith(f"runs/state/{kind}.json: ")
    assert reason in rows[kind]["error"].lower() or reason in rows[kind]["error"]
    assert "\n" not in rows[kind]["error"]
    text = status_in_a_child(tmp_path)
    assert f"error: runs/state/{kind}.json: " in text


# --------------------------------------------------------------------------- queue


def test_queue_by_priority_then_oldest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The queue is what `hero watch` would run, in its order (hero.daemon.queue's rule)."""
    ages = {
        "low-old": ("low", 5000),
        "high-new": ("high", 10),
        "normal-old": (None, 4000),
        "normal-new": ("normal", 20),
        "high-old": ("high", 3000),
        "was-queued": ("normal", 30),
        "is-running": ("high", 9000),
        "left-running": ("low", 9000),  # its run died: the next daemon resumes it
        "has-passed": ("high", 9000),
        "gave-up": ("high", 9000),  # unchanged since: waits for an edit or a retry
        "gave-up-edited": ("low", 6000),  # edited since: runs again
    }
    paths = {}
    for name, (priority, age) in ages.items():
        paths[name] = write_story(tmp_path, name, **({"priority": priority} if priority else {}))
        set_age(paths[name], age)
    save_state(tmp_path, RunState(id="was-queued", status="queued"))
    save_state(tmp_path, RunState(id="is-running", status="running", started_at=time.time()))
    save_state(tmp_path, RunState(id="left-running", status="running", started_at=NOW))
    save_state(tmp_path, RunState(id="has-passed", status="passed"))
    digest = file_digest(paths["gave-up"])
    save_state(tmp_path, RunState(id="gave-up", status="gave_up", story_digest=digest))
    save_state(tmp_path, RunState(id="gave-up-edited", status="gave_up", story_digest="0" * 64))
    held = hold_story_lock(tmp_path, "is-running")  # a live run of it

    report = status_json(tmp_path, capsys)

    order = [item["id"] for item in report["queue"]]
    assert order == [
        "high-old",
        "high-new",
        "normal-old",
        "was-queued",
        "normal-new",
        "left-running",
        "gave-up-edited",
        "low-old",
    ]
    first = report["queue"][0]
    assert first["priority"] == "high"
    assert first["path"] == "inbox/high-old.md"
    assert first["title"] == "Story high-old"
    assert first["age_s"] >= 3000
    (passed,) = report["rejected"]  # as `hero watch` refuses it
    assert passed["path"] == "inbox/has-passed.md"
    assert "already passed" in passed["reason"]

    text = status_text(tmp_path, capsys)
    queue_lines = text.split("queue (8)")[1].splitlines()[2:10]
    assert [line.split()[2] for line in queue_lines] == order
    assert queue_lines[0].split()[:2] == ["1", "high"]
    held.close()


def test_queue_notes_unmet_dependencies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_story(tmp_path, "base")
    write_story(tmp_path, "top", depends_on="[base, done-one]")
    save_state(tmp_path, RunState(id="done-one", status="passed"))

    report = status_json(tmp_path, capsys)

    top = next(item for item in report["queue"] if item["id"] == "top")
    assert top["depends_on"] == ["base", "done-one"]
    assert top["waits_for"] == ["base"]
    assert "waits for base" in status_text(tmp_path, capsys)


def test_invalid_stories_are_rejected_with_their_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_story(tmp_path, "good")
    write_story(tmp_path, "urgent", priority="urgent")
    write_story(tmp_path, "plain", text="just some notes, no frontmatter\n")
    (tmp_path / "inbox" / "notes.txt").write_text("not a story")
    (tmp_path / "inbox" / "sub.md").mkdir()  # a directory named like a story

    report = status_json(tmp_path, capsys)

    assert [item["id"] for item in report["queue"]] == ["good"]
    reasons = {item["path"]: item["reason"] for item in report["rejected"]}
    assert set(reasons) == {"inbox/urgent.md", "inbox/plain.md"}
    assert reasons["inbox/urgent.md"].startswith("priority: expected one of low, normal, high")
    assert reasons["inbox/plain.md"].startswith("frontmatter: expected the file to start")
    assert all("\n" not in r for r in reasons.values())

    text = status_text(tmp_path, capsys)
    assert "rejected (2)" in text
    assert "  inbox/urgent.md: priority: expected one of" in text


def test_a_second_file_with_the_same_id_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As `hero watch` does: the file that came first keeps the id, whatever its priority."""
    set_age(write_story(tmp_path, "copy", text=None, id="dup", title="Old", priority="low"), 90)
    set_age(write_story(tmp_path, "dup", priority="high"), 10)

    report = status_json(tmp_path, capsys)

    assert [(q["id"], q["path"]) for q in report["queue"]] == [("dup", "inbox/copy.md")]
    assert report["rejected"] == [
        {
            "path": "inbox/dup.md",
            "reason": "id: story id 'dup' is already queued from inbox/copy.md",
        }
    ]


# --------------------------------------------------------------------------- daemon


def test_daemon_running_while_the_lock_is_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "runs" / "watch.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write("4242\n")
        fh.flush()

        assert status_json(tmp_path, capsys)["daemon"] == {"running": True, "pid": 4242}
        assert status_text(tmp_path, capsys).startswith("daemon: running (pid 4242)")

        fcntl.flock(fh, fcntl.LOCK_UN)

    # the pid is still in the file, but nobody holds the lock: a daemon that has ended
    assert daemon_status(tmp_path) == {"running": False, "pid": None}
    assert status_text(tmp_path, capsys).startswith("daemon: not running")
    # status let go of its test lock: a daemon can take the lock exclusively
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_daemon_without_a_pid_yet(tmp_path: Path) -> None:
    lock = tmp_path / "runs" / "watch.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert daemon_status(tmp_path) == {"running": True, "pid": None}


def test_no_lock_file_means_not_running_and_none_is_made(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    assert daemon_status(tmp_path) == {"running": False, "pid": None}
    assert not (tmp_path / "runs" / "watch.lock").exists()


# --------------------------------------------------------------------------- format


def test_long_names_fit_in_the_width(tmp_path: Path) -> None:
    long_id = "a-really-long-story-identifier-that-goes-on-and-on-" + "x" * 30
    save_state(
        tmp_path,
        RunState(
            id=long_id,
            status="interrupted",
            branch=f"hero/{long_id}",
            current_round=12,
            error="internal error: " + "boom " * 50,
            started_at=NOW - 100_000,
            finished_at=NOW,
        ),
    )
    save_state(tmp_path, running_state())
    write_story(tmp_path, "q-" + "y" * 90)

    text = format_status(collect_status(tmp_path, now=NOW))

    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "1d03h" in text


def test_formatters() -> None:
    assert [format_duration(s) for s in (None, 0, 59.9, 60, 192, 3725, 90_000)] == [
        "-",
        "0s",
        "59s",
        "1m00s",
        "3m12s",
        "1h02m",
        "1d01h",
    ]
    assert [format_tokens(n) for n in (0, 9_999, 12_345, 1_234_567)] == [
        "0",
        "9999",
        "12.3k",
        "1.23M",
    ]
    assert [format_cost(c) for c in (0.0, 0.00001, 0.0123, 1.5)] == [
        "-",
        "<$0.0001",
        "$0.0123",
        "$1.5000",
    ]


def test_running_state_without_a_live_run_is_marked_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path
    save_state(home, running_state())
    story_id = running_state().id
    (home / "runs" / "locks").mkdir(parents=True)
    (home / "runs" / "locks" / f"{story_id}.lock").touch()

    # nobody holds the story's lock: the run that wrote `running` is gone
    assert status_json(home, capsys)["stories"][0]["stale"] is True
    text = status_text(home, capsys)
    assert f"{story_id}  stale" in text and "no hero process runs it" in text

    with hold_story_lock(home, story_id):  # a live run holds it
        assert status_json(home, capsys)["stories"][0]["stale"] is False
        assert "stale" not in status_text(home, capsys)
