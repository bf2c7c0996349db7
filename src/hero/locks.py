"""hero's inter-process locks: one owner for every flock in a home.

- The story lock, ``runs/locks/<id>.lock``: held by whichever process (``hero run``,
  ``hero watch``) runs the story right now; a second one is refused with ``StoryBusy``.
- The daemon lock, ``runs/watch.lock``: one ``hero watch`` per home; it holds the pid.
- The repository's story lock, ``<git common dir>/hero/locks/<id>.lock`` in the target
  repository: held beside the story lock, so that two hero homes pointed at one repository
  never run the same story (and its branch ``hero/<id>``) at once. It holds a line of JSON,
  ``{"home": ..., "pid": ...}``, so the refusal can name the other home.
- The plan lock, ``runs/locks/plans/<plan>.run.lock``: one ``hero run-plan`` per plan.
- The memory's lock (``memory/<repo-key>.md.lock``) and the bench folders' lock
  (``runs/bench/folders.json.lock``): one writer at a time of a file read, changed and
  written whole.
- ``is_held(path)``: whether some process holds a lock, for ``hero status`` and the
  dispatcher. It never creates a file.

All are ``flock`` locks: the kernel drops them when their process dies, however it dies,
so a crashed run's lock is simply taken over. A probe takes a shared lock for a moment;
so that a probe can never make a real taker fail, taking a lock tries a few times.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from hero.errors import UsageError
from hero.names import StoryRef

#: A probe (``is_held``) holds a shared lock for microseconds: a taker tries this often,
#: ``_RETRY_S`` apart, before it believes the lock is really held.
_ATTEMPTS = 5
_RETRY_S = 0.05


class StoryBusy(UsageError):
    """Another hero process is running this story right now."""


class DaemonRunning(UsageError):
    """Another `hero watch` holds this home."""


def story_lock_path(home: Path, story: StoryRef | str) -> Path:
    return StoryRef.of(story).lock_path(home)


def daemon_lock_path(home: Path) -> Path:
    return Path(home) / "runs" / "watch.lock"


def is_held(path: Path) -> bool:
    """Whether some process (this one included, through another open) holds ``path`` locked.

    Tests with a shared non-blocking flock that is let go at once. The file is only opened
    for reading, never created: a missing file is a lock nobody holds. On a file system
    without flock, it cannot tell and says not held.
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


def read_pid(path: Path) -> int | None:
    """The pid a lock file holds, or None (no file, not written yet, not a number)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(64).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _take(fh: IO[Any]) -> bool:
    """An exclusive flock on ``fh`` without waiting on a holder; False if someone holds it."""
    for attempt in range(_ATTEMPTS):
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt < _ATTEMPTS - 1:
                time.sleep(_RETRY_S)  # perhaps only a probe: it lets go at once
    return False


@contextmanager
def story_lock(home: Path, story: StoryRef | str) -> Iterator[None]:
    """Hold the story's lock for the block; ``StoryBusy`` if another process runs it."""
    story_id = StoryRef.of(story).key
    path = story_lock_path(home, story)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        if not _take(fh):
            raise StoryBusy(f"story '{story_id}' is being run by another hero process")
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class PlanBusy(UsageError):
    """Another ``hero run-plan`` runs this plan right now."""


@contextmanager
def plan_lock(home: Path, plan: str) -> Iterator[None]:
    """Hold the plan's lock for the block; ``PlanBusy`` if another process runs the plan."""
    path = Path(home) / "runs" / "locks" / "plans" / f"{plan}.run.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        if not _take(fh):
            raise PlanBusy(f"plan '{plan}' is being run by another `hero run-plan`")
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def repo_story_lock_path(common_dir: Path, story: StoryRef | str) -> Path:
    return Path(common_dir) / "hero" / "locks" / f"{StoryRef.of(story).rel}.lock"


