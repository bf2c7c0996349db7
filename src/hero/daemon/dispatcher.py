"""`hero watch`: take stories from the inbox and run them, at most max_parallel at once.

The dispatcher decides what runs next (priority, then age), refuses what cannot run (an
invalid story, a duplicate id) with a reason the user can read, and stops cleanly. It does
not run rounds itself: each story runs in a thread through ``pipeline.StoryRun``, which
saves its state after every step. That state is what makes a restart after ``kill -9``
safe: a story found ``running`` or ``interrupted`` is resumed from its last finished round.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hero.agent.loop import Model
from hero.config import Config
from hero.daemon.inbox import Inbox, start_watching
from hero.errors import Interrupted
from hero.gitops import TargetRepo
from hero.pipeline import StoryBusy, StoryRun, finish_done_move
from hero.runner import kill_marked
from hero.state import StateError, file_digest, load_state
from hero.story import PRIORITIES, Story, StoryError, parse_story

#: Seconds a clean stop waits for running stories before recording them as interrupted.
STOP_GRACE_S = 6.0
#: Seconds between rescans of the inbox, a safety net under the event stream.
RESCAN_S = 10.0

ModelFactory = Callable[[threading.Event], tuple[Model, Model]]


class DaemonRunning(Exception):
    """Another `hero watch` holds this home."""


@dataclass
class _Running:
    story: Story
    path: Path
    run: StoryRun
    cancel: threading.Event
    thread: threading.Thread
    started: float = field(default_factory=time.monotonic)


class DaemonLock:
    """One daemon per home: an flock on runs/watch.lock, which holds the daemon's pid.

    The kernel drops the lock when the process dies, however it dies, so a crashed
    daemon's lock is simply taken over."""

    def __init__(self, home: Path) -> None:
        self.path = home / "runs" / "watch.lock"
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115 - held for the daemon's life
        for attempt in range(5):  # `hero status` takes the lock for a moment to test it
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt < 4:
                    time.sleep(0.05)
        else:
            fh.seek(0)
            pid = fh.read().strip() or "unknown"
            fh.close()
            raise DaemonRunning(
                f"hero watch is already running for {self.path.parent.parent} (pid {pid})"
            )
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


