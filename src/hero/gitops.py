"""Worktrees, branches, commits and diffs on the target repository.

Every operation that touches the shared repository's refs or worktree list goes through
``TargetRepo.locked()``: a thread lock for stories run in one process and an ``flock`` on a
file in the repository's git directory for several hero processes on one machine.

Every git call goes through ``git()``: the ``git`` program run by ``hero.runner`` (not a
library such as GitPython, which is not meant for long-running processes), with a timeout,
hooks off and an environment without secrets.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hero.runner import child_env, run_process

#: Used for hero's commits (and the worker's) where git has no identity configured.
DEFAULT_IDENTITY = {
    "GIT_AUTHOR_NAME": "hero",
    "GIT_AUTHOR_EMAIL": "hero@localhost",
    "GIT_COMMITTER_NAME": "hero",
    "GIT_COMMITTER_EMAIL": "hero@localhost",
}

#: Seconds any git call may take: far more than a local git operation needs, and still an
#: end to one that waits on a lock, a credential prompt or a network remote.
DEFAULT_TIMEOUT_S = 120.0
#: For calls that write or delete a whole checkout (``worktree add``/``remove``), which on a
#: big repository take minutes.
WORKTREE_TIMEOUT_S = 600.0

#: What hero's own git may see of hero's environment: where git and its configuration live,
#: who commits, how commits are signed. Nothing else: not the provider keys or any other
#: secret, and not GIT_DIR, GIT_INDEX_FILE, GIT_EXTERNAL_DIFF and the like, which would point
#: hero's git at another repository or change the output hero reads.
_GIT_INHERITS = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "EMAIL",
        "TMPDIR",
        "TZ",
        "XDG_CONFIG_HOME",
        "GNUPGHOME",
        "SSH_AUTH_SOCK",
        "GIT_EXEC_PATH",
        "GIT_TEMPLATE_DIR",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_PARAMETERS",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
    }
)
_GIT_INHERITS_PREFIXES = ("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_", "GIT_TRACE")
#: Added to runner's non-interactive settings: output in one language, the one hero parses.
_GIT_SETTINGS = {"LC_ALL": "C"}
#: Before every command: hooks off, whatever the worker planted in the repository.
_GIT_OPTIONS = ("-c", "core.hooksPath=/dev/null")


class GitError(Exception):
    """A git command failed; the message holds the command and git's own words."""


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of hero's own git calls (see ``_GIT_INHERITS``), then ``extra``."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k in _GIT_INHERITS or k.startswith(_GIT_INHERITS_PREFIXES)
    }
    return child_env(base, extra={**_GIT_SETTINGS, **(extra or {})})


def git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> str:
    """Run ``git ARGS`` in ``cwd`` and return its stdout.

    Raises GitError when git cannot be started, when it runs longer than ``timeout_s`` (it
    and its children are ended), and, with ``check``, when it exits non-zero.
    """
    command = f"git {' '.join(args)}"
    try:
        result = run_process(
            ["git", *_GIT_OPTIONS, *args], cwd, timeout_s=timeout_s, env=git_env(env)
        )
    except OSError as exc:
        raise GitError(f"{command} (in {cwd}) could not start: {exc.strerror or exc}") from None
    if result.timed_out:
        said = result.stderr.strip()
        raise GitError(
            f"{command} (in {cwd}) timed out after {timeout_s:g} s and was ended with its child "
            "processes; git may be waiting for a lock, a credential prompt or a network remote"
            + (f"; it said: {said}" if said else "")
        )
    if check and result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip()
        raise GitError(f"{command} (in {cwd}) failed: {detail}")
    return result.stdout


@dataclass(frozen=True)
class Bounded:
    """Text cut to a size, saying how much was left out."""

    text: str
    cut_chars: int = 0
    omitted: tuple[str, ...] = ()


