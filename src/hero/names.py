"""Where everything of one story lives, from its id and its plan: one rule for every path.

A loose story (a file straight in ``inbox/``) is known by its id: ``runs/state/<id>.json``,
``runs/<id>/``, ``worktrees/<id>``, branch ``hero/<id>``, ``done/<file>``.

A story of a plan (a file in ``inbox/<plan>/``) is known as ``<plan>/<id>``, and everything of
it lives under ``plans/<plan>/``: ``runs/state/plans/<plan>/<id>.json``,
``runs/plans/<plan>/<id>/``, ``worktrees/plans/<plan>/<id>``, branch
``hero/plans/<plan>/<id>``, ``done/<plan>/<file>``. Two plans may so reuse one id. The plan's
own branch, the merge of its leaves, is ``hero/plan/<plan>``.

What a story id may be is one rule, :func:`story_id_problem`, used wherever an id comes in
(a story file, a manifest, a planner's answer, a run record's name, a key read from Redis):
letters, digits, '.', '_' or '-', starting with a letter or digit (:data:`ID_RE`), at most
:data:`MAX_ID_CHARS`, usable as a git branch, not reserved. Story ids ``plan`` and ``plans``
are reserved (:data:`RESERVED_IDS`): a loose story by those names would take the paths and
branches plans live under. Plan names have no dots, so no plan folder can be mistaken for a
story's file (``<id>.json``, ``<name>.md``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from hero.yamlio import quote

#: A story id: letters, digits, '.', '_' or '-', starting with a letter or digit.
ID_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
MAX_ID_CHARS = 100
#: A plan's name: letters, digits, '_' and '-', starting with a letter or digit; no dots.
PLAN_RE = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"
MAX_PLAN_CHARS = 64
#: Story ids hero keeps for plans' paths and branches.
RESERVED_IDS = ("plan", "plans")
#: The file that makes a folder of ``inbox/`` a plan.
MANIFEST = "_manifest.yaml"


def story_id_problem(story_id: str) -> str | None:
    """Why ``story_id`` cannot be a story's id, or None: the one story-id rule. A caller
    that has its own words for a bad id says them; a story file says this."""
    if not re.fullmatch(ID_RE, story_id):
        return (
            "expected letters, digits, '.', '_' or '-' starting with a letter or digit "
            f"(pattern {ID_RE}); found {quote(story_id)}"
        )
    if len(story_id) > MAX_ID_CHARS:
        return f"expected at most {MAX_ID_CHARS} characters; found {len(story_id)}"
    if ".." in story_id or story_id.endswith((".", ".lock")):
        return (
            "expected a name usable as a git branch (no '..', not ending in '.' or '.lock'); "
            f"found {quote(story_id)}"
        )
    if story_id in RESERVED_IDS:
        return (
            f"expected another name: {quote(story_id)} is reserved for hero's plans "
            f"(branches hero/plan/<name>, hero/plans/...); reserved: {', '.join(RESERVED_IDS)}"
        )
    return None


def is_story_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a string that :func:`story_id_problem` accepts."""
    return isinstance(value, str) and story_id_problem(value) is None


def plan_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a plan, or None."""
    if not re.fullmatch(PLAN_RE, name):
        return (
            "expected letters, digits, '_' or '-', starting with a letter or digit "
            f"(pattern {PLAN_RE}); found {name!r}"
        )
    if len(name) > MAX_PLAN_CHARS:
        return f"expected at most {MAX_PLAN_CHARS} characters; found {len(name)}"
    return None


def plan_branch(plan: str) -> str:
    """The branch that holds a whole plan's work once every story passed."""
    return f"hero/plan/{plan}"


@dataclass(frozen=True, order=True)
class StoryRef:
    """A story's name in a home: its plan ("" for a loose story) and its id."""

    plan: str
    id: str

    @classmethod
    def of(cls, value: StoryRef | str) -> StoryRef:
        """``value`` as a StoryRef: a ref as is; ``"<plan>/<id>"`` or ``"<id>"`` parsed."""
        if isinstance(value, StoryRef):
            return value
        plan, sep, story_id = value.rpartition("/")
        return cls(plan if sep else "", story_id)

    @property
    def key(self) -> str:
        """What users type and read: ``<id>``, or ``<plan>/<id>``."""
        return f"{self.plan}/{self.id}" if self.plan else self.id

    @property
    def rel(self) -> str:
        """The relative path part every per-story path is made from."""
        return f"plans/{self.plan}/{self.id}" if self.plan else self.id

    @property
    def branch(self) -> str:
        return f"hero/{self.rel}"

    def state_path(self, home: Path) -> Path:
        return Path(home) / "runs" / "state" / f"{self.rel}.json"

    def run_dir(self, home: Path) -> Path:
        return Path(home) / "runs" / self.rel

    def worktree(self, home: Path) -> Path:
        return Path(home) / "worktrees" / self.rel

    def lock_path(self, home: Path) -> Path:
        return Path(home) / "runs" / "locks" / f"{self.rel}.lock"

    def done_dir(self, home: Path) -> Path:
        return Path(home) / "done" / self.plan if self.plan else Path(home) / "done"

    def marker(self, home: Path) -> str:
        """The value of ``RUN_MARKER`` in every process run for the story."""
        return f"{Path(home).resolve()}/{self.rel}"

    def valid(self) -> bool:
        """Whether this could name a story at all (a user's typo cannot reach outside runs/):
        its id by the one rule, its plan (if any) a plan's name."""
        if story_id_problem(self.id) is not None:
            return False
        return not self.plan or plan_name_problem(self.plan) is None

    def __str__(self) -> str:
        return self.key
