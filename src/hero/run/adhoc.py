"""Ad-hoc tasks: ``hero run --task TEXT`` turns a line of text into a story and runs it.

The story is written to ``inbox/<id>.md`` through the one story writer
(:func:`hero.story.format.write_story`), so it is like any other: ``hero status`` shows it, a
second ``hero run --task`` with the same words resumes it, and it ends in ``done/``.

- Its id is ``--id``, else a slug of the words of its first line (``fix-the-typo-in-readme``).
- Its title is the task's first line, cut; its body a ``## Goal`` section holding the
  task's text with its headings demoted (:func:`hero.story.feedback.contain_sections`), so that no
  line of the task can open another section (the reviewer's feedback, say) or hide one.
- ``--verify`` and ``--scope`` (each repeatable) are its ``verify`` and ``scope``.

An id is taken when the inbox holds a story with it, when it has a run record, or when
``done/`` holds ``<id>.md``. A taken id is never clobbered: the very same task (same id,
title, text, checks and scope) is resumed; anything else is refused with an explicit
``--id`` (:class:`TaskIdTaken`, exit 2) and skipped without one (``<slug>-2``, ``-3``...).

A ``hero watch`` on the same home sees the new file too. Both take the story's lock
before touching anything (:func:`hero.locks.story_lock`), so the story runs once. When
the daemon wins, ``hero run --task`` says so (naming ``hero logs <id> -f``), waits for the
daemon's run to end and reports its result as its own (:func:`run_or_follow`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hero.errors import UsageError

if TYPE_CHECKING:
    from hero.state import RunState
    from hero.story.record import Story

#: A title is the task's first line, cut to this many characters.
MAX_TITLE_CHARS = 72
#: A slug made from the task's words is at most this long (before a ``-N`` suffix).
MAX_SLUG_CHARS = 40
#: Ids tried without ``--id`` (``slug``, ``slug-2``, ...) before giving up.
MAX_SUFFIX = 1000
#: How often ``hero run --task`` looks whether the process that took its story let it go.
FOLLOW_POLL_S = 0.2
_WORD_RE = re.compile(r"[a-z0-9]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class TaskIdTaken(UsageError):
    """``--id`` names a story that is not this task; nothing was written."""


@dataclass(frozen=True)
class Task:
    """What the command line asked for: the task's text, its checks and scope, its id."""

    text: str
    verify: tuple[str, ...] = ()
    scope: tuple[str, ...] = ()
    id: str | None = None


def task_from(text: str, verify: list[str], scope: list[str], story_id: str | None) -> Task:
    """The task, its every string checked: UsageError naming the flag for one that a story
    cannot hold (a NUL byte, bytes that are not UTF-8, nothing)."""
    return Task(
        text=_text(text, "--task"),
        verify=tuple(_text(v, "--verify") for v in verify),
        scope=tuple(_text(s, "--scope") for s in scope),
        id=None if story_id is None else _text(story_id, "--id"),
    )


