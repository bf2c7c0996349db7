"""A story's run record as its run keeps it: saved after every step, and each way a run ends.

:class:`RunRecord` owns ``runs/state/<id>.json`` while a run goes on (hero.run.pipeline's
``StoryRun`` runs the rounds and tells it each step): its saves (with the spend so far, see
hero.run.budget.Meter), the phase, and the end (passed, gave up, error, a budget used up,
cancelled, paused on an outage, interrupted). A daemon that shuts down may freeze it
(:meth:`RunRecord.force_interrupted`) while a model call is still in flight: later saves are
then ignored. A passed story's file goes to ``done/`` (:func:`done_path_for`,
:func:`move_story_file`), and :func:`finish_done_move` completes a move a crash cut short.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from hero.errors import Interrupted
from hero.llm.client import ModelOutage
from hero.names import StoryRef
from hero.redact import Redactor
from hero.run.budget import BudgetExceeded, Meter
from hero.run.cancel import StoryCancelled, mark_cancelled
from hero.run.cancel import check as check_cancelled
from hero.run.events import StopReason, StoryEvents
from hero.run.workspace import Progress
from hero.state import Round, RunState, StateError, Status, file_digest, load_state, save_state
from hero.story.feedback import write_feedback
from hero.story.record import Story, StoryFileChanged

#: Between the worker's turns the run record (its round's time) is saved at most this often.
USAGE_SAVE_S = 1.0


class RunRecord:
    """The run record of one run of ``story``: ``state`` and the ``meter`` of its spend."""

    def __init__(
        self,
        story: Story,
        home: Path,
        meter: Callable[[RunState, Callable[[], None]], Meter],
        events: StoryEvents,
        redactor: Redactor,
        say: Progress,
        on_save: Callable[[RunState], None] | None = None,
    ) -> None:
        self.story = story
        self.home = home
        self.ref = story.ref
        self.key = self.ref.key
        self.events = events
        self.redactor = redactor
        self.say = say
        self._meter_for = meter
        self._on_save = on_save
        self.state = RunState(id=story.id, plan=story.plan)
        # remade once the record is loaded (take); every call it counts is saved at once
        self.meter = meter(self.state, self.save_counted)
        #: this run ended the story (passed, gave up, error, budget): it may teach the memory
        self.ended = False
        self._story_file_id = story.file_id  # the story file as hero read it
        self._lock = threading.Lock()
        self._saved_at = 0.0  # time.monotonic() of the last save
        self._frozen = False

    def take(self, state: RunState) -> RunState:
        """Run with ``state``: what it spent before counts against the budgets, a round a
        killed run left open too (up to that run's last save)."""
        state.close_open_round(float(state.updated_at or 0.0))
        self.state, self.meter = state, self._meter_for(state, self.save_counted)
        return state

    def start_failed(self, state: RunState) -> RunState:
        """A story that cannot start ends in ``error`` (``state``, see RunStart.failed), once."""
        self.take(state)
        self.save()
        self.events.error(state.error)
        self.say(f"{self.key}: error: {state.error}")
        return state

    def as_refused(self, why: str) -> RunState:
        """What the result of a run refused by another's lock says: the story's record as
        the process running it keeps it (never touched here), with why this run did nothing."""
        try:
            record = load_state(self.home, self.ref) or self.state
        except StateError:
            record = self.state
        return replace(record, error=why)

    def save_counted(self) -> None:
        """After each model call the meter counts: what the call spent is on record before
        the tools it asked for run, so a kill -9 loses none of it. Not synced to the disk
        (the next step's save is): a turn pays a small write, not an fsync."""
        self.save(durable=False)

    def save(self, *, durable: bool = True) -> None:
        """Write the run record, its usage the story's so far (see hero.run.budget.Meter)."""
        with self._lock:
            if self._frozen:
                return
            if self.state.status != Status.RUNNING:  # stopped: a round cut short counts
                self.state.close_open_round(time.time())
            self.state.record_usage(self.meter.spent())
            save_state(self.home, self.state, self.redactor, durable=durable)
            self._saved_at = time.monotonic()
        if self._on_save is not None:
            self._on_save(self.state)

    def save_now_and_then(self) -> None:
        """Save during a long worker turn, at most every ``USAGE_SAVE_S``: a run killed with
        SIGKILL then leaves its round's time on record for the wall budgets, give or take
        that much (its spend is saved after each call)."""
        if time.monotonic() - self._saved_at >= USAGE_SAVE_S:
            self.save()

    def force_interrupted(self) -> None:
        """Record the story as interrupted now, and ignore the run's later saves."""
        with self._lock:
            if self._frozen or self.state.status != Status.RUNNING:
                return
            self.state.status = Status.INTERRUPTED
            self.state.phase = ""
            self.state.close_open_round(time.time())  # its time counts (see hero.run.budget)
            save_state(self.home, self.state, self.redactor)
            self._frozen = True

    def phase(self, phase: str, message: str, cancel: threading.Event | None) -> None:
        """Enter ``phase`` (worker, verify, review), unless the run was stopped or cancelled."""
        if cancel is not None and cancel.is_set():
            raise Interrupted(f"stopped before the {phase} step")
        check_cancelled(self.home, self.ref)
        self.state.phase = phase
        self.save()
        self.say(message)

    # -- the ends ------------------------------------------------------------------------

    def finish(self, status: Status) -> None:
        self.ended = True
        self.state.status = status
        self.state.phase = ""
        self.state.finished_at = time.time()
        self.state.story_digest = file_digest(Path(self.state.story_path))

    def fail(self, message: str) -> None:
        self.finish(Status.ERROR)
        self.state.error = message
        self.events.error(message)
        self.say(f"{self.key}: error: {message}")

    def conflict(self, detail: str) -> None:
        """Its branch conflicts with its target and the round to resolve it did not
        (hero.run.keepup): the story ends in ``error``, its record's ``conflict`` naming the
        files, and nothing of it is reported."""
        self.finish(Status.ERROR)
        self.state.error = detail
        self.events.stop(StopReason.CONFLICT, detail, setting="keep_up")
        self.say(f"{self.key}: {detail}")
        self.save()

    def interrupted(self) -> None:
        """Stopped (Ctrl-C, a daemon's stop): the next run resumes the round."""
        state = self.state
        state.status = Status.INTERRUPTED
        state.phase = ""
        self.save()
        self.events.stop(StopReason.INTERRUPTED, "stopped; run again to resume")
        self.say(f"{self.key}: interrupted in round {state.current_round}; run again to resume")

    def pause(self, exc: ModelOutage) -> None:
        """The model's provider is down or refuses every request (not this story's
        fault): the story is left ``interrupted``, as after a stop, its rounds, trace and
        spend kept, and its record says which provider and why; the next run resumes it
        mid-round. The daemon holds the provider's stories back meanwhile (hero.llm.breaker)."""
        state = self.state
        state.status = Status.INTERRUPTED
        state.phase = ""
        state.outage = {
            "provider": exc.provider,
            "kind": exc.kind,
            "reason": exc.reason,
            "error": str(exc),
        }
        what = "refuses hero's requests" if exc.kind == "permanent" else "is unavailable"
        self.events.stop(StopReason.OUTAGE, str(exc), provider=exc.provider, kind=exc.kind)
        self.say(
            f"{self.key}: paused in round {state.current_round}: model provider "
            f"'{exc.provider}' {what}: {exc}"
        )

    def at_budget(self, exc: BudgetExceeded) -> None:
        """A budget is used up (checked before each model call): the story ends
        ``budget_exceeded`` naming it (its work left was committed by the caller)."""
        self.finish(Status.BUDGET_EXCEEDED)
        self.state.error = str(exc)
        self.events.stop(StopReason.BUDGET, str(exc), setting=exc.key)
        self.state.budget = exc.key
        self.say(
            f"{self.key}: {exc}; its commits are kept on {self.ref.branch}. Raise {exc.key} "
            f"in config/roles.yaml and run `hero retry {self.key}` to continue"
        )

    def cancelled(self, exc: StoryCancelled) -> None:
        """Cancelled from outside (see hero.run.cancel): the story ends ``cancelled`` with the
        reason, its file out of the inbox (its work left was committed by the caller)."""
        mark_cancelled(self.home, self.state, None, str(exc))
        self.events.stop(StopReason.CANCELLED, str(exc))
        self.say(f"{self.key}: {exc}; its commits are kept on {self.ref.branch}")

    def passed(self, n: int) -> None:
        state = self.state
        self.finish(Status.PASSED)
        # Record first, then move: a crash in between leaves a passed state whose file is
        # still in the inbox, which finish_done_move() completes.
        src = Path(state.story_path)
        swapped = _swapped(src, self.story.path, self._story_file_id)
        if swapped:  # not the file hero read: it stays where it is, unread, unmoved
            self.say(f"{self.key}: {src} {swapped}; left where it is")
        else:
            state.story_path = str(done_path_for(self.home, src, self.ref))
        self.save()
        if not swapped:
            move_story_file(src, Path(state.story_path))
        self.say(f"{self.key}: passed in round {n}; branch {self.ref.branch}")

    def leave_feedback(self, record: Round) -> None:
        """Append the round's feedback to the story file, for the user and the next round."""
        story_file = Path(self.state.story_path)
        if story_file.exists():  # the user may have taken it away meanwhile
            # only into the very file hero read: never through a link swapped in for it
            expect = self._story_file_id if story_file == self.story.path else None
            try:
                written = write_feedback(story_file, record.round, record.feedback, expect=expect)
            except StoryFileChanged as exc:
                self.say(f"{self.key}: feedback of round {record.round} not written: {exc}")
            else:
                self._story_file_id = written.file_id
                self.state.story_digest = file_digest(story_file)
        self.save()


def _swapped(path: Path, read: Path, file_id: tuple[int, int] | None) -> str:
    """How the story file at ``path`` is no longer the one hero read at ``read`` (its
    ``file_id``): "" if it is, or if hero cannot tell (a file it read through a link, or
    another path)."""
    if file_id is None or path != read:
        return ""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    if stat.S_ISLNK(st.st_mode):
        return "is now a symlink"
    if (st.st_dev, st.st_ino) != file_id:
        return "is a different file than the one hero read"
    return ""


def done_path_for(home: Path, src: Path, ref: StoryRef | None = None) -> Path:
    """Where a passed story's file goes: ``done/<name>`` (``done/<plan>/<name>`` for a
    plan's story), numbered if the name is taken."""
    done = ref.done_dir(home) if ref is not None else home / "done"
    if src.parent.resolve() == done.resolve():
        return src
    dest = done / src.name
    n = 1
    while dest.exists():
        n += 1
        dest = done / f"{src.stem}.{n}{src.suffix}"
    return dest


def move_story_file(src: Path, dest: Path) -> None:
    if src == dest or not src.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        # link + unlink, not rename: a rename out of a watched inbox is an unpaired move
        # that watchdog holds back for half a second, delaying every event behind it.
        os.link(src, dest)
        os.unlink(src)
    except OSError:  # another filesystem, or no hard links
        shutil.move(str(src), dest)


def finish_done_move(state: RunState, path: Path) -> bool:
    """A crash between recording `passed` and moving the story file leaves the file in the
    inbox. If ``path`` is that very file (same content as when it passed), move it now."""
    dest = Path(state.story_path)
    if (
        state.status != Status.PASSED
        or not state.story_digest
        or path.resolve() == dest.resolve()
        or dest.exists()
        or file_digest(path) != state.story_digest
    ):
        return False
    move_story_file(path, dest)
    return True
