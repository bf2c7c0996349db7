"""What the worker and the checks may not do to the story's branch, and how hero undoes it.

The worker works in the story's own repository (``hero.git.storyrepo``), where its copies of
the user's branches and tags are the refs it must leave alone, and the story branch is the
one it works on. hero owns ``refs/heads/hero/*`` and ``refs/hero/*``; ``refs/stash`` is the
worker's to use. ``snapshot`` records the other refs before a phase, and
``Guard.after_rescue`` afterwards puts back any that moved or vanished and removes any that
appeared (the user's own repository is out of the worker's reach: these are copies, put back
so that the worker keeps seeing the user's branches as they are). Commits taken off a ref
that way are kept on a branch ``hero/<id>-stray-<time>``, which hero brings into the user's
repository, so nothing is lost.

The story's own branch may only grow: the head a phase starts from stays in its history
(``Guard.keep_history``); a deleted story branch is recreated (``recover_branch``).

``leftovers`` finds what a rescue commit must not take (unresolved merge conflicts, files
holding a secret value) or cannot take (changes inside a submodule's checkout); what it
leaves out as build output is hero.git.output's;
``uncommit_secrets`` takes the worker's own commits that add a secret value off the branch.
Every git call goes through ``hero.git.ops.git``.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hero.git.ops import (
    DEFAULT_IDENTITY,
    WORKTREE_TIMEOUT_S,
    GitError,
    branch_tip,
    commit_of,
    current_branch,
    git,
    git_env,
    head_sha,
)
from hero.git.output import untracked
from hero.git.reffiles import refs_from_files
from hero.git.refs import (
    FAST_DROP_MIN,
    LISTED,
    Change,
    Outcome,
    Ref,
    capped,
    drop_fast,
    read_refs,
    update_refs,
)
from hero.redact import Redactor
from hero.runner import PUSH_REFUSED_URL

#: Refs hero owns: any story's branches and hero's own refs.
OWNED_PREFIXES = ("refs/heads/hero/", "refs/hero/")
#: Refs the worker may use as it likes.
WORKER_REFS = frozenset({"refs/stash"})
#: Up to this many commits taken off refs get a stray branch each; more share one.
STRAY_BRANCHES = 8
#: Files above this size are not searched for conflict markers.
MARKER_SCAN_MAX_BYTES = 1 << 20
#: A conflict's opening or closing line (``=======`` alone is a heading underline in many files).
_MARKER = re.compile(r"^(?:<<<<<<<|>>>>>>>) ", re.MULTILINE)
_SYMREF = "ref: "

#: refname -> sha, or ``ref: <target>`` for a symbolic ref.
Refs = dict[str, str]


def is_protected(refname: str) -> bool:
    """A ref of the user's: not hero's, not the worker's stash."""
    return not refname.startswith(OWNED_PREFIXES) and refname not in WORKER_REFS


def snapshot(repo: Path) -> Refs:
    """Every protected ref of ``repo`` (one ``for-each-ref``)."""
    return protected(read_refs(repo))


def protected(refs: dict[str, Ref]) -> Refs:
    return {name: ref.value for name, ref in refs.items() if is_protected(name)}


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """The commit ``older`` (a full sha) is in the history of ``newer`` (False if either is
    unknown)."""
    return bool(older) and git(repo, "merge-base", older, newer, check=False).strip() == older


def short(refname: str) -> str:
    for prefix in ("refs/heads/", "refs/tags/"):
        if refname.startswith(prefix):
            return refname[len(prefix) :]
    return refname