def read_holder(path: Path) -> dict[str, Any]:
    """What a repository story lock says of its holder (``home``, ``pid``); {} if unknown."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _busy_message(path: Path, story: StoryRef | str) -> str:
    ref = StoryRef.of(story)
    holder = read_holder(path)
    other = holder.get("home") or "another hero home"
    pid = holder.get("pid") or "unknown"
    return (
        f"story '{ref.key}' is being run by {other} (pid {pid}) on the same repository; "
        f"its branch {ref.branch} and worktree belong to that run until it ends"
    )


def repo_story_busy(common_dir: Path, story_id: StoryRef | str) -> str | None:
    """Why the story cannot run here now (another hero process holds its repository lock,
    the message naming its home), or None. A probe: it creates nothing."""
    path = repo_story_lock_path(common_dir, story_id)
    return _busy_message(path, story_id) if is_held(path) else None


@contextmanager
def repo_story_lock(common_dir: Path, story_id: StoryRef | str, home: Path) -> Iterator[None]:
    """Hold the story's lock in the target repository for the block; ``StoryBusy`` naming
    the other home (and its pid) if another hero process, of any home, runs the story."""
    path = repo_story_lock_path(common_dir, story_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        if not _take(fh):
            raise StoryBusy(_busy_message(path, story_id))
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"home": str(Path(home).resolve()), "pid": os.getpid()}) + "\n")
            fh.flush()
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)


class PidLock:
    """One holder per file: an flock held for the holder's life, the file holding its pid.
    ``acquire`` raises ``busy(pid)`` (the holder's pid, or "unknown") when it is held."""

    def __init__(self, path: Path, busy: Callable[[str], Exception]) -> None:
        self.path = Path(path)
        self._busy = busy
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid; ``busy(pid)`` naming the holder if held."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115 - held for the holder's life
        if not _take(fh):
            fh.seek(0)
            pid = fh.read().strip() or "unknown"
            fh.close()
            raise self._busy(pid)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


class DaemonLock(PidLock):
    """One daemon per home: an flock on runs/watch.lock, which holds the daemon's pid."""

    def __init__(self, home: Path) -> None:
        path = daemon_lock_path(home)
        super().__init__(
            path,
            lambda pid: DaemonRunning(
                f"hero watch is already running for {path.parent.parent} (pid {pid})"
            ),
        )


class MemoryBusy(UsageError):
    """A repository's memory stayed locked by another process for too long."""


#: How long a writer of a repository's memory waits for another one; its critical section
#: is a read, a merge and a write of a small file, so this long means something is wrong.
MEMORY_LOCK_WAIT_S = 60.0


@contextmanager
def memory_lock(path: Path, *, wait_s: float = MEMORY_LOCK_WAIT_S) -> Iterator[None]:
    """Hold the lock of a repository's memory file ``path`` (``<path>.lock`` beside it) for
    a read-modify-write: two stories ending at once in ``hero watch`` both add their facts.
    Waits for another holder up to ``wait_s``, then ``MemoryBusy``."""
    with _file_lock(path, wait_s, MemoryBusy, "the memory's lock"):
        yield


class BenchFoldersBusy(UsageError):
    """The home's record of bench folders stayed locked by another process for too long."""


@contextmanager
def bench_folders_lock(path: Path, *, wait_s: float = MEMORY_LOCK_WAIT_S) -> Iterator[None]:
    """Hold the lock of the home's record of bench output folders ``path``
    (``runs/bench/folders.json``; ``<path>.lock`` beside it) for a read-modify-write: two
    `hero bench run` processes of one home may record their folders at once."""
    with _file_lock(path, wait_s, BenchFoldersBusy, "the bench folders' lock"):
        yield


@contextmanager
def _file_lock(path: Path, wait_s: float, busy: type[UsageError], what: str) -> Iterator[None]:
    """An exclusive flock on ``<path>.lock``, waited for up to ``wait_s``, then ``busy``."""
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    with open(lock, "a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise busy(
                        f"{path}: another hero process has held {what} ({lock}) "
                        f"for over {wait_s:g}s; try again"
                    ) from None
                time.sleep(_RETRY_S)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
