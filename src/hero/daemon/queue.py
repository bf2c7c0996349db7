"""The queue rule: which inbox story may run, and in what order.

One owner for the rule. The dispatcher takes stories by it; ``hero status`` shows the
queue by it, so what status says would run next is what runs next.

- Order: ``high`` before ``normal`` before ``low``, then the oldest file first, then by
  name. Priority decides before age, whatever order the files were seen in.
- Of two files with one story id, the one that came first (oldest, then by name) keeps it;
  the other is refused.
- A story may run unless its run record says otherwise (:func:`admit`): another process is
  running it, it passed, or it ended (gave up, error, skipped) and its file is unchanged
  since (an edit or ``hero retry`` makes it eligible again). A story id that passed is
  refused from any file but the one it passed with: ``hero watch`` and ``hero run`` both
  ask :func:`admit`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from hero.locks import is_held, story_lock_path
from hero.state import TERMINAL, RunState, StateError, Status, file_digest, load_state
from hero.story.record import PRIORITIES, Story

_RANK = {p: i for i, p in enumerate(PRIORITIES)}  # low < normal < high


@dataclass(frozen=True)
class Entry:
    """A valid story file in the inbox: the story, its file, and when it arrived (mtime)."""

    story: Story
    path: Path
    arrived: float

    @property
    def key(self) -> tuple[int, float, str]:
        """Sort key: high before normal before low, then oldest first, then by name."""
        return order_key(self.story.priority, self.arrived, self.path.name)


def order_key(priority: str, arrived: float, name: str) -> tuple[int, float, str]:
    """high before normal before low, then oldest first, then by name."""
    return (-_RANK.get(priority, _RANK["normal"]), arrived, name)


def comes_first(a: Entry, b: Entry) -> bool:
    """Of two files with one story id, whether ``a`` keeps the id (it came first)."""
    return (a.arrived, a.path.name) <= (b.arrived, b.path.name)


def duplicate_reason(story_id: str, keeper: str) -> str:
    return f"story id '{story_id}' is already queued from {keeper}"


def arrange(entries: Iterable[Entry]) -> tuple[list[Entry], list[tuple[Entry, Entry]]]:
    """The entries in the order they run, and the refused ``(entry, keeper)`` pairs: a
    second file with an id already queued, which the file that came first keeps."""
    entries = list(entries)
    keepers: dict[str, Entry] = {}
    for entry in sorted(entries, key=lambda e: (e.arrived, e.path.name)):
        keepers.setdefault(entry.story.ref.key, entry)
    queue = sorted(keepers.values(), key=lambda e: e.key)
    refused = [
        (e, keepers[e.story.ref.key])
        for e in sorted(entries, key=lambda e: e.key)
        if keepers[e.story.ref.key] is not e
    ]
    return queue, refused


class Admit(StrEnum):
    RUN = "run"  # may run now (new, queued, interrupted, left running by a dead run, edited)
    BUSY = "busy"  # another hero process runs it right now: look again later
    WAIT = "wait"  # it ended and its file is unchanged: not until an edit or a retry
    DONE = "done"  # the very file of a story that passed (a crash kept it from done/)
    REFUSE = "refuse"  # not as it is: ``reason`` says why


@dataclass(frozen=True)
class Decision:
    """What to do with a story file; ``reason`` says why it does not run (for ``DONE``: why
    it is refused if it cannot be moved to done/); ``state`` is its run record."""

    admit: Admit
    reason: str = ""
    state: RunState | None = field(default=None, compare=False)


def admit(home: Path, story: Story, path: Path) -> Decision:
    """Whether the story in ``path`` may run, from its run record (``runs/state/<id>.json``)
    and its lock. Does not know which other inbox files hold the same id: see ``arrange``."""
    ref = story.ref
    try:
        state = load_state(home, ref)
    except StateError as exc:
        return Decision(Admit.REFUSE, str(exc))
    if state is None:
        return Decision(Admit.RUN)
    status = state.status
    if status == Status.RUNNING and is_held(story_lock_path(home, ref)):
        reason = f"story '{ref.key}' is being run by another hero process"
        return Decision(Admit.BUSY, reason, state)
    unchanged = bool(state.story_digest) and state.story_digest == file_digest(path)
    if status == Status.PASSED:
        where = f" on branch {state.branch}" if state.branch else ""
        its_file = f" from {state.story_path}" if state.story_path else ""
        reason = (
            f"story id '{ref.key}' already passed{where}{its_file} "
            f"(runs/state/{ref.rel}.json); give this story a new id to run it"
        )
        # the file it passed with: where it was moved to (done/), or still here with the
        # same content after a crash between recording the pass and moving the file
        same_file = unchanged or _same_path(path, state.story_path)
        return Decision(Admit.DONE if same_file else Admit.REFUSE, reason, state)
    if status == Status.SKIPPED:
        return Decision(Admit.RUN, "", state)  # the dependency rule says when (plans.gate)
    if status in TERMINAL and unchanged:
        return Decision(Admit.WAIT, f"edit the story or run `hero retry {ref.key}`", state)
    return Decision(Admit.RUN, "", state)


def _same_path(path: Path, recorded: str) -> bool:
    if not recorded:
        return False
    try:
        return path.resolve() == Path(recorded).resolve()
    except OSError:  # a symlink loop
        return False
