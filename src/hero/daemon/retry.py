"""`hero retry`: make a story that gave up, ended in error or was interrupted eligible again."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hero.errors import EXIT_OK, EXIT_USAGE
from hero.state import StateError, Status, load_state, save_state

#: The statuses a story can be retried from.
RETRYABLE = frozenset({Status.GAVE_UP, Status.ERROR, Status.INTERRUPTED})


def retry(home: Path, story_id: str) -> int:
    """Make a story that gave up (or ended in error) eligible again, with a fresh budget."""
    try:
        state = load_state(home, story_id)
    except StateError as exc:
        print(f"hero: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if state is None:
        print(f"hero: no story '{story_id}' in {home / 'runs' / 'state'}", file=sys.stderr)
        return EXIT_USAGE
    if state.status not in RETRYABLE:
        print(
            f"hero: story '{story_id}' is {state.status}; only a story that gave up, "
            "ended in error or was interrupted can be retried",
            file=sys.stderr,
        )
        return EXIT_USAGE
    state.grant_fresh_budget()
    state.status = Status.QUEUED
    state.error = ""
    save_state(home, state)
    story = Path(state.story_path)
    if state.story_path and story.is_file():
        os.utime(story)  # the watching daemon notices the touch and takes the story again
        print(f"{story_id}: queued again; `hero watch` picks it up, or run `hero run {story}`")
    else:
        print(
            f"{story_id}: queued again, but its story file {story} is gone; put it back in inbox/"
        )
    return EXIT_OK