class Strays:
    """Branches ``<branch>-stray-<time>[-n]`` that keep commits hero takes off a ref."""

    def __init__(self, repo: Path, branch: str) -> None:
        self.repo = repo
        self.branch = branch
        self.made: list[str] = []

    def keep(self, rev: str) -> str:
        """The branch that now holds ``rev``: "" when the story branch already does (or
        ``rev`` is no commit), else a stray branch, made only if none made here holds it."""
        sha = commit_of(self.repo, rev)
        if not sha or is_ancestor(self.repo, sha, f"refs/heads/{self.branch}"):
            return ""
        for name in self.made:
            if is_ancestor(self.repo, sha, f"refs/heads/{name}"):
                return name
        return self._branch_at(sha)

    def _branch_at(self, sha: str) -> str:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name, n = f"{self.branch}-stray-{stamp}", 1
        while branch_tip(self.repo, name):
            n += 1
            name = f"{self.branch}-stray-{stamp}-{n}"
        git(self.repo, "update-ref", f"refs/heads/{name}", sha, "")
        self.made.append(name)
        return name

    def keep_many(self, values: Sequence[str], kept: Sequence[str]) -> dict[str, str]:
        """``keep`` for many refs' values at once (shas; ``kept``: the commits of the refs
        that stay, whose history needs no stray branch): value -> the branch that holds it
        ("" if none needs to). A few git calls whatever the number: the values peeled to
        commits in one ``cat-file``, the commits only they reach found in one ``rev-list``;
        up to ``STRAY_BRANCHES`` such commits get a branch each (as ``keep``), more get one
        branch together, at a commit that has them all as parents."""
        distinct = sorted({v for v in values if v and not v.startswith(_SYMREF)})
        if not distinct:
            return {}
        peeled = _commits_of(self.repo, distinct)
        tips = sorted({c for c in peeled.values() if c})
        lost = _only_reached(self.repo, tips, [f"refs/heads/{self.branch}", *kept, *self.made])
        tips = [c for c in tips if c in lost]
        if not tips:
            return dict.fromkeys(distinct, "")
        if len(tips) <= STRAY_BRANCHES:
            where = {c: self.keep(c) for c in tips}
        else:
            where = dict.fromkeys(tips, self._branch_at(_merge_of(self.repo, tips)))
        return {v: where.get(peeled.get(v, ""), "") for v in distinct}


def _commits_of(repo: Path, values: Sequence[str]) -> dict[str, str]:
    """value -> the commit it peels to ("" for none), in one ``git cat-file``."""
    feed = "".join(f"{v}^{{commit}}\n" for v in values).encode("ascii")
    out = git(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)", input=feed)
    found: dict[str, str] = {}
    for value, line in zip(values, out.splitlines(), strict=False):
        sha, _, kind = line.partition(" ")
        found[value] = sha if kind == "commit" else ""
    return found


def _only_reached(repo: Path, tips: Sequence[str], kept: Sequence[str]) -> set[str]:
    """The commits of ``tips`` that none of ``kept`` (refs or shas) reaches, in one
    ``git rev-list``; all of ``tips`` when git cannot tell (nothing is lost by keeping
    more)."""
    if not tips:
        return set()
    feed = "".join(
        [*(f"{t}\n" for t in tips), *(f"^{k}\n" for k in kept if not k.startswith(_SYMREF))]
    ).encode("utf-8", "surrogateescape")
    try:
        out = git(repo, "rev-list", "--ignore-missing", "--stdin", input=feed)
    except GitError:
        return set(tips)
    reached = set(out.split())
    return {t for t in tips if t in reached}


def _merge_of(repo: Path, parents: Sequence[str]) -> str:
    """A new commit with ``parents`` as its parents and an empty tree: one branch at it
    keeps them all."""
    tree = git(repo, "mktree", input=b"").strip()
    stamp = f"{int(time.time())} +0000"
    who = f"{DEFAULT_IDENTITY['GIT_COMMITTER_NAME']} <{DEFAULT_IDENTITY['GIT_COMMITTER_EMAIL']}>"
    body = (
        f"tree {tree}\n"
        + "".join(f"parent {p}\n" for p in parents)
        + f"author {who} {stamp}\ncommitter {who} {stamp}\n\n"
        + f"hero: {len(parents)} commits of refs the worker made, kept\n"
    )
    return git(repo, "hash-object", "-t", "commit", "-w", "--stdin", input=body.encode()).strip()