class TargetRepo:
    """The user's repository that stories branch from."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._identity: dict[str, str] | None = None
        self._lock_path: Path | None = None

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            if self._lock_path is None:
                common = Path(git(self.path, "rev-parse", "--git-common-dir").strip())
                self._lock_path = (
                    common if common.is_absolute() else self.path / common
                ) / "hero.lock"
            with open(self._lock_path, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)

    def identity_env(self) -> dict[str, str]:
        """Author and committer variables to set, empty where git already has a user."""
        if self._identity is None:
            name = git(self.path, "config", "user.name", check=False).strip()
            email = git(self.path, "config", "user.email", check=False).strip()
            self._identity = {} if (name and email) else dict(DEFAULT_IDENTITY)
        return self._identity

    def current_branch(self) -> str:
        return current_branch(self.path)

    def rev_parse(self, ref: str) -> str:
        out = git(self.path, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
        sha = out.strip()
        if not sha:
            raise GitError(f"base ref '{ref}' does not name a commit in {self.path}")
        return sha

    def branch_sha(self, branch: str) -> str | None:
        out = git(
            self.path, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False
        )
        return out.strip() or None

    def keep_branch_aside(self, branch: str) -> str:
        """Rename ``branch`` to a fresh name so its commits are kept; returns the new name."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        new = f"{branch}-prev-{stamp}"
        n = 1
        while self.branch_sha(new):
            n += 1
            new = f"{branch}-prev-{stamp}-{n}"
        with self.locked():
            self._remove_worktree_of(branch)
            git(self.path, "branch", "-m", branch, new)
        return new

    def _remove_worktree_of(self, branch: str) -> None:
        listing = git(self.path, "worktree", "list", "--porcelain")
        current: str | None = None
        for line in listing.splitlines():
            if line.startswith("worktree "):
                current = line[len("worktree ") :]
            elif line == f"branch refs/heads/{branch}" and current:
                if Path(current).resolve() != self.path.resolve():
                    git(
                        self.path,
                        "worktree",
                        "remove",
                        "--force",
                        current,
                        check=False,
                        timeout_s=WORKTREE_TIMEOUT_S,
                    )
        git(self.path, "worktree", "prune")

    def ensure_worktree(self, branch: str, worktree: Path, base_sha: str) -> None:
        """Make ``worktree`` a checkout of ``branch``, creating the branch at ``base_sha``."""
        with self.locked():
            git(self.path, "worktree", "prune")
            if (worktree / ".git").exists():
                head = git(worktree, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
                if head.strip() == branch:
                    return
                raise GitError(
                    f"{worktree} is a checkout of '{head.strip() or 'a detached HEAD'}', "
                    f"not '{branch}'; remove it with `git worktree remove {worktree}`"
                )
            if worktree.exists() and any(worktree.iterdir()):
                raise GitError(f"{worktree} exists and is not a git worktree; move it aside")
            worktree.parent.mkdir(parents=True, exist_ok=True)
            if self.branch_sha(branch):
                self._remove_worktree_of(branch)
                git(
                    self.path,
                    "worktree",
                    "add",
                    str(worktree),
                    branch,
                    timeout_s=WORKTREE_TIMEOUT_S,
                )
            else:
                git(
                    self.path,
                    "worktree",
                    "add",
                    "-b",
                    branch,
                    str(worktree),
                    base_sha,
                    timeout_s=WORKTREE_TIMEOUT_S,
                )


def current_branch(worktree: Path) -> str:
    """The branch checked out in ``worktree``, or ``HEAD`` (detached)."""
    name = git(worktree, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    return name or "HEAD"


def head_sha(worktree: Path) -> str:
    return git(worktree, "rev-parse", "HEAD").strip()


def commit_all(worktree: Path, message: str, identity: Mapping[str, str]) -> str | None:
    """Commit everything uncommitted in the worktree; returns the new sha, or None if clean."""
    if not git(worktree, "status", "--porcelain", "--untracked-files=all").strip():
        return None
    git(worktree, "add", "-A")
    git(worktree, "commit", "--no-verify", "-q", "-m", message, env=identity)
    return head_sha(worktree)


def log_since(worktree: Path, base_sha: str, max_chars: int = 8_000) -> Bounded:
    text = git(worktree, "log", "--no-color", "--format=%h %s", f"{base_sha}..HEAD")
    return _bound(text, max_chars)


def diff_since(worktree: Path, base_sha: str, max_chars: int = 60_000) -> tuple[Bounded, str]:
    """The diff from the base to HEAD and its ``--stat`` summary.

    Whole files are kept in order while they fit in ``max_chars``; the files left out are
    named in ``Bounded.omitted`` so the reader knows what it did not see.
    """
    stat = git(worktree, "diff", "--no-color", "--stat", base_sha, "HEAD")
    diff = git(worktree, "diff", "--no-color", base_sha, "HEAD")
    if len(diff) <= max_chars:
        return Bounded(diff), stat
    parts = diff.split("\ndiff --git ")
    kept: list[str] = []
    omitted: list[str] = []
    used = 0
    for i, part in enumerate(parts):
        chunk = part if i == 0 else "diff --git " + part
        if used + len(chunk) <= max_chars:
            kept.append(chunk)
            used += len(chunk) + 1
        else:
            header = chunk.split("\n", 1)[0]
            name = header.rsplit(" b/", 1)[-1] if " b/" in header else header
            omitted.append(f"{name} ({chunk.count(chr(10))} lines)")
    return Bounded("\n".join(kept), len(diff) - used, tuple(omitted)), stat


def _bound(text: str, max_chars: int) -> Bounded:
    if len(text) <= max_chars:
        return Bounded(text)
    return Bounded(text[:max_chars], len(text) - max_chars)
