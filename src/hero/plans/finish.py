"""Plans at run time: skips under a failure, and a finished plan's branch.

``hero watch`` and ``hero run-plan`` (:mod:`hero.daemon.runplan`) run a plan's stories with
the same dispatcher, queue rule and dependency rule (:mod:`hero.plans.gate`) as any story;
``pipeline.StoryRun`` starts a story from its dependencies' branches. What is particular to
plans lives here:

- :func:`mark_skipped` records a story whose ancestor failed as ``skipped``, with the reason.
  It runs by itself once its ancestors pass (a ``hero retry`` of the ancestor, say).
- :func:`finish_plan`: once every story of a plan passed, ``hero/plan/<name>`` is made the
  merge of the plan's leaf branches, and the manifest joins the stories in ``done/<name>/``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from hero.config.home import Config
from hero.git.ops import (
    GitError,
    MergeConflict,
    TargetRepo,
    commit_of,
    git,
    merge_heads,
    set_branch,
)
from hero.names import MANIFEST, StoryRef, plan_branch
from hero.plans.dag import leaves
from hero.plans.manifest import PlanError, plan_dir, read_plan
from hero.state import RunState, StateError, Status, file_digest, load_state, save_state
from hero.story.record import Story


def mark_skipped(home: Path, story: Story, path: Path, reason: str) -> bool:
    """Record ``story`` as skipped for ``reason`` (an ancestor failed); False when nothing
    was written (it is already recorded so, or it has a record of its own that a skip
    must not overwrite)."""
    text = f"skipped: {reason}"
    try:
        state = load_state(home, story.ref)
    except StateError:
        return False
    if state is not None and (state.status != Status.SKIPPED or state.error == text):
        return False
    state = state or RunState(id=story.id, plan=story.plan)
    state.status = Status.SKIPPED
    state.phase = ""
    state.error = text
    state.title = story.title
    state.labels = list(story.labels)
    state.story_path = str(path)
    state.story_digest = file_digest(path)
    state.finished_at = time.time()
    save_state(home, state)
    return True


@dataclass(frozen=True)
class PlanOutcome:
    """How a finished plan ended: its branch and head, or why it has none (``error``)."""

    branch: str
    sha: str = ""
    note: str = ""
    error: str = ""


def finish_plan(config: Config, repo: TargetRepo, name: str) -> PlanOutcome | None:
    """When every story of plan ``name`` has passed: point ``hero/plan/<name>`` at the merge
    of the plan's leaf branches (kept as it is when it already holds them all) and move the
    manifest from ``inbox/<name>/`` to ``done/<name>/``. None while a story has not passed.
    A conflict between the leaves is an outcome with ``error`` naming the files."""
    home = config.home
    try:
        plan = read_plan(home, name)
    except PlanError as exc:  # say, its manifest was broken by hand: say so, each time
        if plan_dir(home, name) is None and not (home / "inbox" / name).is_dir():
            return None  # no such plan (any more): nothing to finish
        return PlanOutcome(plan_branch(name), error=f"cannot finish the plan: {exc}")
    if plan.problems:  # a story file that cannot be read is a story that has not passed
        return None
    states: dict[str, RunState | None] = {}
    for story_id in plan.stories:
        try:
            states[story_id] = load_state(home, StoryRef(name, story_id))
        except StateError:
            return None
    if not states or any(s is None or s.status != Status.PASSED for s in states.values()):
        return None
    branch = plan_branch(name)
    heads: list[tuple[str, str]] = []
    for leaf in leaves(plan.deps()):
        ref = StoryRef(name, leaf)
        state = states[leaf]
        # the head that passed review, as recorded: the branch's tip may have been moved since
        sha = commit_of(repo.path, state.head_sha) if state is not None and state.head_sha else ""
        sha = sha or repo.branch_sha(ref.branch) or ""
        if not sha:
            return PlanOutcome(branch, error=f"the branch {ref.branch} of '{ref.key}' is gone")
        heads.append((ref.branch, sha))
    note = f"merge of {len(heads)} leaf branches" if len(heads) > 1 else f"{heads[0][0]}'s head"
    current = repo.branch_sha(branch)
    if current is not None and all(_contains(repo.path, current, sha) for _, sha in heads):
        sha = current
    else:
        try:
            sha = merge_heads(
                repo.path,
                heads,
                f"hero: plan {name}: merge of {', '.join(b for b, _ in heads)}",
                repo.identity_env(),
            )
        except MergeConflict as exc:
            return PlanOutcome(branch, error=f"the plan's leaves do not merge: {exc}")
        try:
            set_branch(repo.path, branch, sha)
        except GitError as exc:  # say, the branch is checked out somewhere
            return PlanOutcome(branch, error=f"cannot point {branch} at {sha[:12]}: {exc}")
    _archive_manifest(home, name)
    return PlanOutcome(branch, sha, note)


def _contains(repo: Path, tip: str, sha: str) -> bool:
    """Whether commit ``sha`` is ``tip`` or one of its ancestors."""
    return git(repo, "merge-base", sha, tip, check=False).strip() == sha


def _archive_manifest(home: Path, name: str) -> None:
    """The manifest joins the plan's stories in ``done/<name>/``; the emptied inbox folder
    goes. A copy in done/ is never overwritten by an older one."""
    folder = home / "inbox" / name
    src = folder / MANIFEST
    dest = home / "done" / name / MANIFEST
    if not src.is_file():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dest)
    try:
        folder.rmdir()
    except OSError:  # something else is in it: the user's, left alone
        pass