def recover_branch(repo: Path, worktree: Path, branch: str, recorded: str) -> str:
    """Recreate ``branch`` if it is gone: at the worktree's HEAD when that builds on
    ``recorded`` (or ``recorded`` is ""), else at ``recorded``. A worktree left at the new
    tip is put back on the branch. Returns what was done, "" if the branch exists."""
    if branch_tip(repo, branch):
        return ""
    here = ""
    if (worktree / ".git").exists():
        here = commit_of(worktree, "HEAD")
    adopt = bool(here) and (not recorded or is_ancestor(repo, recorded, here))
    at = here if adopt else recorded
    if not at:
        return ""
    git(repo, "update-ref", f"refs/heads/{branch}", at, "")
    if adopt and current_branch(worktree) == "HEAD":
        git(worktree, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
    return f"{branch} had been deleted; hero recreated it at {at[:12]}"


class Guard:
    """One story's watch over the repository during one phase (the worker's turn, the
    checks). Call ``watch`` before the phase; afterwards ``before_rescue``, the rescue commit,
    then ``after_rescue``. What the phase did wrong gathers in ``problems`` (the round fails
    with them); what hero merely tidied up in ``notes``. ``own``: ``repo`` is a story's
    own repository (nothing of the worker running), whose worker-made refs may be dropped
    without git (``hero.git.refs.drop_fast``); the user's repository never needs it."""

    def __init__(
        self, repo: Path, worktree: Path, branch: str, start: str, *, own: bool = False
    ) -> None:
        self.repo = repo
        self.own = own  # a story's own repository: the worker's refs may be dropped fast
        self.worktree = worktree
        self.branch = branch
        self.start = start  # the head (a full sha) the phase must build on
        self.before: Refs = {}
        self._watched = False  # ``before`` is a record ``watch`` made
        self.left = ""  # where the worktree was found instead of on the story branch
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.strays = Strays(repo, branch)

    def watch(self, start: str | None = None, *, listed: Refs | None = None) -> None:
        """Before a phase: record the refs the worker must leave alone (and, if given, a new
        head to build on); the problems and notes of an earlier phase are cleared.
        ``listed``: the protected refs git listed here before (an earlier phase's record);
        when the ref files still show exactly those (git.reffiles), no git runs. A guard
        that watched before takes its own record as ``listed``."""
        if start is not None:
            self.start = start
        self.left = ""
        self.problems, self.notes = [], []
        if listed is None and self._watched:
            listed = self.before
        self._watched = True
        if listed is not None and self._files_show(listed):
            self.before = dict(listed)
        else:
            self.before = snapshot(self.repo)

    def _files_show(self, refs: Refs) -> bool:
        """The ref files of ``repo`` show exactly the protected refs ``refs`` (all plain)."""
        held = refs_from_files(self.repo)
        return held is not None and {n: v for n, v in held.items() if is_protected(n)} == refs

    # -- after the phase ----------------------------------------------------------------

    def before_rescue(self) -> None:
        """Detach the worktree from any branch but the story's, where it stands (index and
        files untouched), so that neither the rescue commit nor restoring that branch write
        through it; recreate the story branch if it was deleted."""
        current = current_branch(self.worktree)
        if current not in (self.branch, "HEAD"):
            here = commit_of(self.worktree, "HEAD")
            if here:
                git(self.worktree, "update-ref", "--no-deref", "HEAD", here)
            else:  # a branch with no commit yet (an orphan): onto ours, files as they are
                git(self.worktree, "symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
            self.left = current
        note = recover_branch(self.repo, self.worktree, self.branch, self.start)
        if note:
            self.notes.append(note)

    def after_rescue(self) -> None:
        """Back onto the story branch, its history kept, the user's refs put back."""
        self.back_to_branch()
        self.keep_history()
        if self.before:
            self.restore_refs()

    def back_to_branch(self) -> None:
        """Put the worktree back on the story branch. Commits made elsewhere that build on
        it are taken over (the branch moves to them; files untouched); others are kept on a
        stray branch and fail the round."""
        if current_branch(self.worktree) == self.branch:
            return
        where, tip = head_sha(self.worktree), branch_tip(self.repo, self.branch)
        left = self.left or "a detached HEAD"
        if is_ancestor(self.repo, tip, where):
            if where != tip:
                git(self.repo, "update-ref", f"refs/heads/{self.branch}", where, tip)
                self.notes.append(
                    f"the worker left {self.branch} for {left}; its commits are now on "
                    f"{self.branch}"
                )
            git(self.worktree, "symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
            return
        kept = self.strays.keep(where)
        self.save_uncommitted(f"switching back to {self.branch}")
        git(self.worktree, "checkout", "-q", "--force", self.branch)
        self.problems.append(
            f"the worker left {self.branch} for {left} and its commits there ({where[:12]}) do "
            f"not build on {self.branch}; hero switched back"
            + (f" and kept those commits on the branch {kept}" if kept else "")
            + f". Work on {self.branch} only."
        )

    def keep_history(self) -> None:
        """The story branch must still hold ``start``; if not, it is put back there and the
        rewritten commits are kept on a stray branch."""
        tip = branch_tip(self.repo, self.branch)
        if not self.start or tip == self.start or is_ancestor(self.repo, self.start, tip):
            return
        self.save_uncommitted(f"putting {self.branch} back")
        git(self.worktree, "reset", "-q", "--hard", self.start)
        kept = self.strays.keep(tip)  # after the reset: the branch no longer holds the tip
        self.problems.append(
            f"{self.branch} no longer contained {self.start[:12]}, the commit this round had to "
            "build on: history was rewritten (a reset, an amend or a rebase). hero put "
            f"{self.branch} back at {self.start[:12]}"
            + (f" and kept the rewritten commits on the branch {kept}" if kept else "")
            + ". Add new commits on top (undo a change with `git revert`); never reset, amend "
            "or rebase commits that are already on the branch."
        )

    def save_uncommitted(self, why: str) -> None:
        """Before hero overwrites the worktree's files: what the rescue commit left there
        (files it refused to commit, such as conflict markers) goes into ``git stash``, so a
        forced checkout or a hard reset loses nothing."""
        if not git(self.worktree, "status", "--porcelain").strip():
            return
        message = f"{self.branch}: uncommitted work kept by hero before {why}"
        env = git_env({**DEFAULT_IDENTITY})
        git(self.worktree, "add", "-A", env=env)  # unmerged paths too: stash cannot take them
        git(self.worktree, "stash", "push", "-q", "-m", message, env=env)
        self.problems.append(
            f"the worktree held uncommitted changes; hero saved them with `git stash` "
            f"('{message}') before {why}: `git stash list` shows them, `git stash pop` brings "
            "them back"
        )

    def restore_refs(self) -> None:
        """Put back every protected ref that moved or vanished since ``watch`` and remove
        every one that appeared, keeping the commits they pointed at on a stray branch. A
        moved branch that a checkout of the user's own shows (its index matches the new
        commit, not the old) is taken as the user's commit and left alone. In bulk, whatever
        the number of refs: one read, one transaction for the removals (in the story's own
        repository, the worker's refs dropped without git when there are many), one for the
        refs put back (``hero.git.refs``). When the ref files show every protected ref
        as it was (git.reffiles, the common case), no git runs."""
        if self._files_show(self.before):
            return
        everything = read_refs(self.repo)
        now = protected(everything)
        if now == self.before:
            return
        created = sorted(set(now) - set(self.before))
        changed = sorted(r for r, v in self.before.items() if now.get(r) != v)
        checkouts = _checkouts(self.repo, self.worktree) if changed else {}
        restore: list[str] = []
        for ref in changed:
            new = now.get(ref)
            if new and _committed_by_user(checkouts.get(ref, ()), self.before[ref], new):
                self.notes.append(f"{short(ref)} moved in a checkout of yours; left as it is")
            else:
                restore.append(ref)
        going = set(created) | set(restore)
        staying = [r.oid for n, r in everything.items() if n not in going and not r.symref]
        staying += [self.before[r] for r in restore]
        refused = self._remove(created, everything)  # first: the fast way keeps no new ref
        kept = self.strays.keep_many([now[r] for r in created + restore if r in now], staying)
        outcome = update_refs(self.repo, [Change(r, self.before[r]) for r in restore])
        refused.update(outcome.refused)
        self._report(created, [r for r in created if r not in refused], now, kept, "created")
        moved = [r for r in restore if r not in refused]
        self._report(restore, moved, now, kept, "changed")
        if refused:
            self.problems += Outcome(refused=refused).problems()
        if created or restore:
            self.problems.append(
                f"Branches, tags and other refs outside hero/ belong to the user: work on "
                f"{self.branch} only, and do not create, move or delete any other ref."
            )

    def _remove(self, created: list[str], everything: dict[str, Ref]) -> dict[str, str]:
        """Delete the refs the worker made (``everything``: all refs, read before); those
        git refused, and why. A ref that should have stayed and did not (the fast way moves
        the loose ones it keeps) is set again as it was."""
        if not created:
            return {}
        left = created
        if self.own and len(created) >= FAST_DROP_MIN and (self.repo / ".git").is_dir():
            going = set(created)
            staying = [n for n in everything if n not in going]
            drop_fast(self.repo / ".git", created, keep=staying)
            there = read_refs(self.repo)
            left = [r for r in created if r in there]
            lost = [n for n in staying if there.get(n) != everything[n]]
            back = update_refs(self.repo, [Change(n, everything[n].value) for n in lost])
            if back.refused:
                self.problems += back.problems()
        return update_refs(self.repo, [Change(r) for r in left]).refused

    def _report(
        self, refs: list[str], done: list[str], now: Refs, kept: dict[str, str], kind: str
    ) -> None:
        """One problem per ref when they are few, else one for them all (names capped)."""
        if not done:
            return
        if len(refs) <= LISTED:
            for ref in done:
                self.problems.append(self._said(ref, now, kept, kind))
            return
        branches = sorted({b for b in map(kept.get, {now.get(r, "") for r in done}) if b})
        what = "were created; hero removed them" if kind == "created" else "were moved or "
        if kind != "created":
            what += "deleted; hero put them back"
        self.problems.append(
            capped([short(r) for r in done], "refs")
            + f" {what}"
            + (
                f" and kept their commits on the branch(es) {', '.join(branches)}"
                if branches
                else ""
            )
        )

    def _said(self, ref: str, now: Refs, kept: dict[str, str], kind: str) -> str:
        new = now.get(ref)
        branch = kept.get(new or "", "")
        if kind == "created":
            return f"{short(ref)} ({ref}) was created; hero removed it" + (
                f" and kept its commits on the branch {branch}" if branch else ""
            )
        old = self.before[ref]
        what = "deleted" if new is None else f"moved from {_label(old)} to {_label(new)}"
        return f"{short(ref)} ({ref}) was {what}; hero put it back" + (
            f" and kept the commits it had moved to on the branch {branch}" if branch else ""
        )


def _label(value: str) -> str:
    """A ref's value for people: a short sha, or the target of a symbolic ref."""
    return value[len(_SYMREF) :] if value.startswith(_SYMREF) else value[:12]


def _checkouts(repo: Path, ours: Path) -> dict[str, tuple[Path, ...]]:
    """Branch ref -> the worktrees (other than ``ours``) that have it checked out."""
    found: dict[str, list[Path]] = {}
    path: Path | None = None
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = Path(line[len("worktree ") :])
        elif line.startswith("branch ") and path is not None and path.resolve() != ours.resolve():
            found.setdefault(line[len("branch ") :], []).append(path)
    return {ref: tuple(paths) for ref, paths in found.items()}


def _committed_by_user(checkouts: tuple[Path, ...], old: str, new: str) -> bool:
    """Some checkout of the ref has an index that matches ``new`` and not ``old``: putting
    the ref back would leave that checkout's index and files out of step with its HEAD."""
    for path in checkouts:
        if _index_matches(path, new) and not _index_matches(path, old):
            return True
    return False


def _index_matches(worktree: Path, rev: str) -> bool:
    diff = git(worktree, "diff-index", "--cached", "--name-only", rev, "--", check=False)
    ok = git(worktree, "rev-parse", "--verify", "--quiet", f"{rev}^{{tree}}", check=False)
    return bool(ok.strip()) and not diff.strip()


# -- what a rescue commit must not or cannot take --------------------------------------------


@dataclass(frozen=True)
class Leftovers:
    """What ``leftovers`` found in a worktree's uncommitted changes."""

    conflicted: tuple[str, ...] = ()  # unmerged, or with conflict markers the base did not have
    in_submodules: tuple[str, ...] = ()  # submodules whose checkout has changes
    committable: bool = False  # anything else left uncommitted, which a commit can take
    # files holding a secret value their version at the base did not (names redacted too)
    with_secrets: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        out = []
        if self.with_secrets:
            out.append(
                "files holding the value of a secret hero knows (an API key or token): "
                + ", ".join(self.with_secrets)
                + ". hero did not commit them, nor anything else left uncommitted; they are "
                "still in the worktree. Take the secret out of them (never write keys or "
                "tokens into files; read them from the environment where code needs them), "
                "then commit."
            )
        if self.conflicted:
            out.append(
                "unresolved merge conflicts (unmerged paths or conflict markers) in: "
                + ", ".join(self.conflicted)
                + ". hero did not commit them, nor anything else left uncommitted; they are "
                "still in the worktree as they were. Resolve them (remove every `<<<<<<<`, "
                "`=======` and `>>>>>>>` line), then commit."
            )
        if self.in_submodules:
            out.append(
                "files changed inside the submodule(s) "
                + ", ".join(self.in_submodules)
                + ": a commit of this repository cannot hold them, so they were not committed. "
                "Undo them (`git -C <submodule> checkout -- . && git -C <submodule> clean -fd`) "
                "and change this repository's own files instead."
            )
        return out


def leftovers(
    worktree: Path,
    base: str,
    secrets: Redactor | None = None,
    build_output: Sequence[str] = (),
) -> Leftovers:
    """Uncommitted paths a rescue commit must not take (unresolved conflicts: unmerged, or
    holding conflict markers that the file did not have at ``base``; files holding one of
    ``secrets`` that their version at ``base`` did not) or cannot take (changes inside a
    submodule's checkout). Untracked files matching ``build_output``, which the rescue
    commit leaves out (hero.git.output), are not looked at. One ``git status`` and one
    ``git ls-files``; files are read only when changed, up to ``MARKER_SCAN_MAX_BYTES`` for
    markers, whole (in chunks) for secrets."""
    # the untracked files ("?") come from ls-files, build output left out; "normal", not
    # "no": that would hide the untracked files inside a submodule's checkout too
    out = git(worktree, "status", "--porcelain=v2", "-z", "--untracked-files=normal")
    records = out.split("\0")
    conflicted: list[str] = []
    submodules: list[str] = []
    candidates: list[str] = []
    committable = False
    i = 0
    while i < len(records):
        rec = records[i]
        i += 1
        kind = rec[:1]
        if kind == "u":
            conflicted.append(rec.split(" ", 10)[10])
        elif kind in ("1", "2"):
            parts = rec.split(" ", 8 if kind == "1" else 9)
            sub, path = parts[2], parts[-1]
            if kind == "2":
                i += 1  # the rename's original path
            if sub.startswith("S"):  # S<commit changed><tracked changes><untracked files>
                if sub[2] == "M" or sub[3] == "U":
                    submodules.append(path)
                committable |= sub[1] == "C" or parts[1][0] != "."
            else:
                candidates.append(path)
    candidates += untracked(worktree, build_output)
    conflicted += [p for p in candidates if _new_markers(worktree, p, base)]
    leaks = (
        tuple(secrets.redact(p) for p in candidates if new_secret(worktree, p, base, secrets))
        if secrets
        else ()
    )
    return Leftovers(tuple(conflicted), tuple(submodules), committable or bool(candidates), leaks)


def has_conflict_markers(text: str) -> bool:
    return _MARKER.search(text) is not None


def _new_markers(worktree: Path, path: str, base: str) -> bool:
    file = worktree / path
    try:
        if file.is_symlink() or not file.is_file() or file.stat().st_size > MARKER_SCAN_MAX_BYTES:
            return False
        data = file.read_bytes()
    except OSError:
        return False
    if b"\0" in data[:8000] or not has_conflict_markers(data.decode("utf-8", errors="replace")):
        return False
    at_base = git(worktree, "show", f"{base}:{path}", check=False, cut_ok=True) if base else ""
    return not has_conflict_markers(at_base)


def new_secret(worktree: Path, path: str, base: str, secrets: Redactor) -> bool:
    """The file at ``path`` (a symlink: its target, which is what git commits) holds a secret
    that its version at ``base`` did not hold (a repository that had it there already leaks
    nothing new). A FIFO or a device is not opened."""
    file = worktree / path
    try:
        if file.is_symlink():
            held = secrets.holds(os.readlink(file))
        else:
            fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with open(fd, "rb") as fh:
                held = stat.S_ISREG(os.fstat(fd).st_mode) and secrets.holds_stream(fh)
    except OSError:
        return False
    return held and not _secret_at(worktree, base, path, secrets)


def _secret_at(worktree: Path, rev: str, path: str, secrets: Redactor) -> bool:
    # a file bigger than hero reads of git's output is searched in its first and last parts
    shown = git(worktree, "show", f"{rev}:{path}", check=False, cut_ok=True) if rev else ""
    return secrets.holds(shown)


def uncommit_secrets(worktree: Path, start: str, base: str, secrets: Redactor) -> list[str]:
    """If a commit in ``start..HEAD`` (the worker's, this round) adds a secret value to a
    file or holds one in its message, take those commits off the branch: it goes back to
    ``start`` with their changes left in the worktree, uncommitted (``git reset --mixed``),
    so no branch hero keeps holds the secret and no work is lost. Returns why the round
    fails, or nothing. Call it with the repository locked, the worktree on the branch."""
    leaks = secret_commits(worktree, start, base, secrets)
    if not leaks:
        return []
    git(worktree, "reset", "-q", "--mixed", start)
    return [
        "a commit added the value of a secret hero knows (an API key or token): "
        + ", ".join(leaks)
        + f". hero took this round's commits off the branch (it is back at {start[:12]}); "
        "their changes are still in the worktree, uncommitted. Take the secret out (never "
        "write keys or tokens into files or commit messages; read them from the environment "
        "where code needs them), then commit again."
    ]


def secret_commits(worktree: Path, start: str, base: str, secrets: Redactor) -> list[str]:
    """Where the commits in ``start..HEAD`` put a secret: ``<sha> <file>`` for each file a
    commit adds one to (in its added lines, binary files read as text; a file that held it
    at ``base`` already is left out), ``<sha> (message)`` for a commit message holding one.
    Two ``git log`` calls; empty when there is no secret or no ``start``."""
    if not secrets or not start:
        return []
    span = f"{start}..HEAD"
    found: list[str] = []
    for record in git(worktree, "log", "--format=%x01%H%n%B", span).split("\x01")[1:]:
        sha, _, message = record.partition("\n")
        if secrets.holds(message):
            found.append(f"{sha[:12]} (message)")
    patch = git(
        worktree,
        "log",
        "-p",
        "--text",
        "--unified=0",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--diff-merges=first-parent",
        "--format=%x01%H",
        span,
        timeout_s=WORKTREE_TIMEOUT_S,
    )
    sha, path, header = "", "", False
    added: list[str] = []  # the added lines of one file in one commit

    def flush() -> None:
        text = "\n".join(added)
        if secrets.holds(text) and not _secret_at(worktree, base, path, secrets):
            found.append(f"{sha[:12]} {secrets.redact(path)}")
        added.clear()

    for line in patch.split("\n"):
        if line.startswith("\x01"):
            flush()
            sha, path, header = line[1:], "", False
        elif line.startswith("diff --git "):
            flush()
            path, header = "", True
        elif header:
            if line.startswith("+++ "):
                path = line[4:].removeprefix("b/")
            elif line.startswith("@@"):
                header = False
        elif line.startswith("+"):
            added.append(line[1:])
    flush()
    return found


# -- submodules and pushing -----------------------------------------------------------------


def init_submodules(worktree: Path) -> None:
    """Check out the worktree's submodules, recursively, if it has any."""
    if (worktree / ".gitmodules").is_file():
        git(
            worktree,
            "submodule",
            "update",
            "--init",
            "--recursive",
            timeout_s=WORKTREE_TIMEOUT_S,
        )


def push_refusals(repo: Path) -> list[tuple[str, str]]:
    """Git settings that refuse pushing to the push URLs ``repo`` configures explicitly
    (``remote.<name>.pushurl``, which ``pushInsteadOf`` does not rewrite). For
    ``runner.child_env(git_config=...)``, beside its own refusal of every other push URL."""
    out = git(repo, "config", "--get-regexp", r"^remote\..*\.pushurl$", check=False)
    urls = {line.split(" ", 1)[1] for line in out.splitlines() if " " in line}
    return [(f"url.{PUSH_REFUSED_URL}.insteadOf", url) for url in sorted(urls)]
