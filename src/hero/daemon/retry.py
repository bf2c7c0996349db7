"""`hero retry`: make a story that gave up, ended in error, was interrupted, ran out of
budget or was cancelled eligible again.

A cancelled story (its GitHub issue was closed: see :mod:`hero.run.cancel`) has its
cancellation withdrawn and its file put back from ``cancelled/`` into the inbox. If its
issue is still closed (or unlabelled) when GitHub is next looked at, it is cancelled again.

A story is named by its key: ``<id>``, or ``<plan>/<id>`` for a story of a plan. A story
that was skipped is not retried: it was skipped because a story it depends on failed, and
it becomes eligible by itself once that story passes, so the message names that story and
how to retry it instead.

A story whose spend has reached one of its story budgets (``max_story_tokens``,
``max_story_cost_usd``, ``max_story_wall_s`` in config/roles.yaml, as they read now) is not
retried either: it would stop again before its first model call. The message names the
budget to raise; once it is raised, the retry continues the story where it stopped, on the
same branch, its spend so far still counted. A round budget never refuses a retry: the
round that tripped it is run again with the round's spend back at zero.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from hero.config.loader import load_config
from hero.config.schema import ConfigError, UnknownKeyError
from hero.errors import UsageError
from hero.names import StoryRef
from hero.run.budget import BudgetExceeded, story_over, story_spend
from hero.run.cancel import put_back, withdraw
from hero.state import RunState, Status, load_state, save_state

#: The statuses a story can be retried from.
RETRYABLE = frozenset(
    {
        Status.GAVE_UP,
        Status.ERROR,
        Status.INTERRUPTED,
        Status.BUDGET_EXCEEDED,
        Status.CANCELLED,
    }
)

#: How a skipped story's ``error`` names the story that failed (see ``hero.plans.gate``):
#: "story 'p/a' gave up", "story 'p/a' ended in error (through 'p/b')".
_FAILED_STORY = re.compile(r"story '([^'\s]+)'")


class NotRetried(UsageError):
    """The story cannot be retried; the message says why and what to do instead."""


@dataclass(frozen=True)
class Requeued:
    """A story made eligible again."""

    ref: StoryRef
    story: Path
    """Its story file, as its run record names it."""
    touched: bool
    """The story file is there, and was touched for a watching daemon to notice."""


def retry(home: Path, key: str) -> Requeued:
    """Make a story that gave up (or ended in error, was interrupted, ran out of budget)
    eligible again, with a fresh budget of rounds. NotRetried (or StateError for a record
    that cannot be read) when it cannot be."""
    ref = StoryRef.of(key)
    if not ref.valid() or ref.key != key:  # nothing outside runs/state/ is ever read
        raise NotRetried(
            f"no story '{key}' in {home / 'runs' / 'state'}: expected a story id, or "
            "<plan>/<id> for a story of a plan (an id: letters, digits, '.', '_' or '-'; "
            "a plan: no dots)"
        )
    state = load_state(home, ref)
    if state is None:
        raise NotRetried(f"no story '{ref.key}' in {ref.state_path(home).parent}")
    if state.status == Status.SKIPPED:
        raise NotRetried(_skipped_message(state))
    if state.status not in RETRYABLE:
        raise NotRetried(
            f"story '{ref.key}' is {state.status}; only a story that gave up, "
            "ended in error, was interrupted, ran out of budget or was cancelled can be retried"
        )
    over = _over_budget(home, state)
    if over is not None:
        why = str(over).removeprefix("budget exceeded: ")
        raise NotRetried(
            f"story '{ref.key}' has used up a story budget ({why}), so it would stop "
            f"again before its first model call. Raise {over.key} in config/roles.yaml (or "
            f"remove it for no limit), then run `hero retry {ref.key}` again"
        )
    withdraw(home, ref)  # a cancellation no longer stands: the user wants the story run
    if state.status == Status.CANCELLED:
        back = put_back(home, state)  # from cancelled/ to the inbox, where it runs
        if back is not None:
            state.story_path = str(back)
    state.grant_fresh_budget()
    state.status = Status.QUEUED
    state.error = ""
    save_state(home, state)
    story = Path(state.story_path)
    touched = bool(state.story_path) and story.is_file()
    if touched:
        os.utime(story)  # the watching daemon notices the touch and takes the story again
    return Requeued(ref, story, touched)


def _over_budget(home: Path, state: RunState) -> BudgetExceeded | None:
    """The story budget the story's spend has used up under the home's configuration as it
    reads now; None if none is, or if the configuration cannot be read (the run says why)."""
    try:
        budgets = load_config(home, roles=()).budgets
    except UnknownKeyError:
        raise  # a mistyped key: said now, not by the run the retry starts
    except (ConfigError, OSError):
        return None
    return story_over(budgets, story_spend(state))


def _skipped_message(state: RunState) -> str:
    """Why a skipped story is not retried, and which story to retry instead."""
    ref = state.ref
    why = " ".join(state.error.split())
    why = why.removeprefix("skipped: ")  # as the dispatcher records it: "skipped: <reason>"
    found = _FAILED_STORY.search(why)
    failed = StoryRef.of(found.group(1)) if found else None
    if failed is not None and not failed.plan and ref.plan:
        failed = StoryRef(ref.plan, failed.id)  # named by its id within the plan
    if failed is None or not failed.valid():
        return (
            f"story '{ref.key}' was skipped ({why or 'a story it depends on failed'}); it runs "
            "by itself once the stories it depends on pass: retry the one that failed "
            "(`hero status` shows it)"
        )
    return (
        f"story '{ref.key}' was skipped because {why}; it becomes eligible by itself once "
        f"'{failed.key}' passes: run `hero retry {failed.key}` (or edit that story's file)"
    )
