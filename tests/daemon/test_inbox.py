"""The inbox watcher: which story files are due for a look, and when.

Real files in tmp_path, real watchdog (inotify) events. A file must never be handed out
while it is still being written: a rename into the folder is complete at once, a file
written in place is due once it has been closed and left alone, or has been still for
the settle delay.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hero.daemon.inbox import Inbox, is_story_name, start_watching

STORY = "---\nid: s1\ntitle: Story s1\n---\n\n## Goal\nSomething.\n"
LONG_SETTLE_S = 30.0  # longer than any test waits: only an event can make a file due early
DEADLINE_S = 10.0  # generous "did not hang" bound


def wait_for(cond: Callable[[], object], timeout: float = DEADLINE_S, step: float = 0.02) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            return value
        time.sleep(step)


def age(path: Path, seconds: float) -> None:
    """Make ``path`` look written ``seconds`` ago."""
    t = time.time() - seconds
    os.utime(path, (t, t))


@pytest.fixture
def inbox_dir(tmp_path: Path) -> Path:
    d = tmp_path / "inbox"
    d.mkdir()
    return d


@pytest.fixture
def watching(inbox_dir: Path) -> Iterator[Callable[..., Inbox]]:
    """watching(settle_s) -> an Inbox on inbox_dir with the watchdog watcher running."""
    stops: list[Callable[[], None]] = []

    def start(settle_s: float = LONG_SETTLE_S) -> Inbox:
        inbox = Inbox(inbox_dir, settle_s=settle_s)
        stops.append(start_watching(inbox))
        return inbox

    yield start
    for stop in stops:
        stop()


class Collector:
    """Polls ``inbox.due()`` and keeps every path it hands out, in order."""

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox
        self.handed: list[Path] = []

    def poll(self) -> list[Path]:
        ready, _ = self.inbox.due()
        self.handed.extend(ready)
        return ready

    def until(self, path: Path, timeout: float = DEADLINE_S) -> bool:
        def handed() -> bool:
            self.poll()
            return path in self.handed

        return bool(wait_for(handed, timeout))

    def count(self, n: int, timeout: float = DEADLINE_S) -> bool:
        def enough() -> bool:
            self.poll()
            return len(self.handed) >= n

        return bool(wait_for(enough, timeout))


# --------------------------------------------------------------------------- names


def test_story_names() -> None:
    assert is_story_name("add-login.md")
    assert not is_story_name(".add-login.md")  # an editor's or writer's temporary file
    assert not is_story_name(".add-login.md.swp")
    assert not is_story_name("add-login.md~")
    assert not is_story_name("notes.txt")
    assert not is_story_name("README")


def test_dot_files_and_other_names_are_ignored(inbox_dir: Path) -> None:
    inbox = Inbox(inbox_dir, settle_s=0.0)
    for name in (".hidden.md", "notes.txt", "story.md.tmp", ".story.md.swp"):
        (inbox_dir / name).write_text(STORY)
        age(inbox_dir / name, 60)
        inbox.notice(inbox_dir / name, 0.0)
    # a file of the same name elsewhere is not the inbox's business
    (inbox_dir / "sub").mkdir()
    (inbox_dir / "sub" / "nested.md").write_text(STORY)
    inbox.notice(inbox_dir / "sub" / "nested.md", 0.0)
    inbox.notice(inbox_dir.parent / "outside.md", 0.0)
    inbox.rescan()
    assert inbox.due() == ([], None)
    assert not inbox.wake.is_set()


# --------------------------------------------------------------------------- settle logic


def test_notice_with_no_delay_is_due_at_once(inbox_dir: Path) -> None:
    """What the watcher does for a file renamed into the folder: it is complete already."""
    inbox = Inbox(inbox_dir, settle_s=LONG_SETTLE_S, gather_s=0.0)
    path = inbox_dir / "s1.md"
    path.write_text(STORY)
    inbox.notice(path, 0.0)
    assert inbox.wake.is_set()
    assert inbox.due() == ([path], None)
    assert inbox.due() == ([], None)  # handed out once


@pytest.mark.slow
def test_a_file_still_changing_is_not_due_until_quiet(inbox_dir: Path) -> None:
    settle = 0.4
    inbox = Inbox(inbox_dir, settle_s=settle)
    path = inbox_dir / "s1.md"
    path.write_text("---\nid: s1\n")
    inbox.notice(path, 0.0)
    with open(path, "a") as fh:  # the writer carries on after the event
        fh.write("title: Story s1\n")

    ready, next_due = inbox.due()
    assert ready == []
    assert next_due is not None and 0 < next_due <= settle

    # still changing when the settle delay is up: wait again
    time.sleep(next_due)
    with open(path, "a") as fh:
        fh.write("---\n\n## Goal\nSomething.\n")
    ready, next_due = inbox.due()
    assert ready == []
    assert next_due is not None and 0 < next_due <= settle

    # quiet for the settle delay: due, and its content is whole
    collector = Collector(inbox)
    assert collector.until(path)
    assert collector.handed == [path]
    assert path.read_text().endswith("Something.\n")


def test_a_file_that_went_away_is_dropped(inbox_dir: Path) -> None:
    inbox = Inbox(inbox_dir, settle_s=0.1, gather_s=0.0)
    path = inbox_dir / "s1.md"
    path.write_text(STORY)
    inbox.notice(path, 0.0)
    path.unlink()
    assert inbox.due() == ([], None)


def test_delay_is_honoured_and_reported(inbox_dir: Path) -> None:
    inbox = Inbox(inbox_dir, settle_s=LONG_SETTLE_S)
    path = inbox_dir / "s1.md"
    path.write_text(STORY)
    inbox.notice(path, 0.3)
    ready, next_due = inbox.due()
    assert ready == [] and next_due is not None and 0 < next_due <= 0.3
    assert Collector(inbox).until(path)


# --------------------------------------------------------------------------- rescan


def test_rescan_picks_up_files_present_at_start(inbox_dir: Path) -> None:
    settle = 0.2
    old = inbox_dir / "old.md"
    old.write_text(STORY)
    age(old, 60)
    fresh = inbox_dir / "fresh.md"
    fresh.write_text(STORY)
    age(fresh, -60)  # "written" a minute from now: fresh however slowly the test runs
    (inbox_dir / ".tmp.md").write_text(STORY)
    (inbox_dir / "notes.txt").write_text("hello")

    inbox = Inbox(inbox_dir, settle_s=settle)
    inbox.rescan()
    ready, next_due = inbox.due()
    assert ready == [old]  # old enough to be complete
    assert next_due is not None and 0 < next_due <= settle  # the fresh one waits to settle
    collector = Collector(inbox)
    assert collector.until(fresh)
    assert collector.handed == [fresh]


def test_rescan_notices_changed_files_only(inbox_dir: Path) -> None:
    inbox = Inbox(inbox_dir, settle_s=0.2)
    a, b = inbox_dir / "a.md", inbox_dir / "b.md"
    for p in (a, b):
        p.write_text(STORY)
        age(p, 60)
    inbox.rescan()
    assert sorted(inbox.due()[0]) == [a, b]

    inbox.rescan()  # nothing changed since they were handed out
    assert inbox.due() == ([], None)

    b.write_text(STORY + "More.\n")
    age(b, 30)  # an edit, done and settled
    inbox.rescan()
    assert inbox.due() == ([b], None)
    inbox.rescan()
    assert inbox.due() == ([], None)

    # a file handed out and then deleted is no trouble
    a.unlink()
    inbox.rescan()
    assert inbox.due() == ([], None)


def test_a_file_known_complete_is_due_without_settling(inbox_dir: Path) -> None:
    """hero's own write (feedback appended to a story) must not make the story wait: a file
    the ``complete`` hint vouches for is due at once, however fresh; others settle."""
    hero, user = inbox_dir / "hero.md", inbox_dir / "user.md"
    for path in (hero, user):
        path.write_text(STORY)
        age(path, -60)  # as fresh as can be
    inbox = Inbox(inbox_dir, settle_s=LONG_SETTLE_S, complete=lambda p: p == hero, gather_s=0.0)

    inbox.rescan()
    ready, next_due = inbox.due()
    assert ready == [hero]
    assert next_due is not None and next_due > LONG_SETTLE_S / 2  # the user's file settles
    assert inbox.settling()

    # an event for it (hero appends again) does not make it wait either
    with open(hero, "a") as fh:
        fh.write("More.\n")
    inbox.notice(hero, LONG_SETTLE_S)
    assert inbox.due()[0] == [hero]


def test_a_failing_complete_hint_means_settle(inbox_dir: Path) -> None:
    def broken(path: Path) -> bool:
        raise OSError("cannot tell")

    path = inbox_dir / "s1.md"
    path.write_text(STORY)
    age(path, -60)
    inbox = Inbox(inbox_dir, settle_s=LONG_SETTLE_S, complete=broken)
    inbox.rescan()
    ready, next_due = inbox.due()
    assert ready == [] and next_due is not None


def test_files_of_one_scan_are_due_at_one_moment(inbox_dir: Path) -> None:
    """The dispatcher then sees them in one batch and orders them by priority, whatever
    order the file system listed them in."""
    paths = [inbox_dir / f"s{n}.md" for n in range(5)]
    for path in paths:
        path.write_text(STORY)
    inbox = Inbox(inbox_dir, settle_s=0.3)
    inbox.rescan()
    ready: list[Path] = []

    def first_batch() -> bool:
        ready.extend(inbox.due()[0])
        return bool(ready)

    assert wait_for(first_batch)
    assert sorted(ready) == paths
    assert not inbox.settling()


def test_a_burst_of_arrivals_is_handed_out_as_one_batch(inbox_dir: Path, tmp_path: Path) -> None:
    """Files moved in one go arrive milliseconds apart: none is handed out until the inbox
    has been quiet for gather_s, then all of them are, in one batch, including a file whose
    event has not been handled yet (the folder is scanned once more)."""
    gather = 0.3
    inbox = Inbox(inbox_dir, settle_s=LONG_SETTLE_S, gather_s=gather)
    drafts = tmp_path / "drafts"
    drafts.mkdir()
    names = [f"s{n}.md" for n in range(4)]
    for name in names:
        (drafts / name).write_text(STORY)
        age(drafts / name, 60)
    started = time.monotonic()
    for name in names[:3]:  # their events
        os.rename(drafts / name, inbox_dir / name)
        inbox.notice(inbox_dir / name, 0.0)
        ready, next_due = inbox.due()
        assert ready == [] and next_due is not None and 0 < next_due <= gather
    os.rename(drafts / names[3], inbox_dir / names[3])  # its event is still on its way
    batch: list[Path] = []

    def first_batch() -> bool:
        batch.extend(inbox.due()[0])
        return bool(batch)

    assert wait_for(first_batch)
    assert time.monotonic() - started >= gather
    assert sorted(batch) == [inbox_dir / name for name in names]


def test_rescan_of_a_missing_folder_is_harmless(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "nope", settle_s=0.1)
    inbox.rescan()
    assert inbox.due() == ([], None)


def test_forget_makes_the_next_rescan_look_again(inbox_dir: Path) -> None:
    inbox = Inbox(inbox_dir, settle_s=0.2)
    path = inbox_dir / "s1.md"
    path.write_text(STORY)
    age(path, 60)
    inbox.rescan()
    assert inbox.due() == ([path], None)
    inbox.rescan()
    assert inbox.due() == ([], None)

    inbox.forget(path)
    inbox.rescan()
    assert inbox.due() == ([path], None)
    inbox.forget(inbox_dir / "never-seen.md")  # forgetting an unknown file is fine


# --------------------------------------------------------------------------- the watcher


def test_watcher_hands_out_a_file_renamed_in_at_once(
    watching: Callable[..., Inbox], inbox_dir: Path
) -> None:
    """The write-then-rename pattern with the temporary file inside the inbox (a dot-file)."""
    inbox = watching(LONG_SETTLE_S)
    collector = Collector(inbox)
    tmp = inbox_dir / ".s1.md.tmp"
    tmp.write_text(STORY)
    final = inbox_dir / "s1.md"
    os.rename(tmp, final)
    # due long before the settle delay could have passed: the rename made it due
    assert collector.until(final)
    assert collector.handed == [final]
    assert final.read_text() == STORY
    time.sleep(0.3)  # late events for the same file must not hand it out again
    collector.poll()
    assert collector.handed == [final]


def test_watcher_hands_out_a_file_moved_in_from_elsewhere_at_once(
    watching: Callable[..., Inbox], inbox_dir: Path, tmp_path: Path
) -> None:
    inbox = watching(LONG_SETTLE_S)
    collector = Collector(inbox)
    elsewhere = tmp_path / "drafts"
    elsewhere.mkdir()
    draft = elsewhere / "s1.md"
    draft.write_text(STORY)
    final = inbox_dir / "s1.md"
    os.rename(draft, final)
    assert collector.until(final, timeout=3.0)  # well under the 30 s settle delay


def test_watcher_follows_a_story_renamed_within_the_inbox(
    watching: Callable[..., Inbox], inbox_dir: Path
) -> None:
    old = inbox_dir / "old.md"
    old.write_text(STORY)
    age(old, 60)
    inbox = watching(LONG_SETTLE_S)
    inbox.rescan()
    collector = Collector(inbox)
    assert collector.until(old)
    new = inbox_dir / "new.md"
    os.rename(old, new)
    assert collector.until(new)
    time.sleep(0.3)
    collector.poll()
    assert collector.handed == [old, new]  # the old name is gone, not handed out again


@pytest.mark.slow
def test_watcher_hands_out_a_file_written_in_place_once_it_is_quiet(
    watching: Callable[..., Inbox], inbox_dir: Path
) -> None:
    settle = 0.5
    inbox = watching(settle)
    collector = Collector(inbox)
    path = inbox_dir / "s1.md"
    with open(path, "w") as fh:
        fh.write("---\nid: s1\n")
        fh.flush()
        assert wait_for(lambda: inbox.wake.is_set())
        for _ in range(3):  # still being written, more often than the settle delay
            time.sleep(settle / 2)
            assert collector.poll() == []
            fh.write("")
            os.utime(path)
        fh.write("title: Story s1\n---\n\n## Goal\nSomething.\n")
    closed = time.monotonic()
    assert collector.until(path)
    assert time.monotonic() - closed >= settle * 0.9  # a close alone does not make it due
    assert collector.handed == [path]
    assert path.read_text() == STORY


@pytest.mark.slow
def test_watcher_ignores_dot_files_and_other_names(
    watching: Callable[..., Inbox], inbox_dir: Path
) -> None:
    inbox = watching(0.2)
    collector = Collector(inbox)
    (inbox_dir / ".draft.md").write_text(STORY)
    (inbox_dir / "notes.txt").write_text("x")
    (inbox_dir / "sub").mkdir()
    (inbox_dir / "sub" / "nested.md").write_text(STORY)
    marker = inbox_dir / "marker.md"  # written last: once it is out, the others had their chance
    marker.write_text(STORY)
    assert collector.until(marker)
    time.sleep(0.4)
    collector.poll()
    assert collector.handed == [marker]


def test_watcher_stop_is_prompt_and_events_end(
    inbox_dir: Path,
) -> None:
    inbox = Inbox(inbox_dir, settle_s=0.0)
    stop = start_watching(inbox)
    started = time.monotonic()
    stop()
    assert time.monotonic() - started < DEADLINE_S
    (inbox_dir / "late.md").write_text(STORY)
    time.sleep(0.3)
    assert inbox.due() == ([], None)
