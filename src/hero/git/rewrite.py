"""A story's new commits, and rewriting their messages while hero brings them back.

A story's *new* commits are the ones ``tip`` holds that neither a given commit (what hero
brought back last, or the story's base) nor any ref of the user's holds: every ref but
hero's story branches, wherever they are kept (``refs/heads/hero/*``, a remote's
``refs/remotes/<remote>/hero/*``, hero's own ``refs/hero/<what>/hero/*``, such as its fetch
in flight). Commits the user has on a branch or a tag of their own (the worker merged
``main``, say) are the user's, never rewritten nor judged.

``rewrite_messages`` gives each new commit the message a ``MessageRule`` makes of it. A
commit whose message stays and whose parents stay is kept as it is; any other is made anew
with ``git commit-tree``: the same tree, its parents as rewritten, the author's and
committer's names, e-mails and dates of the original, the new message. The same commits
and rule give the same new commits (no clock, no signature), so doing it twice changes
nothing. Commits that build on the ones before ``tip`` are never touched, which keeps the
story branch moving forward only. Every git call goes through ``hero.git.ops.git``; run it
between commands, when nothing of the worker runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hero.git.ops import GitError, git

#: The most commits one rewrite makes anew; a bring-back that needs more is refused.
MAX_REWRITTEN = 1000
#: Refs that hold hero's story branches (or copies of them): their commits may be new.
HERO_REFS = ("refs/heads/hero/*", "refs/remotes/*/hero/*", "refs/hero/*/hero/*")
#: hero's git reads and writes objects as they are: no replace refs, no signature checks,
#: no mail map, UTF-8 in and out.
_READ = ("--no-replace-objects",)
_FIELDS = ("%H", "%T", "%P", "%an", "%ae", "%ad", "%cn", "%ce", "%cd", "%B")


@dataclass(frozen=True)
class MessageRule:
    """How the messages of a story's commits must read, and why (told to the worker)."""

    edit: Callable[[str], str]
    """The message a commit must have, given the one it has (unchanged when it is fine)."""
    why: str
    """Why messages were rewritten, in a sentence for the worker's round output."""


@dataclass(frozen=True)
class Commit:
    """One commit as ``git log`` shows it, message exact (as UTF-8)."""

    sha: str
    tree: str
    parents: tuple[str, ...]
    author: tuple[str, str, str]  # name, e-mail, date (``<seconds> <zone>``)
    committer: tuple[str, str, str]
    message: str


@dataclass(frozen=True)
class Rewritten:
    """What ``rewrite_messages`` did."""

    tip: str
    """The tip afterwards (``tip`` itself when nothing changed)."""
    reworded: tuple[tuple[str, str], ...] = ()
    """(old, new) of each commit whose message changed."""
    moved: int = 0
    """Commits made anew only because a commit before them was."""


def new_commits(repo: Path, tip: str, since: Sequence[str]) -> list[Commit]:
    """The commits ``tip`` holds that neither ``since`` nor a ref of the user's holds, each
    after its parents; one ``git log``."""
    out = git(
        repo,
        *_READ,
        "log",
        "-z",
        "--no-mailmap",
        "--no-show-signature",
        "--encoding=UTF-8",
        "--date=raw",
        "--topo-order",
        "--reverse",
        "--format=" + "%x00".join(_FIELDS),
        *revisions(tip, since),
        "--",
    )
    fields = out.split("\0")
    if fields and fields[-1] == "":
        fields.pop()
    n = len(_FIELDS)
    if len(fields) % n:
        raise GitError(f"git log of {tip[:12]} in {repo} printed commits hero cannot read")
    found = []
    for i in range(0, len(fields), n):
        sha, tree, parents, an, ae, ad, cn, ce, cd, message = fields[i : i + n]
        found.append(Commit(sha, tree, tuple(parents.split()), (an, ae, ad), (cn, ce, cd), message))
    return found


def revisions(tip: str, since: Sequence[str]) -> list[str]:
    """The revision arguments naming ``tip``'s new commits (see the module's text)."""
    excluded = [f"--exclude={pattern}" for pattern in HERO_REFS]
    return [tip, "--not", *(s for s in since if s), *excluded, "--all"]


def rewrite_messages(repo: Path, tip: str, since: Sequence[str], rule: MessageRule) -> Rewritten:
    """Give ``tip``'s new commits the messages ``rule`` makes of them, in ``repo`` (which
    holds their objects); returns the new tip and what changed. Nothing is moved: the caller
    points its refs at the new tip. GitError when a commit cannot be made anew (it names
    the commit), or when more than ``MAX_REWRITTEN`` would have to be."""
    commits = new_commits(repo, tip, since)
    edited = {c.sha: rule.edit(c.message) for c in commits}
    first = next((i for i, c in enumerate(commits) if edited[c.sha] != c.message), None)
    if first is None:
        return Rewritten(tip)
    if len(commits) - first > MAX_REWRITTEN:
        raise GitError(
            f"{len(commits) - first} commits up to {tip[:12]} would have to be made anew to "
            f"rewrite the message of {commits[first].sha[:12]}; hero makes at most "
            f"{MAX_REWRITTEN} at a time"
        )
    made: dict[str, str] = {}
    reworded: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="hero-message-") as scratch:
        message_file = Path(scratch) / "message"
        for commit in commits:
            parents = tuple(made.get(p, p) for p in commit.parents)
            message = edited[commit.sha]
            if message == commit.message and parents == commit.parents:
                continue
            made[commit.sha] = _commit_tree(repo, commit, parents, message, message_file)
            if message != commit.message:
                reworded.append((commit.sha, made[commit.sha]))
    return Rewritten(made.get(tip, tip), tuple(reworded), len(made) - len(reworded))


def _commit_tree(
    repo: Path, commit: Commit, parents: tuple[str, ...], message: str, message_file: Path
) -> str:
    """``commit`` made anew with ``parents`` and ``message``, its author, committer and
    dates kept (``-F``: the message exactly as given; no signature)."""
    message_file.write_bytes(message.encode("utf-8"))
    (an, ae, ad), (cn, ce, cd) = commit.author, commit.committer
    env = {
        "GIT_AUTHOR_NAME": an,
        "GIT_AUTHOR_EMAIL": ae,
        "GIT_AUTHOR_DATE": f"@{ad}",
        "GIT_COMMITTER_NAME": cn,
        "GIT_COMMITTER_EMAIL": ce,
        "GIT_COMMITTER_DATE": f"@{cd}",
    }
    args = [arg for parent in parents for arg in ("-p", parent)]
    try:
        sha = git(
            repo,
            *_READ,
            "-c",
            "i18n.commitEncoding=UTF-8",
            "commit-tree",
            "--no-gpg-sign",
            commit.tree,
            *args,
            "-F",
            os.fspath(message_file),
            env=env,
        ).strip()
    except GitError as exc:
        raise GitError(f"commit {commit.sha[:12]} could not be made anew: {exc}") from None
    return sha
