"""The story as hero holds it (:class:`Story`, its checks' tiers :class:`VerifyTier`), the limits on a
story file, and the errors every reader of one raises (:class:`StoryError`, whose text is one
line ``<path>: <field>: <what was expected>; found <what was there>``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hero.errors import UsageError
from hero.names import (
    StoryRef,
)

PRIORITIES = ("low", "normal", "high")
MAX_STORY_BYTES = 1_048_576

FEEDBACK_HEADING = "## Reviewer Feedback (auto)"
#: The keys of ``source:``, where a story taken from a GitHub issue came from.
SOURCE_KEYS = ("repo", "issue", "url", "author")
#: The roles a story's ``model:`` and ``reasoning_effort:`` may name (the planner is not
#: the story's: it runs before there is one).
MODEL_ROLES = ("worker", "reviewer")
MAX_MODEL_CHARS = 200
#: The reasoning_effort that sends none (for a model that takes no such parameter).
EFFORT_NOT_SENT = "none"
FLAT_VERIFY_TIER = "verify"


class StoryError(UsageError):
    """A story file that cannot be used; ``str(e) == f"{path}: {field}: {message}"``."""

    kind = "invalid story"

    def __init__(self, path: Path | str, field: str, message: str) -> None:
        self.path = Path(path)
        self.field = field
        self.message = " ".join(str(message).split())
        super().__init__(f"{self.path}: {self.field}: {self.message}")


class StoryFileChanged(StoryError):
    """The story file is no longer the regular file hero read (a symlink now, another file,
    gone): hero wrote nothing to it. ``found`` says what is there now."""

    def __init__(self, path: Path | str, found: str) -> None:
        self.found = found
        super().__init__(path, "file", f"{found}; hero wrote nothing to it")


#: A file's identity: ``(st_dev, st_ino)`` of the file as opened.
FileId = tuple[int, int]


@dataclass(frozen=True)
class VerifyTier:
    name: str
    commands: tuple[str, ...]


@dataclass(frozen=True)
class Story:
    path: Path
    id: str
    title: str
    priority: str = "normal"
    max_retries: int | None = None
    verify: tuple[VerifyTier, ...] = ()
    setup: tuple[str, ...] = ()  # after the home's setup commands (hero.run.environment)
    scope: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    base_ref: str | None = None
    # the story whose finished branch this one adds rounds to (a follow-up): it works on that
    # story's branch from its tip, its body the findings of its round 1 (hero.run.revision)
    revises: str | None = None
    allow_empty: bool = False  # may pass without a commit of its own
    # False: the repository's memory is neither told this story nor learns from it; None:
    # as the home says (memory_enabled); True cannot turn on what the home turned off
    memory: bool | None = None
    # the story's model and reasoning effort, as written: one string for both roles, or
    # {worker: ..., reviewer: ...}; None: config/roles.yaml's (resolved by hero.llm.models)
    model: str | Mapping[str, str] | None = field(default=None, hash=False)
    reasoning_effort: str | Mapping[str, str] | None = field(default=None, hash=False)
    # the story's narrowing of its roles' tools: {worker: [...], reviewer: [...]}; a role it
    # leaves out keeps config/roles.yaml's list (applied by hero.llm.models.story_config)
    tools: Mapping[str, tuple[str, ...]] | None = field(default=None, hash=False)
    # where the story came from: {repo, issue, url, author} of a GitHub issue; None: a person
    source: Mapping[str, Any] | None = field(default=None, hash=False)
    # free words to group and filter stories by (the board's label filter); a GitHub issue's
    # story carries the labels
    labels: tuple[str, ...] = ()
    body: str = ""
    goal: str = ""
    acceptance_criteria: tuple[str, ...] = ()
    constraints: str = ""
    out_of_scope: str = ""
    feedback: str = ""
    plan: str = ""  # the plan whose folder holds the file ("" for a loose story); not a field
    # (st_dev, st_ino) of the file parse_story read, from fstat on the descriptor it read;
    # None when the story came from text, or was read through a symlink (which hero reads,
    # but never writes back through). append_feedback(..., expect=story.file_id) writes only
    # to this very file. Not part of the story's value: two reads of one text are equal.
    file_id: FileId | None = field(default=None, compare=False)

    @property
    def ref(self) -> StoryRef:
        """The story's name in the home: its plan and its id (see :mod:`hero.names`)."""
        return StoryRef(self.plan, self.id)
