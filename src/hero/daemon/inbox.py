"""The inbox watcher: tells the dispatcher which story files are ready to be read.

A file is read only once it is completely written. A story renamed into ``inbox/`` (the
write-then-rename pattern) is complete at once. A file written in place is read once
nothing has touched it for ``settle_s`` (a writer may append in several steps, closing the
file between them). A file that is, byte for byte, what hero itself last wrote (the
reviewer's feedback appended to a story) is complete too: hero's own writes never make a
story wait. A periodic rescan catches what the event stream lost (an inotify queue
overflow, a network filesystem).

Stories arrive in bursts (``mv *.md inbox/``), and the files of one burst are handed out
together, so the dispatcher sees them in one batch and orders them by priority, whatever
order they arrived or were listed in: after an event nothing is handed out until the inbox
has been quiet for ``gather_s`` (at most ``GATHER_MAX_S`` after the burst began), and
then the folder is scanned once more for files whose events are still on their way. The
files of one scan that are due at all are due at one moment, too.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.names import MANIFEST, plan_name_problem

if TYPE_CHECKING:
    from hero.story.record import Story

#: A renamed-in file is looked at without delay.
IMMEDIATE = 0.0
#: Seconds of quiet after an inbox event before files are handed out: one burst of arrivals
#: (files moved in one go arrive microseconds to milliseconds apart) is one batch.
#: Kept well under the 300 ms inbox-latency target that bench/daemon.py measures.
GATHER_S = 0.1
#: A burst that goes on (a writer that never stops) holds files back at most this long.
GATHER_MAX_S = 2.0

#: ``(st_mtime_ns, st_size)``: a file changed when this did.
Signature = tuple[int, int]


def is_story_name(name: str) -> bool:
    """Stories are visible ``*.md`` files; dot-files are a writer's temporary files."""
    return name.endswith(".md") and not name.startswith(".")


def loose_stories(inbox: Path) -> list[Story]:
    """The loose stories of ``inbox`` that can be read, by file name; a file that cannot be
    read or is no valid story is passed over (the daemon says why when it meets it)."""
    from hero.story.format import parse_story
    from hero.story.record import StoryError

    found: list[Story] = []
    try:
        names = sorted(os.listdir(inbox))
    except OSError:
        return found
    for name in names:
        if is_story_name(name):
            try:
                found.append(parse_story(inbox / name))
            except (StoryError, OSError):
                continue
    return found


def is_plan_dir(path: Path) -> bool:
    """A folder of the inbox that holds a plan: a plan's name, and a ``_manifest.yaml``
    (written before the folder is renamed in, so a half-written plan is never one)."""
    if plan_name_problem(path.name) is not None:
        return False
    try:
        return (path / MANIFEST).is_file() and not path.is_symlink()
    except OSError:
        return False


def plan_of(path: Path, inbox: Path) -> str | None:
    """The plan a story file in ``inbox`` belongs to: "" for a loose story (straight in the
    inbox), the folder's name for a plan's story, None for a file that is neither."""
    if path.parent == inbox:
        return ""
    if path.parent.parent == inbox and is_plan_dir(path.parent):
        return path.parent.name
    return None


