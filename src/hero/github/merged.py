"""Which passed gh-stories' pull requests have been merged: ``runs/github/merged.json``.

The GitHub watcher (``hero watch`` with the github block, ``hero github watch``) asks GitHub,
once per sweep, about each passed gh-story whose repository (``worktrees/<id>``) is still
there and not yet known merged; housekeeping (:mod:`hero.run.housekeeping`, with
``housekeeping_after_pr_merged``) removes those repositories. The file is only a list of
story ids: a bad or missing one means "none known", and is written anew.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hero.fsio import atomic_write
from hero.github.api import GitHub
from hero.names import StoryRef, is_story_id
from hero.state import StateError, Status, load_state, state_dir
from hero.yamlio import ValueProblem, read_file

#: Relative to the home.
MERGED_FILE = Path("runs") / "github" / "merged.json"
#: A merged.json larger than this is not hero's: it is read as empty (and rewritten).
MAX_MERGED_BYTES = 4 << 20


def merged_ids(home: Path) -> frozenset[str]:
    """The ids of the gh-stories whose pull request is known merged."""
    try:
        data = json.loads(read_file(home / MERGED_FILE, limit=MAX_MERGED_BYTES).decode("utf-8"))
    except (OSError, ValueProblem, ValueError):
        return frozenset()
    ids = data.get("merged") if isinstance(data, dict) else None
    if not isinstance(ids, list):
        return frozenset()
    return frozenset(i for i in ids if is_story_id(i) and i.startswith("gh-"))


def merged_sweep(home: Path, gh: GitHub, log: Any) -> None:
    """Ask GitHub about each passed gh-story whose repository is still there; remember
    those whose pull request is merged. GitHubError when GitHub cannot be asked."""
    known = merged_ids(home)
    found = set(known)
    directory = state_dir(home)
    for path in sorted(directory.glob("gh-*.json")) if directory.is_dir() else []:
        ref = StoryRef("", path.stem)
        if ref.id in found or not ref.valid():
            continue
        try:
            state = load_state(home, ref)
        except StateError:
            continue
        if state is None or state.status != Status.PASSED or not ref.worktree(home).exists():
            continue  # nothing housekeeping would remove: no call to GitHub
        if gh.merged_pull(ref.branch):
            log.info("pull request merged", story=ref.id)
            found.add(ref.id)
    # a story whose record is gone is forgotten
    found = {i for i in found if StoryRef("", i).state_path(home).is_file()}
    if found != known:
        path = home / MERGED_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"merged": sorted(found)}, indent=2)
        atomic_write(path, data.encode("utf-8") + b"\n")
