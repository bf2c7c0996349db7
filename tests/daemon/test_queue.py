"""The queue rule (hero.daemon.queue): which inbox story may run, and in what order.

The dispatcher and `hero status` both take it from there; these tests pin the rule itself
on real story files and real state files.
"""

from __future__ import annotations

import fcntl
import itertools
from pathlib import Path

from hero.daemon.queue import Admit, Entry, admit, arrange
from hero.locks import story_lock_path
from hero.state import RunState, Status, file_digest, save_state, state_path
from hero.story.format import parse_story


def story_file(home: Path, name: str, **fm: str) -> Path:
    path = home / "inbox" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    front = {"id": name, "title": f"Story {name}", **fm}
    path.write_text("---\n" + "".join(f"{k}: {v}\n" for k, v in front.items()) + "---\n\nx\n")
    return path


def entry(home: Path, name: str, arrived: float, priority: str = "normal", **fm: str) -> Entry:
    path = story_file(home, name, priority=priority, **fm)
    return Entry(parse_story(path), path, arrived)


def test_priority_decides_before_age_whatever_the_order_seen(tmp_path: Path) -> None:
    entries = [
        entry(tmp_path, "low-oldest", 100.0, "low"),
        entry(tmp_path, "normal-b", 300.0),
        entry(tmp_path, "normal-a", 300.0),  # same age: by name
        entry(tmp_path, "normal-old", 200.0),
        entry(tmp_path, "high-newest", 900.0, "high"),
    ]
    expected = ["high-newest", "normal-old", "normal-a", "normal-b", "low-oldest"]
    for seen in itertools.permutations(entries):
        queue, refused = arrange(seen)
        assert [e.story.id for e in queue] == expected
        assert refused == []


def test_of_two_files_with_one_id_the_first_comer_keeps_it(tmp_path: Path) -> None:
    young_high = entry(tmp_path, "young", 500.0, "high", id="dup")
    old_low = entry(tmp_path, "old", 100.0, "low", id="dup")
    other = entry(tmp_path, "other", 300.0)
    for seen in itertools.permutations([young_high, old_low, other]):
        queue, refused = arrange(seen)
        assert [e.path.name for e in queue] == ["other.md", "old.md"]
        assert refused == [(young_high, old_low)]


def admitted(home: Path, path: Path) -> Admit:
    return admit(home, parse_story(path), path).admit


def test_admit_by_the_run_record(tmp_path: Path) -> None:
    home = tmp_path

    def with_state(name: str, status: Status, *, unchanged: bool = False) -> Path:
        path = story_file(home, name)
        digest = file_digest(path) if unchanged else "0" * 64
        save_state(home, RunState(id=name, status=status, story_digest=digest))
        return path

    assert admitted(home, story_file(home, "new")) == Admit.RUN
    assert admitted(home, with_state("queued", Status.QUEUED)) == Admit.RUN
    assert admitted(home, with_state("interrupted", Status.INTERRUPTED, unchanged=True)) == (
        Admit.RUN
    )
    for status in (Status.GAVE_UP, Status.ERROR):
        assert admitted(home, with_state(f"{status}-same", status, unchanged=True)) == Admit.WAIT
        assert admitted(home, with_state(f"{status}-edited", status)) == Admit.RUN
    # skipped: the dependency rule (hero.plans.gate) says when it runs, not its file
    assert admitted(home, with_state("skipped-same", Status.SKIPPED, unchanged=True)) == Admit.RUN
    assert admitted(home, with_state("passed-same", Status.PASSED, unchanged=True)) == Admit.DONE
    passed = with_state("passed-other", Status.PASSED)
    decision = admit(home, parse_story(passed), passed)
    assert decision.admit == Admit.REFUSE and "already passed" in decision.reason

    # `running`: busy while a process holds the story's lock; else its run died: resume it
    running = with_state("running", Status.RUNNING)
    assert admitted(home, running) == Admit.RUN
    lock = story_lock_path(home, "running")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert admitted(home, running) == Admit.BUSY
    assert admitted(home, running) == Admit.RUN


def test_an_unreadable_run_record_is_a_refusal_naming_it(tmp_path: Path) -> None:
    path = story_file(tmp_path, "broken")
    state_path(tmp_path, "broken").parent.mkdir(parents=True)
    state_path(tmp_path, "broken").write_text("{not json")
    decision = admit(tmp_path, parse_story(path), path)
    assert decision.admit == Admit.REFUSE
    assert "runs/state/broken.json" in decision.reason