def signature(path: Path) -> Signature | None:
    """The file's ``(mtime_ns, size)``, or None when it cannot be looked at (gone)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


@dataclass
class _Pending:
    due: float
    signature: Signature | None  # (mtime_ns, size) when last seen


class Inbox:
    """Tracks inbox files and when each becomes due for a look.

    ``complete(path)`` tells whether a file is known to be whole as it is (hero wrote it
    last): such a file is due at once, without the settle wait. ``gather_s``: the quiet
    after an event before anything is handed out (0: none).
    """

    def __init__(
        self,
        directory: Path,
        *,
        settle_s: float = 1.0,
        complete: Callable[[Path], bool] | None = None,
        gather_s: float = GATHER_S,
        only_plan: str | None = None,
    ) -> None:
        self.directory = directory
        #: None: loose stories and every plan folder; a name: that plan's folder alone
        self.only_plan = only_plan
        self.settle_s = settle_s
        self.gather_s = gather_s
        self._complete = complete
        self._lock = threading.Lock()
        self._pending: dict[Path, _Pending] = {}
        self._seen: dict[Path, Signature] = {}
        self._burst: tuple[float, float] | None = None  # (began, quiet until), monotonic
        self.wake = threading.Event()

    # -- events in ---------------------------------------------------------------------

    def notice(self, path: Path, delay: float) -> None:
        """A file changed; look at it after ``delay`` seconds of quiet."""
        if not is_story_name(path.name) or not self._mine(path):
            return
        if delay > 0 and self._known_complete(path):
            delay = IMMEDIATE
        now = time.monotonic()
        if self.gather_s > 0:
            with self._lock:
                began = now if self._burst is None else self._burst[0]
                self._burst = (began, min(now + self.gather_s, began + GATHER_MAX_S))
        self._add({path: now + delay})

    def _mine(self, path: Path) -> bool:
        plan = plan_of(path, self.directory)
        return plan is not None and (self.only_plan is None or plan == self.only_plan)

    def listing(self) -> list[Path]:
        """The story files this inbox looks at: ``*.md`` straight in it and in its plan
        folders (or, with ``only_plan``, in that plan's folder alone)."""
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:  # gone, or not a folder now: nothing to hand out
            return []
        found: list[Path] = []
        for name in names:
            if name.startswith("."):
                continue
            path = self.directory / name
            if is_story_name(name):
                if self.only_plan is None:
                    found.append(path)
                continue
            if self.only_plan is not None and name != self.only_plan:
                continue
            if not is_plan_dir(path):
                continue
            try:
                found.extend(path / n for n in sorted(os.listdir(path)) if is_story_name(n))
            except OSError:
                continue
        return found

    def rescan(self) -> None:
        """Notice every story file that is new or changed since it was last handed out.

        Old enough to be complete (or known complete): due now; else due once it settles.
        Every file of the scan gets one of those two moments."""
        wall, now = time.time(), time.monotonic()
        found: dict[Path, float] = {}
        for path in self.listing():
            sig = signature(path)
            with self._lock:
                known = self._seen.get(path) == sig or path in self._pending
            if sig is None or known:
                continue
            young = wall - sig[0] / 1e9 < self.settle_s
            settle = young and not self._known_complete(path)
            found[path] = now + self.settle_s if settle else now
        self._add(found)

    def _add(self, due: dict[Path, float]) -> None:
        if not due:
            return
        with self._lock:
            for path, when in due.items():
                self._pending[path] = _Pending(when, signature(path))
        self.wake.set()

    def _known_complete(self, path: Path) -> bool:
        if self._complete is None:
            return False
        try:
            return self._complete(path)
        except Exception:  # noqa: BLE001 - a hint only: when in doubt, let it settle
            return False

    # -- files out ---------------------------------------------------------------------

    def due(self) -> tuple[list[Path], float | None]:
        """Files ready to be read now, and the seconds until the next one may be."""
        now = time.monotonic()
        with self._lock:
            burst = self._burst
            if burst is not None and now >= burst[1]:
                self._burst = None
        if burst is not None:
            if now < burst[1]:  # a burst of arrivals is still going on
                return [], burst[1] - now
            self.rescan()  # files of the burst whose events have not been handled yet
            now = time.monotonic()
        ready: list[Path] = []
        next_due: float | None = None
        with self._lock:
            for path, pending in list(self._pending.items()):
                if pending.due > now:
                    next_due = _min(next_due, pending.due - now)
                    continue
                sig = signature(path)
                if sig is None:  # gone
                    del self._pending[path]
                    continue
                if sig != pending.signature:  # still being written: wait for quiet
                    pending.signature = sig
                    pending.due = now + self.settle_s
                    next_due = _min(next_due, self.settle_s)
                    continue
                del self._pending[path]
                self._seen[path] = sig
                ready.append(path)
        return ready, next_due

    def settling(self) -> bool:
        """Whether some file is noticed but not handed out yet (it waits to settle)."""
        with self._lock:
            return bool(self._pending)

    def forget(self, path: Path) -> None:
        """Look at this file again on the next rescan even if it did not change."""
        with self._lock:
            self._seen.pop(path, None)


def _min(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def start_watching(inbox: Inbox) -> Callable[[], None]:
    """Watch the inbox folder with watchdog (inotify on Linux); returns a stop function."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    try:  # Linux: a file renamed in from another folder must not look like a new file
        from watchdog.observers.inotify import InotifyObserver

        def make_observer() -> Any:
            return InotifyObserver(generate_full_events=True)
    except ImportError:  # other systems: their observer reports renames as moves already
        make_observer = Observer

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            names = (os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", "")))
            if event.is_directory or any(n.endswith(MANIFEST) for n in names):
                # a plan folder renamed in (its files raise no events of their own), or
                # its manifest written: look at the whole inbox again
                if event.event_type in ("created", "moved", "closed"):
                    inbox.rescan()
                return
            kind = event.event_type
            if kind == "moved":
                # A rename is complete at once. With full events an unpaired move into the
                # folder arrives as "moved" too (no src inside), and a move out of it as
                # "moved" with no dest inside; notice() ignores paths outside the inbox.
                if event.dest_path:
                    inbox.notice(Path(os.fsdecode(event.dest_path)), IMMEDIATE)
                if event.src_path:
                    inbox.notice(Path(os.fsdecode(event.src_path)), IMMEDIATE)
            elif kind in ("created", "modified", "attrib", "closed"):
                # Written in place: wait until it has been quiet for settle_s, even after a
                # close, since a writer may append in several open-write-close steps.
                inbox.notice(Path(os.fsdecode(event.src_path)), inbox.settle_s)

    inbox.directory.mkdir(parents=True, exist_ok=True)
    observer = make_observer()
    observer.schedule(Handler(), str(inbox.directory), recursive=True)
    observer.daemon = True
    observer.start()

    def stop() -> None:
        import logging

        # watchdog logs a harmless error when its reader thread is stopped mid-read.
        logging.getLogger("watchdog.observers.inotify").setLevel(logging.CRITICAL)
        observer.stop()
        observer.join(timeout=5)

    return stop
