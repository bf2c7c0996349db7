"""The inbox watcher: tells the dispatcher which story files are ready to be read.

A file is read only once it is completely written. A story renamed into ``inbox/`` (the
write-then-rename pattern) is complete at once. A file written in place is read once
nothing has touched it for ``settle_s`` (a writer may append in several steps, closing the
file between them). A periodic rescan catches what the
event stream lost (an inotify queue overflow, a network filesystem).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A renamed-in file is looked at without delay.
IMMEDIATE = 0.0


def is_story_name(name: str) -> bool:
    """Stories are visible ``*.md`` files; dot-files are a writer's temporary files."""
    return name.endswith(".md") and not name.startswith(".")


@dataclass
class _Pending:
    due: float
    signature: tuple[int, int] | None  # (mtime_ns, size) when last seen


class Inbox:
    """Tracks inbox files and when each becomes due for a look."""

    def __init__(self, directory: Path, *, settle_s: float = 1.0) -> None:
        self.directory = directory
        self.settle_s = settle_s
        self._lock = threading.Lock()
        self._pending: dict[Path, _Pending] = {}
        self._seen: dict[Path, tuple[int, int]] = {}
        self.wake = threading.Event()

    # -- events in ---------------------------------------------------------------------

    def notice(self, path: Path, delay: float) -> None:
        """A file changed; look at it after ``delay`` seconds of quiet."""
        if path.parent != self.directory or not is_story_name(path.name):
            return
        with self._lock:
            self._pending[path] = _Pending(time.monotonic() + delay, _signature(path))
        self.wake.set()

    def rescan(self) -> None:
        """Notice every story file that is new or changed since it was last handed out."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for name in names:
            if not is_story_name(name):
                continue
            path = self.directory / name
            sig = _signature(path)
            if sig is not None and self._seen.get(path) != sig and path not in self._pending:
                # Old enough to be complete: due now; else wait for it to settle.
                age = time.time() - sig[0] / 1e9
                self.notice(path, 0.0 if age >= self.settle_s else self.settle_s)

    # -- files out ---------------------------------------------------------------------

    def due(self) -> tuple[list[Path], float | None]:
        """Files ready to be read now, and the seconds until the next one may be."""
        now = time.monotonic()
        ready: list[Path] = []
        next_due: float | None = None
        with self._lock:
            for path, pending in list(self._pending.items()):
                if pending.due > now:
                    next_due = _min(next_due, pending.due - now)
                    continue
                sig = _signature(path)
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

    def forget(self, path: Path) -> None:
        """Look at this file again on the next rescan even if it did not change."""
        with self._lock:
            self._seen.pop(path, None)


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


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
            if event.is_directory:
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
    observer.schedule(Handler(), str(inbox.directory), recursive=False)
    observer.daemon = True
    observer.start()

    def stop() -> None:
        import logging

        # watchdog logs a harmless error when its reader thread is stopped mid-read.
        logging.getLogger("watchdog.observers.inotify").setLevel(logging.CRITICAL)
        observer.stop()
        observer.join(timeout=5)

    return stop