class Dispatcher:
    def __init__(
        self,
        config: Config,
        make_models: ModelFactory,
        *,
        log: Any,
        settle_s: float = 1.0,
    ) -> None:
        self.config = config
        self.home = config.home
        self.make_models = make_models
        self.log = log
        self.repo = TargetRepo(config.target_repo)
        self.inbox = Inbox((self.home / "inbox").resolve(), settle_s=settle_s)
        self.rejected_dir = self.home / "runs" / "rejected"
        # Re-entrant: stop() runs in a signal handler, which may interrupt the main thread
        # while it holds this lock.
        self._lock = threading.RLock()
        self._ready: dict[Path, tuple[Story, float]] = {}  # path -> (story, arrival order key)
        self._running: dict[str, _Running] = {}
        self._rejected: dict[Path, tuple[int, int]] = {}  # path -> signature when refused
        self._stopping = threading.Event()

    # -- the loop ----------------------------------------------------------------------

    def serve(self, *, exit_when_idle: bool = False) -> None:
        """Run until ``stop()``; with ``exit_when_idle``, until the inbox holds nothing to run."""
        stop_watching = start_watching(self.inbox)
        self.log.info(
            "watching", inbox=str(self.inbox.directory), max_parallel=self.config.max_parallel
        )
        self.inbox.rescan()
        last_rescan = time.monotonic()
        try:
            while not self._stopping.is_set():
                ready, next_due = self.inbox.due()
                for path in ready:
                    self._consider(path)
                self._launch()
                if exit_when_idle and self._idle() and next_due is None:
                    break
                if time.monotonic() - last_rescan >= RESCAN_S:
                    self.inbox.rescan()
                    last_rescan = time.monotonic()
                timeout = RESCAN_S if next_due is None else max(0.0, min(next_due, RESCAN_S))
                self.inbox.wake.wait(timeout)
                self.inbox.wake.clear()
        finally:
            stop_watching()
            self._stop_running()

    def stop(self) -> None:
        """Take no new stories; interrupt the running ones (from a signal handler too)."""
        self._stopping.set()
        with self._lock:
            for running in self._running.values():
                running.cancel.set()
        self.inbox.wake.set()

    def kill_now(self) -> None:
        """A second signal: end every story's commands at once (the process exits next)."""
        for running in list(self._running.values()):
            running.run.force_interrupted()
            kill_marked(f"{self.home.resolve()}/{running.story.id}")

    def _idle(self) -> bool:
        with self._lock:
            return not self._running and not self._ready

    # -- deciding ----------------------------------------------------------------------

    def _consider(self, path: Path) -> None:
        """A settled inbox file: queue it, or refuse it with a reason, or leave it be."""
        with self._lock:
            if any(r.path == path for r in self._running.values()):
                return  # hero's own feedback appends to a running story's file
        sig = _signature(path)
        if sig is None:
            self._ready.pop(path, None)
            return
        if self._rejected.get(path) == sig:
            return
        try:
            story = parse_story(path)
        except StoryError as exc:
            self._refuse(path, sig, str(exc))
            return
        problem = self._eligibility(story, path)
        if problem is None:
            self._clear_refusal(path)
            self._ready[path] = (story, sig[0] / 1e9)
            self.log.info("queued", story=story.id, file=path.name, priority=story.priority)
        elif problem:
            self._refuse(path, sig, problem)
        else:
            self._ready.pop(path, None)

    def _eligibility(self, story: Story, path: Path) -> str | None:
        """None: may run. "": not now, silently. Text: refused, for this reason."""
        with self._lock:
            running = self._running.get(story.id)
        if running is not None:
            return f"story id '{story.id}' is already running from {running.path.name}"
        for other, (queued, arrived) in list(self._ready.items()):
            if other == path or queued.id != story.id:
                continue
            # Of two files with one id, the one that came first keeps it.
            if (arrived, other.name) <= (_mtime(path), path.name):
                return f"story id '{story.id}' is already queued from {other.name}"
            other_sig = _signature(other)
            if other_sig is not None:
                self._refuse(
                    other,
                    other_sig,
                    f"story id '{story.id}' is also in {path.name}, which came first",
                )
        try:
            state = load_state(self.home, story.id)
        except StateError as exc:
            return str(exc)
        if state is None:
            return None
        if state.status == "passed":
            if finish_done_move(state, path):
                self.log.info("moved to done", story=story.id, note="it had passed before a crash")
                return ""
            return (
                f"story '{story.id}' already passed (runs/state/{story.id}.json); "
                "give it a new id to run it again"
            )
        if state.status in ("gave_up", "error"):
            if state.story_digest and state.story_digest == file_digest(path):
                self.log.info(
                    "waiting",
                    story=story.id,
                    status=state.status,
                    hint=f"edit the story or run `hero retry {story.id}`",
                )
                return ""
        return None

    def _refuse(self, path: Path, sig: tuple[int, int], reason: str) -> None:
        self._ready.pop(path, None)
        self._rejected[path] = sig
        self.rejected_dir.mkdir(parents=True, exist_ok=True)
        note = self.rejected_dir / f"{path.name}.error.txt"
        note.write_text(
            f"{path}\nrefused at {time.strftime('%Y-%m-%d %H:%M:%S')}:\n{reason}\n"
            "Edit the file to have it considered again.\n",
            encoding="utf-8",
        )
        self.log.warning("rejected", file=path.name, reason=reason, note=str(note))

    def _clear_refusal(self, path: Path) -> None:
        self._rejected.pop(path, None)
        try:
            (self.rejected_dir / f"{path.name}.error.txt").unlink()
        except FileNotFoundError:
            pass

    # -- running -----------------------------------------------------------------------

    def _launch(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                if len(self._running) >= self.config.max_parallel or not self._ready:
                    return
                path = min(self._ready, key=lambda p: _order(*self._ready[p], p))
                story, _ = self._ready.pop(path)
                if not path.exists():
                    continue
                cancel = threading.Event()
                worker, reviewer = self.make_models(cancel)
                log = self.log.bind(story=story.id)
                run = StoryRun(
                    story,
                    self.config,
                    worker,
                    reviewer,
                    self.repo,
                    progress=lambda msg, log=log: log.info(msg),
                    cancel=cancel,
                )
                thread = threading.Thread(
                    target=self._run_one, args=(story.id,), name=f"story-{story.id}", daemon=True
                )
                self._running[story.id] = _Running(story, path, run, cancel, thread)
            log.info("started", file=path.name)
            thread.start()

    def _run_one(self, story_id: str) -> None:
        running = self._running[story_id]
        log = self.log.bind(story=story_id)
        try:
            state = running.run.run()
            log.info(
                "finished", status=state.status, rounds=len(state.rounds), error=state.error or None
            )
        except (Interrupted, KeyboardInterrupt):
            log.info("interrupted")
        except StoryBusy as exc:
            log.warning("busy", reason=str(exc))
        except Exception:  # noqa: BLE001 - one story's failure must not stop the daemon
            log.exception("crashed")
        finally:
            with self._lock:
                self._running.pop(story_id, None)
            self.inbox.forget(running.path)  # its file may have changed meanwhile
            self.inbox.wake.set()

    def _stop_running(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for r in running:
            r.cancel.set()
        deadline = time.monotonic() + STOP_GRACE_S
        for r in running:
            r.thread.join(max(0.0, deadline - time.monotonic()))
        for r in running:
            if r.thread.is_alive():  # a model call still in flight: record it as interrupted
                r.run.force_interrupted()
                kill_marked(f"{self.home.resolve()}/{r.story.id}")
                self.log.info("interrupted", story=r.story.id, note="model call abandoned")


def _order(story: Story, arrived: float, path: Path) -> tuple[int, float, str]:
    """high before normal before low, then oldest first, then by name."""
    return (-PRIORITIES.index(story.priority), arrived, path.name)


def _mtime(path: Path) -> float:
    sig = _signature(path)
    return sig[0] / 1e9 if sig else 0.0


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)
