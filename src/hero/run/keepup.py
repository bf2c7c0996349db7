"""A story branch kept up with a target that moved on, before the story passes and reports.

A story that passed its review is not reported (pushed, its pull request opened, its file
moved to ``done/``) from a branch made from yesterday's target. Before it passes, the
pipeline asks :meth:`KeepUp.next`: what the branch must hold is the current tip of the
branch it started from (``base_ref``, when that names a branch), or, for a plan's story, the
heads its dependencies passed with. When the branch holds all of it, the story passes as
before. Else hero brings it up to date (``keep_up``: ``merge`` or ``rebase``; ``off`` never),
and one more round follows, outside the story's round budget:

- **a clean update**: a round without a worker, the story's verify and review on the result;
  a red verify or a rejection is a round like any, and the rounds left go on from it;
- **a conflict**: the merge is left in progress in the story's worktree and one worker round
  resolves it, told the conflicting files and the target's change as its findings. A round
  that leaves the branch without the target's commit, or conflict markers in those files,
  has not resolved it: the story ends in ``error`` (``conflict`` in its record and the
  ``stop`` event names the files), the branch in both repositories put back where it was,
  nothing of it reported.

After a round that passes, the target is looked at again; it may have moved meanwhile. At most
``MAX_UPDATES`` updates follow in a row, then the story passes as it is, which it says.
The hero's git of it is hero.git.keepup's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hero.config.home import Config
from hero.git.keepup import Merged, Target, Updater
from hero.git.ops import MergeConflict, commit_of, diff_since, log_since, merge_heads
from hero.run.events import StoryEvents
from hero.run.start import RunStart, StartError
from hero.run.workspace import Progress, Workspace
from hero.state import Round, RunState

#: A round's worker ``stop_reason`` when the round only checked an update (no worker ran).
UPDATED = "updated_to_base"
#: Updates in a row, each a round that passed, before a story whose target keeps moving
#: passes as it is.
MAX_UPDATES = 3
#: How much of the target's change to the conflicting files the worker is shown.
CHANGE_CHARS = 12_000


def update_rounds(state: RunState) -> int:
    """The rounds of the current budget that checked or resolved an update: they do not
    count against it (those before a fresh budget are in its offset already)."""
    return sum(1 for r in state.rounds[state.round_offset :] if r.update)


class KeepUp:
    """Keeping one story's branch up to date (see the module's docstring)."""

    def __init__(
        self,
        config: Config,
        workspace: Workspace,
        start: RunStart,
        events: StoryEvents,
        say: Progress,
    ) -> None:
        self.mode = config.keep_up
        self.workspace = workspace
        self.start = start
        self.events = events
        self.say = say
        self.key = workspace.key
        self.branch = workspace.branch
        self.repo = workspace.repo
        self.updater = Updater(workspace.git)

    # -- before a pass ----------------------------------------------------------------

    def next(self, state: RunState) -> dict[str, Any] | None:
        """After a round that passed: None when the story may pass as it is; else the
        ``update`` of the round that must follow (the branch already moved, or the
        conflict's merge in progress in the worktree)."""
        if self.mode == "off" or not state.rounds:
            return None
        in_a_row = 0
        for r in reversed(state.rounds):
            if not r.update or r.update.get("conflict"):
                break
            in_a_row += 1
        targets = self.targets(state)
        tip = self.repo.branch_sha(self.branch) or state.head_sha  # what passed
        missing = self.updater.missing(tip, targets) if targets and tip else []
        if not missing:
            return None
        if in_a_row >= MAX_UPDATES:
            self.say(
                f"{self.key}: {', '.join(t[0] for t in missing)} moved on again after "
                f"{in_a_row} updates in a row; {self.branch} passes as it is"
            )
            return None
        base = self._base(targets)
        if self.mode == "rebase" and base:
            new = self.updater.rebase(tip, state.base_sha, base)
            if new:
                return self._updated(state, "rebase", [t[0] for t in missing], base, tip, new)
            self.say(f"{self.key}: rebasing {self.branch} conflicts; merging instead")
        merged = self.updater.merge(tip, missing)
        if merged.conflict is None:
            return self._updated(state, "merge", list(merged.merged), base, tip, merged.head)
        return self._conflict(state, list(merged.merged), merged, base)

    def retried(self, state: RunState) -> bool:
        """Whether this run goes straight to the update again: the last run ended on a
        conflict (its round did not resolve it) and the branch is still where hero put it
        back. A branch moved since (a person's own resolution, say) is checked by a round
        like any first."""
        last = state.rounds[-1].update if state.rounds else {}
        return (
            self.mode != "off"
            and last.get("resolved") is False
            and self.repo.branch_sha(self.branch) == state.head_sha
        )

    def targets(self, state: RunState) -> list[Target]:
        """What the branch must hold: its dependencies' heads (a plan's story), else the
        tip of the branch it started from, local or remote-tracking (``origin/main``, as
        the user's repository last fetched it); none when ``base_ref`` is a tag or a commit."""
        if self.start.story.depends_on:
            try:
                return self.start.dependency_heads()
            except StartError as exc:  # a dependency run again and not passed (yet)
                self.say(f"{self.key}: not brought up to date with its dependencies: {exc}")
                return []
        name = state.base_ref
        if not name or name.startswith("merge of "):
            return []
        sha = self.repo.branch_sha(name) or commit_of(self.repo.path, f"refs/remotes/{name}")
        return [(name, sha)] if sha else []

    # -- after the round that resolves a conflict --------------------------------------

    def unresolved(self, state: RunState, record: Round) -> str:
        """After a conflict's round: "" when it resolved the conflict. Else why not, the
        branch (both repositories) and the record put back as they were before the update:
        the story then ends (``state.conflict`` says on what)."""
        update = record.update
        files = list(update.get("files", []))
        before, sha = str(update.get("from", "")), str(update.get("sha", ""))
        why = self.updater.unresolved(record.head_sha, before, sha, files)
        self.workspace.story_repo.upstream = ()
        if not why:
            update["resolved"] = True
            update["to"] = record.head_sha
            self.events.updated_to_base(update)
            return ""
        update["resolved"] = False
        self.updater.put_back(before)
        state.base_sha = str(update.get("base_before", "")) or state.base_sha
        state.head_sha = before
        detail = (
            f"conflict: bringing {self.branch} up to date with {update.get('conflict')} "
            f"conflicts in {', '.join(files) or 'whole directories'}, and the worker's round "
            f"did not resolve it ({'; '.join(why)}). {self.branch} is left at {before[:12]}, "
            "as it was before the update; nothing was reported. Resolve the conflict on the "
            f"branch (or edit the story), then `hero retry {self.key}`"
        )
        state.conflict = {
            "target": str(update.get("conflict", "")),
            "sha": sha,
            "files": files,
            "detail": detail,
        }
        return detail

    # -- parts ------------------------------------------------------------------------

    def _base(self, targets: list[Target]) -> str:
        """The commit the updated branch builds on: the target, or the merge of the
        dependencies' heads (as a fresh start makes it); "" when they conflict."""
        if len(targets) == 1:
            return targets[0][1]
        try:
            return merge_heads(
                self.repo.path,
                targets,
                f"hero: merge {', '.join(t[0] for t in targets)} for {self.key}",
                self.repo.identity_env(),
            )
        except MergeConflict:
            return ""

    def _updated(
        self, state: RunState, mode: str, targets: list[str], base: str, tip: str, new: str
    ) -> dict[str, Any]:
        update = {"mode": mode, "targets": targets, "base": base, "from": tip, "to": new}
        update["base_before"] = state.base_sha
        state.base_sha = base or state.base_sha
        state.head_sha = new
        self.events.updated_to_base(update)
        self.say(
            f"{self.key}: {self.branch} brought up to date with {', '.join(targets)} "
            f"({mode}, now {new[:12]}); checking it again"
        )
        return update

    def _conflict(
        self, state: RunState, merged: list[str], found: Merged, base: str
    ) -> dict[str, Any]:
        """The merge of the conflicting target begun in the worktree, the worker's findings
        left where the next round reads them (the last round's feedback)."""
        assert found.conflict is not None
        label, sha = found.conflict
        tip = found.head  # the clean merges before it are on the branch
        files = self.updater.start_merge(label, sha) or list(found.files)
        self.workspace.story_repo.upstream = (sha,)
        update: dict[str, Any] = {
            "mode": "merge",
            "targets": [*merged, label],
            "base": base or sha,
            "from": tip,
            "to": "",
            "conflict": label,
            "sha": sha,
            "files": files,
            "base_before": state.base_sha,
        }
        findings = self._findings(state, label, sha, tip, files)
        state.rounds[-1] = replace(state.rounds[-1], feedback=findings)
        state.base_sha = base or sha
        state.head_sha = tip
        self.events.conflict(update)
        self.say(
            f"{self.key}: {self.branch} conflicts with {label} in {', '.join(files)}; "
            "one round to resolve it"
        )
        return update

    def _findings(self, state: RunState, label: str, sha: str, tip: str, files: list[str]) -> str:
        """What the worker of the conflict's round reads."""
        path = self.repo.path
        since = commit_of(path, f"{state.base_sha}") if state.base_sha else ""
        log = log_since(path, since, 2_000, tip=sha).text if since else ""
        change = ""
        if since and files:
            bounded, _stat = diff_since(path, since, CHANGE_CHARS, tip=sha)
            change = bounded.text
        lines = [
            f"Your work passed review, but {label} moved on since {self.branch} started, and "
            f"its changes conflict with yours in: {', '.join(files) or '(whole directories)'}.",
            f"hero began merging {label} ({sha[:12]}) into {self.branch}; the merge is in "
            "progress in your worktree, with conflict markers in those files.",
            "Resolve every conflict so that both changes' intent is kept (remove every "
            "`<<<<<<<`, `=======` and `>>>>>>>` line), `git add` the files and conclude the "
            "merge with `git commit --no-edit`. Do not abort the merge, rebase or reset: a "
            "branch that does not hold the merge, or files with markers left, ends the story.",
            "Keep the checks passing.",
        ]
        if log:
            lines += ["", f"Commits on {label} since your branch started:", log]
        if change:
            lines += ["", f"{label}'s change since your branch started:", "", change]
        return "\n".join(lines)
