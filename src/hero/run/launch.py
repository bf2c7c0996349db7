"""What the commands share: build the models a config names and run one story.

`hero run` and `hero demo` (hero.commands.run, hero.commands.demo) both call this, so
neither imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hero.config.home import Config
from hero.errors import UsageError
from hero.llm.models import Override
from hero.run.events import EventSink
from hero.run.pipeline import Progress
from hero.state import RunState
from hero.story.record import Story

if TYPE_CHECKING:
    from hero.daemon.queue import Decision


class Refused(UsageError):
    """The story may not run from this file as it stands (say, its id already passed from
    another file); the message is one line, for the user."""


def run_with_config(
    story_path: Path,
    config: Config,
    *,
    progress: Progress | None = None,
    events: EventSink | None = None,
    models: Override | None = None,
) -> RunState:
    """Build the models from the config and run the story: the path `hero run` and the demo share.

    Asks the queue's rule first (:func:`hero.daemon.queue.admit`, as `hero watch` does):
    a story whose id already passed from another file is refused (:class:`Refused`), and
    nothing is run. StoryError for an invalid story (its ``model:`` too), StateError for an
    unreadable record. ``events``: the stream the story's events go to (`--events`,
    hero.run.events). ``models``: `hero run --model` / `--reasoning-effort`, over the story's
    (hero.llm.models).
    """
    from hero.llm.client import story_clients
    from hero.llm.models import story_config
    from hero.run.pipeline import run_story

    story, _ = admit_run(story_path, config)
    config = story_config(config, story, models)  # its models: the override's, the story's

    def retry_note(msg: str) -> None:
        if progress:
            progress(f"model: {msg}")

    worker, reviewer = story_clients(config, on_retry=retry_note)
    return run_story(story_path, config, worker, reviewer, progress=progress, events=events)


def admit_run(story_path: Path, config: Config) -> tuple[Story, Decision]:
    """The story in ``story_path`` and the queue's decision on it, when `hero run` may run
    it from this file: :class:`Refused` (one line) when it belongs to a plan, its id already
    passed from another file, or its dependencies have not passed; StoryError for an invalid
    story. Reads only: `hero run --dry-run` asks the same (see hero.run.dryrun)."""
    from hero.daemon.queue import Admit, admit
    from hero.names import MANIFEST
    from hero.plans.gate import Gate, Rule
    from hero.state import Status
    from hero.story.format import parse_story

    story = parse_story(story_path)
    folder = story_path.parent
    if (folder / MANIFEST).is_file():
        raise Refused(
            f"{story_path}: this story belongs to plan '{folder.name}' (its folder holds "
            f"{MANIFEST}); run the plan with `hero run-plan {folder.name}` or `hero watch`"
        )
    decision = admit(config.home, story, story_path)
    state = decision.state
    if decision.admit == Admit.REFUSE and state is not None and state.status == Status.PASSED:
        raise Refused(f"{story_path}: {decision.reason}")
    if story.depends_on and not (state is not None and state.status == Status.PASSED):
        gate = Rule.over(config.home, _inbox_stories(config.home)).gate(story)
        if gate.gate != Gate.READY:
            raise Refused(f"{story_path}: cannot run yet: {gate.reason}")
    return story, decision


def _inbox_stories(home: Path) -> list[Story]:
    """The loose stories of the inbox that can be read: what a dependency may still be."""
    from hero.daemon.inbox import loose_stories

    return loose_stories(home / "inbox")