def _text(value: str, flag: str) -> str:
    """``value`` as text a story can hold; UsageError naming ``flag`` otherwise."""
    if "\x00" in value:
        raise UsageError(f"{flag}: holds a NUL byte; a story is text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # argv that is not UTF-8 comes in with its bytes as lone surrogates (PEP 383)
        raise UsageError(f"{flag}: is not valid UTF-8 text") from None
    if not value.strip():
        raise UsageError(f"{flag}: is empty")
    return value


def enqueue(task: Task, home: Path) -> Path:
    """Write the task's story to ``inbox/<id>.md`` (or find it there, for a resume) and
    return the path; TaskIdTaken for an ``--id`` that is not free."""
    from hero.names import story_id_problem

    _warm_up()
    if task.id is not None:
        problem = story_id_problem(task.id)
        if problem is not None:
            raise UsageError(f"--id: {problem}")
        candidates: list[str] = [task.id]
    else:
        base = slug(title_of(task.text))  # the first line's words
        candidates = [base] + [f"{base}-{n}" for n in range(2, MAX_SUFFIX + 1)]
    inbox = Path(home) / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    elsewhere = _inbox_ids(inbox)  # read once: each candidate is looked up in it
    for story_id in candidates:
        path = inbox / f"{story_id}.md"
        metadata, body = story_parts(task, story_id)
        wanted = _checked(metadata, body, path, task)
        # twice: a file that appears between the look and the write (another `hero run
        # --task` of the same words) is looked at again, to resume it if it is this task
        for _ in range(2):
            taken = _taken(home, path, wanted, elsewhere)
            if taken == _SAME:
                return path
            if taken:
                break
            if _write(path, metadata, body):
                return path
        else:
            taken = f"inbox/{path.name} keeps changing"
        if task.id is not None:
            raise TaskIdTaken(
                f"--id {task.id}: {taken}; nothing written (give another --id, or run "
                "the same task again with the same words to resume it)"
            )
    raise UsageError(f"--task: ids {candidates[0]} to {candidates[-1]} are all taken; give --id")


def story_parts(task: Task, story_id: str) -> tuple[dict[str, object], str]:
    """The metadata and body of the task's story."""
    from hero.story.feedback import contain_sections

    metadata: dict[str, object] = {"id": story_id, "title": title_of(task.text)}
    if task.verify:
        metadata["verify"] = list(task.verify)
    if task.scope:
        metadata["scope"] = list(task.scope)
    text = task.text.replace("\r\n", "\n").replace("\r", "\n").strip("\n").rstrip()
    return metadata, f"## Goal\n\n{contain_sections(text)}\n"


def title_of(text: str) -> str:
    """The task's first line with a letter or digit in it, its heading marks and control
    characters dropped, cut to MAX_TITLE_CHARS."""
    for line in text.splitlines():
        words = " ".join(_CONTROL_RE.sub(" ", line).lstrip(" \t#>").split())
        if any(c.isalnum() for c in words):
            if len(words) > MAX_TITLE_CHARS:
                words = words[: MAX_TITLE_CHARS - 3].rstrip() + "..."
            return words
    return "Ad-hoc task"


def slug(text: str) -> str:
    """A story id from the task's first words: lowercase ASCII letters and digits joined
    by ``-``, at most MAX_SLUG_CHARS; ``task`` when no word is left."""
    import unicodedata

    from hero.names import story_id_problem

    # accents dropped rather than the letters they sit on: "Ünïcode" is "unicode"
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    out = ""
    for word in _WORD_RE.findall(ascii_text.lower()):
        word = word[:MAX_SLUG_CHARS]
        if out and len(out) + 1 + len(word) > MAX_SLUG_CHARS:
            break
        out = f"{out}-{word}" if out else word
    if not out:
        return "task"
    return out if story_id_problem(out) is None else f"task-{out}"


def run_or_follow(
    run: Callable[[], RunState], home: Path, story_id: str | None, say: Callable[[str], None]
) -> tuple[RunState, bool]:
    """The story's record after ``run`` ran it, and whether another process ran it instead.

    With a ``story_id`` (a task's story), a ``hero watch`` of the same home that took the
    story first is waited for: its record once that run has ended the story (True), else
    (it was interrupted, or the lock was held for a moment only) ``run`` again here. The
    lock of another home on the same repository is not waited for: StoryBusy, with where
    to follow the story. Without a ``story_id``, StoryBusy goes up as it is."""
    from hero.locks import StoryBusy, is_held, story_lock_path
    from hero.state import TERMINAL, load_state
    from hero.story.record import StoryError

    while True:
        try:
            return run(), False
        except StoryBusy as exc:
            if story_id is None:
                raise
            busy = exc
        except StoryError:
            # the daemon may have taken the task's story, run it to its end and moved its file
            # to done/ before this process read it: that run's record is the answer
            ended = None if story_id is None else load_state(home, story_id)
            if ended is None or ended.status not in TERMINAL or _in_inbox(home, story_id):
                raise
            say(f"another hero process (hero watch?) ran this task's story first: {story_id}")
            return ended, True
        lock = story_lock_path(home, story_id)
        held = is_held(lock)
        if held:
            say(
                f"another hero process (hero watch?) took this task's story first; waiting "
                f"for it to end (follow it with `hero logs {story_id} -f`)"
            )
        while is_held(lock):
            time.sleep(FOLLOW_POLL_S)  # another process's run: nothing to be woken by
        state = load_state(home, story_id)
        if state is not None and state.status in TERMINAL:
            return state, True
        if not held:  # not this home's lock: another home runs the id in the same repository
            raise taken_elsewhere(story_id, str(busy)) from None


def _in_inbox(home: Path, story_id: str | None) -> bool:
    """Whether the task's story file is still in the inbox (then its error is its own)."""
    path = Path(home) / "inbox" / f"{story_id}.md"
    return path.exists() or path.is_symlink()


def taken_elsewhere(story_id: str, reason: str) -> UsageError:
    """What ``hero run --task`` says when another process runs its story."""
    from hero.locks import StoryBusy

    return StoryBusy(
        f"{reason}; it took this task's story (inbox/{story_id}.md): follow it with "
        f"`hero logs {story_id} -f`"
    )


# ----------------------------------------------------------------------------- inside

_SAME = "same"


def _checked(metadata: dict[str, object], body: str, path: Path, task: Task) -> Story:
    """The story as hero will read it back; UsageError if the text did not survive the
    trip (hero would run something other than what was asked)."""
    from hero.story.format import dumps_story, parse_story_text
    from hero.story.record import MAX_STORY_BYTES

    text = dumps_story(metadata, body, path=path)
    if len(text.encode("utf-8")) > MAX_STORY_BYTES:
        raise UsageError(f"--task: the story would exceed {MAX_STORY_BYTES} bytes; shorten it")
    story = parse_story_text(text, path)
    verify = tuple(c for tier in story.verify for c in tier.commands)
    if verify != tuple(v.strip() for v in task.verify) or story.scope != tuple(
        s.strip() for s in task.scope
    ):
        raise UsageError("--verify/--scope: not kept as given in the story; check them")
    return story


def _same(a: Story, b: Story) -> bool:
    """Whether two stories are one task: reviewer feedback and the file aside."""
    from hero.story.format import story_metadata

    return story_metadata(a) == story_metadata(b) and a.body == b.body


def _taken(home: Path, path: Path, wanted: Story, elsewhere: dict[str, str]) -> str:
    """``_SAME`` when ``path`` holds this very task; why the id is taken otherwise; ""
    when it is free. ``elsewhere``: the ids of the inbox's other files (:func:`_inbox_ids`)."""
    from hero.state import StateError, Status, load_state
    from hero.story.format import parse_story
    from hero.story.record import StoryError

    story_id = wanted.id
    if path.exists() or path.is_symlink():
        try:
            found = parse_story(path)
        except (StoryError, OSError) as exc:
            return f"inbox/{path.name} is there and cannot be read ({exc})"
        if found.id != story_id or not _same(found, wanted):
            return f"inbox/{path.name} holds another story"
        # this very task, run before: resumed as `hero run inbox/<id>.md` would (which
        # also knows a pass whose file a crash kept from done/)
        return _SAME
    other = elsewhere.get(story_id)
    if other is not None and other != path.name:
        return f"inbox/{other} holds a story with id '{story_id}'"
    try:
        state = load_state(home, story_id)
    except StateError as exc:
        return f"its run record cannot be read ({exc})"
    if state is not None and state.status == Status.PASSED:
        where = f" on branch {state.branch}" if state.branch else ""
        return f"story '{story_id}' already passed{where}"
    if state is not None:
        its = f" (from {state.story_path})" if state.story_path else ""
        return f"story '{story_id}' has a run record{its}: runs/state/{story_id}.json"
    done = Path(home) / "done" / f"{story_id}.md"
    if done.exists() or done.is_symlink():
        return f"done/{done.name} is there"
    return ""


def _inbox_ids(inbox: Path) -> dict[str, str]:
    """The ids of the loose stories of the inbox that can be read, each with its file's
    name (the first, by name, of several)."""
    from hero.daemon.inbox import loose_stories

    found: dict[str, str] = {}
    for story in loose_stories(inbox):
        found.setdefault(story.id, story.path.name)
    return found


def _write(path: Path, metadata: dict[str, object], body: str) -> bool:
    """Write the story, never over a file; False when one appeared meanwhile."""
    from hero.story.format import write_story

    try:
        write_story(path, metadata, body, exist_ok=False)
    except FileExistsError:
        return False
    return True


def _warm_up() -> None:
    """Import what running the story needs before its file appears in the inbox: the
    sooner this process reaches the story's lock after the write, the less often a
    ``hero watch`` on the same home takes the story first."""
    import hero.llm.client
    import hero.run.launch
    import hero.run.pipeline  # noqa: F401
