"""Work in progress: a story's worktree as a commit of its own, made without touching the
worktree, its index or its branch, and put back into a fresh checkout of the branch.

The Celery engine takes one after each worker turn and publishes it (hero.engine.wip), so
that the machine that resumes a round a dead worker left resumes it with the worktree as
the last finished turn left it, rather than the branch as last pushed.

A snapshot's parent is the story branch as hero last brought it back (what the remote
holds); its tree is the worktree's, ignored files and untracked build output
(``build_output``, see hero.git.output) left out. A worker's commits of the round, which
hero brings back only at the round's end, are in its tree as changes.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hero.errors import HeroError
from hero.git.guard import new_secret
from hero.git.ops import git
from hero.git.output import stage_all
from hero.redact import Redactor

#: The snapshot's commit message (it never lands on a branch).
WIP_MESSAGE = "hero: work in progress, not a commit of the story"
#: The scratch index a snapshot is built in, in the story's git directory.
SCRATCH_INDEX = "hero-wip-index"


@dataclass(frozen=True)
class Snapshot:
    """A worktree's snapshot: the tip it is on, its tree, its commit ("" when the tree is
    the tip's: nothing uncommitted)."""

    tip: str
    tree: str
    sha: str


class WipRefused(HeroError):
    """The worktree holds what must not leave the machine (a secret value)."""


def worktree_tree(worktree: Path, gitdir: Path, build_output: Sequence[str] = ()) -> str:
    """The tree of ``worktree`` as it is (tracked and untracked files, not ignored ones nor
    untracked build output, see hero.git.output), written without touching its index: a
    copy of the index (git's stat cache, so that only changed files are read) takes the
    changes."""
    scratch = gitdir / SCRATCH_INDEX
    if os.path.lexists(scratch):
        os.unlink(scratch)  # never written through: a link left there is dropped
    index = gitdir / "index"
    env = {"GIT_INDEX_FILE": str(scratch)}
    try:
        try:
            regular = stat.S_ISREG(os.lstat(index).st_mode)
        except OSError:  # none, or a linked worktree's (no directory of its own)
            regular = False
        if regular:
            shutil.copyfile(index, scratch, follow_symlinks=False)
        else:  # no index, or not a file hero reads: from HEAD, every file hashed
            git(worktree, "read-tree", "HEAD", env=env)
        stage_all(worktree, build_output, env)
        return git(worktree, "write-tree", env=env).strip()
    finally:
        if os.path.lexists(scratch):
            os.unlink(scratch)


def tree_of(repo: Path, rev: str) -> str:
    return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{tree}}").strip()


def check_secrets(worktree: Path, tip: str, tree: str, base: str, secrets: Redactor) -> None:
    """WipRefused when a file that ``tree`` changes since ``tip`` holds a secret value its
    version at ``base`` did not (the check hero's own commits get, see hero.git.guard)."""
    if not secrets:
        return
    changed = git(
        worktree, "diff", "--name-only", "-z", "--no-renames", tip, tree, cut_ok=True
    ).split("\0")
    leaks = [p for p in changed if p and new_secret(worktree, p, base, secrets)]
    if leaks:
        shown = ", ".join(secrets.redact(p) for p in leaks[:5])
        raise WipRefused(f"{shown} held a secret value")


def commit_snapshot(worktree: Path, tree: str, tip: str, identity: Mapping[str, str]) -> str:
    """A commit of ``tree`` on ``tip`` (in the story's repository, on no branch)."""
    return git(worktree, "commit-tree", tree, "-p", tip, "-m", WIP_MESSAGE, env=identity).strip()


def restore(worktree: Path, sha: str) -> None:
    """The worktree (a fresh checkout of the snapshot's parent) made the snapshot's tree,
    its index left at HEAD: the changes are there again, uncommitted."""
    git(worktree, "read-tree", "-u", "--reset", sha)
    git(worktree, "reset", "--quiet")
