"""A target repository's memory: facts learned by its stories, for the stories after them.

- :mod:`hero.memory.facts`: a fact (kind, text, source, trust), its cleaning and the rules
  of trust (:func:`~hero.memory.facts.merge`);
- :mod:`hero.memory.store`: the memory of one repository in its Markdown file under the
  home (``memory/<repo-key>.md``), bounded, read back after a person's edit, written under
  a lock.

- :mod:`hero.memory.recall`: what a round's prompts are told of it.

What a story teaches it when it ends is hero.roles.learner's (it reads run records, a
layer above); docs/memory.md is the whole account.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hero.memory.facts import Evidence, Fact, Kind, Role, Source, Trust, merge, new_fact
from hero.memory.store import Bounds, Memory, MemoryStore, Recap

if TYPE_CHECKING:
    from hero.config.home import Config
    from hero.story.record import Story

__all__ = [
    "Bounds",
    "Evidence",
    "Fact",
    "Kind",
    "Memory",
    "MemoryStore",
    "Recap",
    "Role",
    "Source",
    "Trust",
    "enabled",
    "merge",
    "new_fact",
    "store_for",
    "trust_of",
]


def enabled(config: Config, story: Story | None = None) -> bool:
    """Whether memory is on for ``story`` (None: for the home): the home's ``memory``
    setting, and not ``memory: false`` in the story. A story cannot turn on what the home
    turned off."""
    return config.memory.enabled and (story is None or story.memory is not False)


def trust_of(story: Story) -> Trust:
    """How far what ``story`` teaches is trusted. What a story teaches is text a model or a
    command wrote (its reviewer's comments, its checks' output, the memory model's words),
    never a person's, whoever wrote the story: ``model``; ``outside`` for a story made from
    a GitHub issue (``source:`` set), which a stranger wrote."""
    return Trust.OUTSIDE if story.source else Trust.MODEL


def store_for(config: Config) -> MemoryStore:
    """The memory of the home's target repository, with the home's bounds and its redactor
    (every secret the configuration knows)."""
    from hero.redact import Redactor

    settings = config.memory
    return MemoryStore.for_repo(
        config.home,
        config.target_repo,
        redactor=Redactor(config.secrets),
        bounds=Bounds(settings.max_facts, settings.max_bytes, settings.recap_stories),
    )
