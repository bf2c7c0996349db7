"""hero's git for bringing a story branch up to date with a target that moved on.

When and why is hero.run.keepup's; this module moves the branch, in both repositories alike:
the story's own (``worktrees/<id>``, its worktree following) and the user's
(``refs/heads/hero/<id>``). Each call takes the user's repository's lock, and hero's git in
the story's repository runs where its commands run (``StoryGit.ending``).

- **merge**: the targets are merged into the branch without a worktree
  (``hero.git.ops.merge_heads``, one new merge commit each, in the user's repository, whose
  objects the story's repository borrows); the branch moves forward to it.
- **rebase**: the story's commits are replayed on the target in the story's repository
  (``git rebase --onto``); the user's branch is moved to the replayed commits from the tip it
  held, never from another.
- **a conflict**: ``start_merge`` leaves the merge in progress in the story's worktree, the
  conflict markers in the files, for a worker's round; ``put_back`` ends it, the branch in
  both repositories back at the tip it had before (the worker's commits of that round kept on
  no branch: nothing of them is reported).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hero.git.guard import has_conflict_markers, is_ancestor
from hero.git.ops import WORKTREE_TIMEOUT_S, GitError, MergeConflict, git, merge_heads
from hero.git.phases import StoryGit

#: ``(label, sha)``: a commit the story branch must hold, and what it is to people (a branch).
Target = tuple[str, str]
#: Git state of a rebase left in a story's repository.
_REBASE_DIRS = ("rebase-merge", "rebase-apply")


@dataclass(frozen=True)
class Merged:
    """What ``merge`` did: the branch's tip afterwards, the targets merged in, and the one
    that conflicts (the rest after it were not tried)."""

    head: str
    merged: tuple[str, ...] = ()
    conflict: Target | None = None
    files: tuple[str, ...] = field(default=())


class Updater:
    """Moves one story's branch onto what moved on (see the module's docstring)."""

    def __init__(self, git_of_story: StoryGit) -> None:
        self.story_git = git_of_story
        self.target = git_of_story.target
        self.repo = git_of_story.repo
        self.branch = git_of_story.branch

    def missing(self, tip: str, targets: Sequence[Target]) -> list[Target]:
        """The targets whose commit ``tip`` does not hold yet."""
        return [t for t in targets if not is_ancestor(self.target.path, t[1], tip)]

    def merge(self, tip: str, targets: Sequence[Target]) -> Merged:
        """Merge each target into the branch at ``tip``, in order, each a merge commit (a
        fast-forward where the branch holds nothing of its own); stops at the first that
        conflicts. The branch moves in both repositories when anything was merged."""
        identity = self.target.identity_env()
        new, merged = tip, []
        conflict: Target | None = None
        files: tuple[str, ...] = ()
        with self._ending():
            for label, sha in targets:
                try:
                    new = merge_heads(
                        self.target.path,
                        [(self.branch, new), (label, sha)],
                        f"hero: merge {label} into {self.branch}",
                        identity,
                    )
                except MergeConflict as exc:
                    conflict, files = (label, sha), exc.files
                    break
                merged.append(label)
            if new != tip:
                self._forward(tip, new)
        return Merged(new, tuple(merged), conflict, files)

    def rebase(self, tip: str, base: str, onto: str) -> str:
        """The story's commits after ``base`` replayed on ``onto`` (merges among them
        flattened); the branch in both repositories moved to the result, which is returned.
        "" when a commit conflicts: the rebase is undone and nothing moved."""
        identity = self.target.identity_env()
        with self._ending():
            self.repo.make_safe()
            git(
                self.repo.path,
                "rebase",
                "--no-autosquash",
                "--no-autostash",
                "--onto",
                onto,
                base,
                self.branch,
                env=identity,
                check=False,
                timeout_s=WORKTREE_TIMEOUT_S,
            )
            if any(os.path.lexists(self.repo.gitdir / d) for d in _REBASE_DIRS):
                git(self.repo.path, "rebase", "--abort", check=False)
                self.repo.end_phase()  # whatever of the rebase is left
                return ""
            new = self.repo.tip()
            if not new or not is_ancestor(self.repo.path, onto, new):
                raise GitError(f"rebasing {self.branch} onto {onto[:12]} left it at {new[:12]}")
            self.repo.replace_in_target(new, tip)
        return new

    def start_merge(self, label: str, sha: str) -> list[str]:
        """Begin merging ``sha`` in the story's worktree and stop at its conflicts, for the
        worker to resolve; returns the conflicted files as git lists them."""
        with self._ending():
            self.repo.make_safe()
            git(self.repo.path, "merge", "--abort", check=False)  # one a stop left
            git(
                self.repo.path,
                "merge",
                "--no-ff",
                "--no-edit",
                "-m",
                f"hero: merge {label} into {self.branch}",
                sha,
                env=self.target.identity_env(),
                check=False,
                timeout_s=WORKTREE_TIMEOUT_S,
            )
            out = git(self.repo.path, "diff", "--name-only", "--diff-filter=U", "-z")
        return [p for p in out.split("\0") if p]

    def unresolved(self, head: str, before: str, sha: str, files: Sequence[str]) -> list[str]:
        """Why the branch at ``head`` did not resolve merging ``sha`` into ``before``
        (``files`` its conflicts): it does not hold ``sha``, or a file still has conflict
        markers that neither side had. Empty when resolved."""
        repo = self.target.path
        if not head or not is_ancestor(repo, sha, head):
            return [f"{self.branch} does not hold {sha[:12]}: the merge was not committed"]
        marked = [
            f
            for f in files
            if _marked(repo, head, f) and not _marked(repo, sha, f) and not _marked(repo, before, f)
        ]
        return [f"conflict markers left in: {', '.join(marked)}"] if marked else []

    def put_back(self, tip: str) -> None:
        """End a merge left in progress and put the branch, in both repositories, back at
        ``tip`` (the worktree too)."""
        with self._ending():
            self.repo.make_safe()
            git(self.repo.path, "merge", "--abort", check=False)
            git(self.repo.path, "reset", "--hard", "-q", tip, timeout_s=WORKTREE_TIMEOUT_S)
            self.repo.end_phase()
            current = self.target.branch_sha(self.branch) or ""
            if current != tip:
                git(self.target.path, "update-ref", f"refs/heads/{self.branch}", tip, current)

    @contextmanager
    def _ending(self) -> Iterator[None]:
        """The user's repository locked (the update moves its branch; short: a merge without
        a worktree, or a rebase of the story's own commits), hero's git in the story's
        repository where its commands run (``StoryGit.ending``, which locks nothing)."""
        with self.target.locked(), self.story_git.ending():
            yield

    def _forward(self, tip: str, new: str) -> None:
        """The branch from ``tip`` forward to ``new`` (a commit the user's repository
        holds): the story's repository and its worktree, then the user's."""
        self.repo.make_safe()
        git(self.repo.path, "merge", "--ff-only", "-q", new, timeout_s=WORKTREE_TIMEOUT_S)
        git(self.target.path, "update-ref", f"refs/heads/{self.branch}", new, tip)


def _marked(repo: Path, rev: str, path: str) -> bool:
    """Whether ``path`` at ``rev`` holds conflict markers (False when it is not there)."""
    return has_conflict_markers(git(repo, "show", f"{rev}:{path}", check=False, cut_ok=True))
