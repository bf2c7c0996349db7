"""`hero status`, its JSON and the status page flag stories queued or running whose scopes
overlap (hero.story.overlap), and say what a story held back by `overlap: serial` waits for.

A story runs here as it does under any hero process: its run record says running, and the
process holds its lock in the home and in the target repository (hero.locks); another
home's story on the same repository holds the repository's lock only, naming its home."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import git

from hero.cli import main
from hero.locks import repo_story_lock
from hero.state import RunState, save_state
from hero.views.status import collect_status, format_status, queue_note


def story(home: Path, sid: str, scope: list[str] | None, ago: float) -> Path:
    path = home / "inbox" / f"{sid}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    front = {"id": sid, "title": f"Story {sid}"}
    if scope is not None:
        front["scope"] = json.dumps(scope)
    text = "---\n" + "".join(f"{k}: {v}\n" for k, v in front.items()) + "---\n\n## Goal\nx\n"
    path.write_text(text, encoding="utf-8")
    t = time.time() - ago
    os.utime(path, (t, t))
    return path


def make_home(where: Path, repo: Path, overlap: str | None) -> Path:
    (where / "config" / "providers").mkdir(parents=True)
    (where / "inbox").mkdir()
    (where / "config" / "providers" / "local.yaml").write_text(
        "name: local\nbase_url: http://127.0.0.1:9/v1\ndefault_model: m\n"
    )
    knobs = f"overlap: {overlap}\n" if overlap else ""
    (where / "config" / "roles.yaml").write_text(
        f"target_repo: {str(repo)!r}\n{knobs}worker:\n  provider: local\n"
        "reviewer:\n  provider: local\n"
    )
    return where


@contextlib.contextmanager
def running(home: Path, repo: Path, sid: str, path: Path) -> Iterator[None]:
    """Be the live run of story ``sid`` of ``home`` (its file ``path``)."""
    save_state(
        home,
        RunState(
            id=sid,
            status="running",
            title=f"Story {sid}",
            story_path=str(path),
            started_at=time.time() - 5,
        ),
    )
    common = Path(git(repo, "rev-parse", "--absolute-git-dir").strip())
    lock = home / "runs" / "locks" / f"{sid}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held, repo_story_lock(common, sid, home):
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


@pytest.fixture
def busy(tmp_path: Path, target_repo: Path) -> Iterator[tuple[Path, Path]]:
    """Story a (scope /shared) running; b (/shared/x.py, overlaps a) and c (/docs) queued;
    z of another home on the same repository running with scope /docs/**."""
    home = make_home(tmp_path / "home", target_repo, "serial")
    other = make_home(tmp_path / "other", target_repo, None)
    a = story(home, "a", ["/shared"], 30)
    story(home, "b", ["/shared/x.py"], 20)
    story(home, "c", ["/docs"], 10)
    z = story(other, "z", ["/docs/**"], 40)
    with running(home, target_repo, "a", a), running(other, target_repo, "z", z):
        yield home, other


def by_key(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["key"]: item for item in items}


def test_status_json_flags_overlaps_and_what_serial_waits_for(busy: tuple[Path, Path]) -> None:
    home, other = busy
    report = collect_status(home)
    assert report["overlap"] == "serial"
    z = f"z (hero home {other.resolve()})"
    rows = by_key(report["stories"])
    assert rows["a"]["status"] == "running" and not rows["a"]["stale"]
    assert rows["a"]["overlaps"] == ["b"]
    queue = by_key(report["queue"])
    assert list(queue) == ["b", "c"]
    assert queue["b"]["scope"] == ["/shared/x.py"]
    assert queue["b"]["overlaps"] == ["a"]
    assert queue["b"]["overlap_waits_for"] == ["a"]
    assert queue["b"]["overlap_reason"] == (
        "waits for a to end: their scopes overlap (overlap: serial)"
    )
    assert queue["c"]["overlaps"] == [z]  # another home's story on the same repository
    assert queue["c"]["overlap_waits_for"] == [z]


def test_parallel_flags_overlaps_but_holds_nothing_back(busy: tuple[Path, Path]) -> None:
    home, _ = busy
    roles = home / "config" / "roles.yaml"
    roles.write_text(roles.read_text().replace("overlap: serial", "overlap: parallel"))
    report = collect_status(home)
    assert report["overlap"] == "parallel"
    queue = by_key(report["queue"])
    assert queue["b"]["overlaps"] == ["a"]
    assert queue["b"]["overlap_waits_for"] == [] and queue["b"]["overlap_reason"] == ""
    assert queue_note(queue["b"]) == "its scope overlaps a"


def test_stories_apart_or_ended_are_not_flagged(tmp_path: Path, target_repo: Path) -> None:
    home = make_home(tmp_path / "home", target_repo, "serial")
    a = story(home, "a", ["/src"], 30)
    story(home, "b", ["/docs"], 20)
    with running(home, target_repo, "a", a):
        report = collect_status(home)
        assert by_key(report["stories"])["a"]["overlaps"] == []
        assert by_key(report["queue"])["b"]["overlaps"] == []
    # a ended (its locks let go): its record says running, but nothing runs it
    report = collect_status(home)
    assert by_key(report["stories"])["a"]["overlaps"] == []
    assert by_key(report["queue"])["b"]["overlap_waits_for"] == []


def test_an_unscoped_queued_story_overlaps_every_running_one(
    tmp_path: Path, target_repo: Path
) -> None:
    home = make_home(tmp_path / "home", target_repo, None)
    a = story(home, "a", ["/src"], 30)
    story(home, "b", None, 20)
    with running(home, target_repo, "a", a):
        report = collect_status(home)
    assert report["overlap"] == "parallel"  # the default
    assert by_key(report["queue"])["b"]["overlaps"] == ["a"]


def test_status_text_says_it(busy: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    home, _ = busy
    text = format_status(collect_status(home))
    assert "    overlaps: b (their scopes overlap)" in text.splitlines()
    queued_b = next(line for line in text.splitlines() if "inbox/b.md" in line)
    assert "waits for a to end" in queued_b
    assert main(["status", "--home", str(home)]) == 0  # through the command, the same
    assert "overlaps: b (their scopes overlap)" in capsys.readouterr().out
    assert main(["status", "--json", "--home", str(home)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert by_key(shown["queue"])["b"]["overlap_waits_for"] == ["a"]


def test_the_status_page_and_its_api_show_it(busy: tuple[Path, Path]) -> None:
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")
    from starlette.testclient import TestClient

    from hero.web.app import create_app

    home, _ = busy
    client = TestClient(create_app(home, token=None), base_url="http://127.0.0.1")
    api = client.get("/api/stories").json()
    assert by_key(api["stories"])["a"]["overlaps"] == ["b"]
    assert by_key(api["queue"])["b"]["overlap_waits_for"] == ["a"]
    board = client.get("/").text
    assert "its scope overlaps b" in board  # a's row
    assert "waits for a to end: their scopes overlap (overlap: serial)" in board  # b queued
    assert client.get("/api/stories/a").json()["overlaps"] == ["b"]
    page = client.get("/stories/a").text
    assert 'id="story-overlap"' in page and "its scope overlaps b" in page


def test_a_lock_a_dead_run_left_behind_is_not_a_running_story(
    tmp_path: Path, target_repo: Path
) -> None:
    """A run killed with its lock's line still written: the lock is not held, so the story
    runs nowhere and nothing waits for it."""
    home = make_home(tmp_path / "home", target_repo, "serial")
    a = story(home, "a", None, 30)
    story(home, "b", None, 20)
    save_state(home, RunState(id="a", status="running", story_path=str(a)))
    common = Path(git(target_repo, "rev-parse", "--absolute-git-dir").strip())
    lock = common / "hero" / "locks" / "a.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"home": str(home), "pid": 999_999}) + "\n")
    report = collect_status(home)
    assert by_key(report["stories"])["a"]["overlaps"] == []
    queued = by_key(report["queue"])  # a is queued again: the next run resumes it
    assert list(queued) == ["a", "b"]
    assert queued["b"]["overlaps"] == ["a"]  # both queued, both unscoped
    assert queued["b"]["overlap_waits_for"] == []  # but a runs nowhere: nothing to wait for
