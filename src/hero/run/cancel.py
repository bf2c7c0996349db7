"""Cancelling a story from outside its run (its GitHub issue was closed or lost its label:
see :mod:`hero.github.cancel`).

A cancellation is first a request, ``runs/<key>/cancel.json`` (``{"reason": ...}``), written
before anything else, so that whoever takes the story next sees it:

- a story nobody runs (queued, interrupted, or left ``running`` by a killed run) is
  cancelled at once under its lock (:func:`cancel`): its run record says ``cancelled`` with
  the reason, and its file leaves the inbox for ``cancelled/`` (``cancelled/<plan>/`` for a
  plan's story), where the user sees it and the daemon does not take it again;
- a story being run (its lock is held) ends itself: the run checks the request before
  each phase and before each model call (:func:`check`), commits the work left, records
  ``cancelled`` and moves the file the same way. A run that starts while the request
  stands ends at once, before touching anything.

The request stays until ``hero retry KEY`` withdraws it (:func:`withdraw`) and puts the
story file back in the inbox. A cancelled story's branch and commits are kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from hero.errors import HeroError
from hero.fsio import atomic_write
from hero.locks import StoryBusy, story_lock
from hero.names import StoryRef
from hero.state import RunState, Status, file_digest, load_state, save_state
from hero.yamlio import ValueProblem, read_file

#: The request file, in the story's run folder (``runs/<key>/``).
REQUEST_NAME = "cancel.json"
#: A request larger than this is not hero's; its reason is not read.
MAX_REQUEST_BYTES = 64 * 1024
#: Where a cancelled story's file goes, relative to the home.
CANCELLED_DIR = "cancelled"
#: The statuses a story is cancelled from: it would run (again) if left alone.
CANCELLABLE = frozenset({Status.QUEUED, Status.RUNNING, Status.INTERRUPTED})


class StoryCancelled(HeroError):
    """The story was cancelled from outside its run; ``str()`` is the reason."""


@dataclass(frozen=True)
class Cancelled:
    """What :func:`cancel` did: ``"cancelled"`` (recorded, its file moved to ``moved_to``),
    ``"asked"`` (a run holds the story: it ends itself at its next step) or ``"left"``
    (the story had already ended, or had been cancelled: nothing changed)."""

    outcome: str
    moved_to: Path | None = None


def request_path(home: Path, ref: StoryRef) -> Path:
    return ref.run_dir(home) / REQUEST_NAME


def requested(home: Path, ref: StoryRef) -> str | None:
    """The reason of the standing request to cancel the story, or None when there is none.
    A request that cannot be read as hero writes it still stands, with a generic reason:
    whoever wrote it wants the story stopped."""
    path = request_path(home, ref)
    try:
        data = json.loads(read_file(path, limit=MAX_REQUEST_BYTES, what="cancel request"))
    except FileNotFoundError:
        return None
    except (OSError, ValueProblem, ValueError, RecursionError):
        return f"cancelled (see {path})"
    reason = data.get("reason") if isinstance(data, dict) else None
    text = " ".join(str(reason).split()) if reason else ""
    return text or f"cancelled (see {path})"


def check(home: Path, ref: StoryRef) -> None:
    """StoryCancelled with the reason when a request to cancel the story stands."""
    reason = requested(home, ref)
    if reason is not None:
        raise StoryCancelled(reason)


def withdraw(home: Path, ref: StoryRef) -> bool:
    """Take the request away (``hero retry``); whether there was one."""
    try:
        request_path(home, ref).unlink()
    except FileNotFoundError:
        return False
    return True


def cancel(home: Path, ref: StoryRef, story_file: Path | None, reason: str) -> Cancelled:
    """Cancel the story ``ref`` (its file ``story_file``, if known) with ``reason``: the
    request first, then at once if no run holds the story (see the module's text)."""
    path = request_path(home, ref)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (json.dumps({"reason": reason, "at": time.time()}) + "\n").encode())
    try:
        with story_lock(home, ref):
            state = load_state(home, ref)
            if state is not None and state.status not in CANCELLABLE:
                return Cancelled("left")  # ended meanwhile, or cancelled before
            state = state or RunState(id=ref.id, plan=ref.plan)
            moved = mark_cancelled(home, state, story_file, reason)
            save_state(home, state)
            return Cancelled("cancelled", moved)
    except StoryBusy:
        return Cancelled("asked")


def cancel_at_start(home: Path, ref: StoryRef, story_file: Path, reason: str) -> RunState:
    """A run asked to start a story whose cancellation stands (the caller holds its lock):
    the record, ended ``cancelled`` (saved), unless the story had passed."""
    state = load_state(home, ref) or RunState(id=ref.id, plan=ref.plan)
    if state.status in (Status.PASSED, Status.CANCELLED):
        return state
    mark_cancelled(home, state, story_file, reason)
    save_state(home, state)
    return state


def mark_cancelled(
    home: Path, state: RunState, story_file: Path | None, reason: str
) -> Path | None:
    """``state`` ended ``cancelled`` with ``reason`` (not saved: the caller saves it), its
    story file moved out of the inbox to ``cancelled/``; where the file went, or None when
    it stayed (none, already there, or it could not be moved: then it waits in the inbox
    as any ended story does, for `hero retry`)."""
    ref = state.ref
    src = story_file or (Path(state.story_path) if state.story_path else None)
    moved = None
    if src is not None and src.is_file() and src.parent.resolve() != cancelled_dir(home, ref):
        try:
            dest = cancelled_path_for(home, src, ref)
            _move(src, dest)
            moved = dest
        except OSError:  # the record still says cancelled, so the story does not run
            moved = None
    if src is not None:
        state.story_path = str(moved or src)
        state.story_digest = file_digest(moved or src)
    state.status = Status.CANCELLED
    state.phase = ""
    state.error = reason
    state.finished_at = time.time()
    return moved


def cancelled_dir(home: Path, ref: StoryRef) -> Path:
    folder = Path(home) / CANCELLED_DIR
    return (folder / ref.plan if ref.plan else folder).resolve()


def cancelled_path_for(home: Path, src: Path, ref: StoryRef) -> Path:
    """``cancelled/<name>`` (``cancelled/<plan>/<name>``), numbered if the name is taken."""
    folder = cancelled_dir(home, ref)
    dest = folder / src.name
    n = 1
    while os.path.lexists(dest):
        n += 1
        dest = folder / f"{src.stem}.{n}{src.suffix}"
    return dest


def put_back(home: Path, state: RunState) -> Path | None:
    """A cancelled story's file back in the inbox (``hero retry``); where it now is, or
    None when it is not in ``cancelled/`` (left where it is)."""
    if not state.story_path:
        return None
    src = Path(state.story_path)
    if not src.is_file() or src.parent.resolve() != cancelled_dir(home, state.ref):
        return None
    inbox = Path(home) / "inbox"
    folder = inbox / state.ref.plan if state.ref.plan else inbox
    dest = folder / src.name
    if os.path.lexists(dest):
        return None  # a file of that name came meanwhile: the user's to sort out
    _move(src, dest)
    return dest


def _move(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)  # link + unlink: never over a file that appeared meanwhile
    except FileExistsError:
        raise
    except OSError:  # another file system, or no hard links
        shutil.move(str(src), dest)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(src)
