"""What the worker may change: the story's scope and the protected files.

Both are lists of globs, read the way ``.gitignore`` reads its lines (and the way ``find``
and ``grep`` read theirs): ``*`` and ``?`` stay within one path component, ``**`` spans
components (``src/**`` is everything under ``src``, ``a/**/b`` also matches ``a/b``),
``[...]`` is a class and ``{a,b}`` a choice. A glob without a ``/`` matches a name at any
depth (``*.py``, ``.env``); one with a ``/`` is anchored at the worktree's root (``/x``
is ``x`` at the root only). A glob that matches a directory covers everything under it
(``src/app`` and ``src/app/`` both cover ``src/app/views.py``; a trailing ``/`` matches
directories only). An empty scope is the whole worktree. A protected file is never
changed, whatever the scope says.

Two places enforce it. The file tools refuse a write outside (``paths.open_in_worktree``
asks :meth:`PathRules.refusal`). A shell command can write anything, so after each one
:func:`check_after_command` compares the worktree with the story's base commit (one
``git status``, and a diff of two commits once HEAD moves) and puts back every path outside: its content at the base, or nothing if
it did not exist there. The pipeline asks :func:`undo_outside` once more before the
rescue commit, for what appeared without a command (a process still writing).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from hero.agent.tools.context import ToolContext
from hero.git.ops import GitError, git

#: Paths given to one ``git restore``: far below the kernel's limit on arguments.
_RESTORE_BATCH = 500
#: What hero's git calls here must not take from the repository's configuration: paths are
#: quoted (so a name that is not UTF-8 survives the round trip) and never shown relative.
_GIT_FIXED = ("-c", "core.quotePath=true", "-c", "diff.relative=false")


# ---------------------------------------------------------------------------------------------
# Globs


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a gitignore-style glob: ``*`` and ``?`` stay within one path segment, ``**``
    spans segments (``a/**/b`` also matches ``a/b``), ``[...]`` classes, ``{a,b}`` braces."""
    return re.compile(f"(?s:{_glob_body(pattern)})\\Z")


def _glob_body(p: str) -> str:
    out: list[str] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "*":
            j = i
            while j < n and p[j] == "*":
                j += 1
            if j - i >= 2:
                if j < n and p[j] == "/":
                    out.append("(?:.*/)?")
                    j += 1
                else:
                    out.append(".*")
            else:
                out.append("[^/]*")
            i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = i + 1
            if j < n and p[j] in "!^":
                j += 1
            if j < n and p[j] == "]":
                j += 1
            while j < n and p[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
                i += 1
            else:
                inner = p[i + 1 : j]
                if inner[:1] in ("!", "^"):
                    inner = "^" + inner[1:]
                out.append("[" + inner.replace("\\", "\\\\") + "]")
                i = j + 1
        elif c == "{":
            j = p.find("}", i)
            if j < 0:
                out.append(re.escape(c))
                i += 1
            else:
                alts = p[i + 1 : j].split(",")
                out.append("(?:" + "|".join(_glob_body(a) for a in alts) + ")")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class _Glob:
    text: str  # as written, for messages
    regex: re.Pattern[str] | None  # None: the whole worktree ("", ".", "/", "**")
    by_name: bool  # no "/" in it: tested against each path component's name
    dirs_only: bool  # written with a trailing "/"

    @classmethod
    def of(cls, text: str) -> _Glob:
        pat = text.strip()
        while pat.startswith("./"):
            pat = pat[2:]
        dirs_only = pat.endswith("/")
        pat = pat.rstrip("/")
        by_name = "/" not in pat and not text.strip().startswith(("/", "./"))
        pat = pat.lstrip("/")
        whole = pat in ("", ".", "**")
        return cls(text, None if whole else glob_to_regex(pat), by_name, dirs_only)

    def covers(self, path: str, is_dir: bool) -> bool:
        """Whether ``path`` (root-relative, posix) or a directory above it matches."""
        if self.regex is None:
            return True
        parts = path.split("/")
        for end in range(1, len(parts) + 1):
            a_dir = end < len(parts) or is_dir
            if self.dirs_only and not a_dir:
                continue
            subject = parts[end - 1] if self.by_name else "/".join(parts[:end])
            if self.regex.match(subject) or (a_dir and self.regex.match(subject + "/")):
                return True
        return False


@dataclass(frozen=True)
class Refusal:
    """Why a path may not be changed: what it is, and what to do instead."""

    reason: str  # "outside this story's scope (`src/**`)", "a protected file (...)"
    advice: str

    def __str__(self) -> str:
        return f"it is {self.reason}; {self.advice}"


@dataclass(frozen=True)
class PathRules:
    """A story's scope and the protected files, compiled (see the module's docstring)."""

    scope: tuple[str, ...]
    protected: tuple[str, ...]
    _scope: tuple[_Glob, ...]
    _protected: tuple[_Glob, ...]

    @property
    def idle(self) -> bool:
        """Nothing to enforce: no scope and no protected files."""
        return not self._scope and not self._protected

    def refusal(self, path: str, is_dir: bool = False) -> Refusal | None:
        """Why the worker may not change ``path`` (root-relative), or None when it may."""
        for glob in self._protected:
            if glob.covers(path, is_dir):
                return Refusal(
                    f"a protected file (it matches `{glob.text}`)",
                    "the worker never changes protected files",
                )
        if self._scope and not any(glob.covers(path, is_dir) for glob in self._scope):
            return Refusal(
                f"outside this story's scope ({self.scope_text()})",
                "change only files matching the scope",
            )
        return None

    def scope_text(self) -> str:
        return ", ".join(f"`{g}`" for g in self.scope) if self.scope else "the whole repository"


@functools.lru_cache(maxsize=64)
def path_rules(scope: tuple[str, ...], protected: tuple[str, ...]) -> PathRules:
    """The compiled rules (cached: the file tools ask on every write)."""
    kept_scope = tuple(s for s in scope if s.strip())
    kept_protected = tuple(p for p in protected if p.strip())
    return PathRules(
        kept_scope,
        kept_protected,
        tuple(_Glob.of(s) for s in kept_scope),
        tuple(_Glob.of(p) for p in kept_protected),
    )


def rules_of(ctx: ToolContext) -> PathRules:
    return path_rules(tuple(ctx.scope), tuple(ctx.protected))


# ---------------------------------------------------------------------------------------------
# Undoing what a command changed outside


@dataclass(frozen=True)
class Reverted:
    """One path hero put back."""

    path: str
    why: Refusal
    existed: bool  # True: its content at the base is back; False: it was deleted
    committed: bool  # the change was in a commit of the worker's (the undo is uncommitted)


@dataclass(frozen=True)
class Undo:
    """What :func:`undo_outside` put back, and what it could not."""

    reverted: tuple[Reverted, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()  # (path, why hero could not put it back)

    def __bool__(self) -> bool:
        return bool(self.reverted or self.failed)

    def lines(self) -> list[str]:
        """One line per path: what hero did and why."""
        out = []
        for r in self.reverted:
            done = "put back as it was at the base commit" if r.existed else "deleted"
            out.append(f"{r.path}: {done}; it is {r.why.reason}")
        return out + self.failures()

    def failures(self) -> list[str]:
        """One line per path hero could not put back."""
        return [f"{path}: could not be put back ({why})" for path, why in self.failed]

    def note(self) -> str:
        """The text the worker reads (in the bash tool's result), or "" when nothing."""
        if not self:
            return ""
        lines = ["hero undid changes to files this story may not change:"]
        lines += [f"- {line}" for line in self.lines()]
        if any(r.committed for r in self.reverted):
            lines.append(
                "Some of these changes were in your commits: the undo is left uncommitted and "
                "hero's commit at the end of the round records it."
            )
        lines.append("Change only files in the story's scope, and never a protected file.")
        return "\n".join(lines)


def check_after_command(ctx: ToolContext) -> str:
    """After a bash command: undo its changes outside the scope and to protected files;
    the note for the tool result, or "". Skipped (no git call) when there is nothing to
    enforce or no base commit to compare with."""
    rules = rules_of(ctx)
    if rules.idle or not ctx.base_sha:
        return ""
    kept = ctx.scope_stamp
    now = time.monotonic_ns()
    if kept is not None and kept[1] == TOO_BIG and now < kept[0]:
        seen: tuple[object, ...] | None = None  # too big to stamp, found lately: no walk
    else:
        # taken before the check, so that whatever changes after git looked differs from it
        seen = stamp(ctx.root)
        if seen is not None and kept is not None and kept[1] == seen and now < kept[0]:
            return ""  # not one file, directory or git record changed since a clean check
        ctx.scope_stamp = (now + BIG_AGAIN_NS, TOO_BIG) if seen == TOO_BIG else None
        if seen == TOO_BIG:
            seen = None
    try:
        planted = ctx.before_git() if ctx.before_git is not None else ""
        note = undo_outside(ctx.root, ctx.base_sha, rules).note()
        text = "\n".join(part for part in (planted, note) if part)
        if not text and seen is not None:
            ctx.scope_stamp = (time.monotonic_ns() + STAMP_TRUST_NS, seen)
        return text
    except (GitError, OSError) as exc:
        return (
            "hero could not check this command's changes against the story's scope: "
            f"{exc}. It checks again before its commit at the end of the round."
        )


#: Entries (files, directories, links; ``.git`` included) above which a worktree is not
#: stamped: its walk would cost what the git check costs, so every check is a full one.
STAMP_LIMIT = 300
#: What ``stamp`` returns for a worktree over ``STAMP_LIMIT``; it is not walked again for
#: ``BIG_AGAIN_NS`` (each check a full one meanwhile).
TOO_BIG: tuple[object, ...] = ()
BIG_AGAIN_NS = 60_000_000_000
#: A stamp holding a change this recent is not kept: a file system records a change's time
#: only to its clock's tick (up to two seconds on some), so a second change within the same
#: tick could leave every time the stamp holds as it was.
RACY_NS = 2_000_000_000
#: The same where a time in the stamp shows the file system keeps finer times than 10 ms
#: (ext4, xfs, btrfs, tmpfs, overlayfs): there a change's time is the kernel's clock tick,
#: at most 10 ms.
RACY_FINE_NS = 50_000_000
#: How long a clean check's stamp lets checks be skipped. A write through a shared memory
#: map changes a file's times only at the first write to a page since its last writeback:
#: a process still running could change a file again unseen, so a full check comes at least
#: this often (and the pipeline's own at the round's end, always).
STAMP_TRUST_NS = 5_000_000_000


def stamp(root: Path) -> tuple[object, ...] | None:
    """What every entry under ``root`` is: its path, inode and type, and for what is not a
    directory its size, link count, mtime and ctime, all without following a link (``.git``
    with its index, HEAD and refs included). Two equal stamps mean nothing was written,
    created, removed, renamed or linked between them: a write changes the file's ctime,
    which no process can set back, and a name added or removed shows in the listing. (A
    directory's own times are left out: the listing says what they would, and git's status
    moves those of ``.git`` on every call, creating and removing its lock file.) None (check
    in full) when the worktree spans file systems,
    cannot be read whole, or a file in it changed within ``RACY_NS`` of now (``RACY_FINE_NS``
    where its times are finer than 10 ms); ``TOO_BIG`` when it holds more than
    ``STAMP_LIMIT`` entries."""
    now = time.time_ns()
    newest = 0
    fine = False
    out: list[object] = []
    todo = [""]
    try:
        top = os.lstat(root)
        out.append(("", top.st_ino, top.st_mode))
        device = top.st_dev
        while todo:
            rel = todo.pop()
            with os.scandir(root / rel if rel else root) as entries:
                for entry in entries:
                    st = entry.stat(follow_symlinks=False)
                    path = f"{rel}/{entry.name}" if rel else entry.name
                    if st.st_dev != device:
                        return None  # another file system mounted inside: its own clock
                    if stat.S_ISDIR(st.st_mode):
                        out.append((path, st.st_ino, st.st_mode))
                        todo.append(path)
                    else:
                        newest = max(newest, st.st_ctime_ns, st.st_mtime_ns)
                        fine = fine or st.st_ctime_ns % 10_000_000 != 0
                        out.append(
                            (
                                path,
                                st.st_ino,
                                st.st_mode,
                                st.st_size,
                                st.st_nlink,
                                st.st_mtime_ns,
                                st.st_ctime_ns,
                            )
                        )
                    if len(out) > STAMP_LIMIT:
                        return TOO_BIG
    except OSError:
        return None
    if newest > now - (RACY_FINE_NS if fine else RACY_NS):
        return None
    return tuple(out)


#: Files that tell git what to leave unseen: a new one outside the scope could hide what
#: the worker wrote there from the scope check (``.gitignore`` holding ``*`` hides itself).
IGNORE_FILES = (".gitignore",)


def unhide_outside(worktree: Path, rules: PathRules) -> list[str]:
    """Remove the new ignore files (``IGNORE_FILES``) that ``rules`` refuse, ignored by git
    or not, so that what they hid is seen by ``undo_outside``; returns their paths. One
    ``git status`` that lists ignored files (an ignored directory as itself, not walked):
    run it at a phase's end, before the checks."""
    if rules.idle:
        return []
    out = git(
        worktree,
        *_GIT_FIXED,
        "status",
        "--porcelain=v2",
        "-z",
        "--ignored=matching",
        "--untracked-files=all",
        "--ignore-submodules=dirty",
    )
    removed: list[str] = []
    for record in out.split("\0"):
        if record[:2] not in ("? ", "! "):
            continue
        path = record[2:]
        if path.rsplit("/", 1)[-1] in IGNORE_FILES and rules.refusal(path) is not None:
            if not _remove(worktree, path):
                removed.append(path)
    return removed


def undo_outside(worktree: Path, base: str, rules: PathRules) -> Undo:
    """Put back every path the worktree changed since ``base`` (committed or not, plus new
    files git does not ignore) that ``rules`` refuse: its content at ``base``, or deleted if
    it was not there.

    Cost: one ``git status`` (HEAD, what differs from HEAD, new files); when HEAD has moved
    from ``base``, one ``git diff`` of the two commits' trees (no file is read; cached per
    pair of commits), and for a refused path that differs both ways one ``git diff`` limited
    to such paths; a ``git restore`` (per 500 paths) when a tracked path is put back."""
    if rules.idle:
        return Undo()
    head, changed, untracked = _status(worktree)
    committed = _commits_changed(worktree, base, head) if head != base else frozenset()
    bad = {p: why for p in sorted(changed | committed) if (why := rules.refusal(p)) is not None}
    unsure = [p for p in bad if p in changed and p in committed]  # back at base, or not?
    if unsure:
        same = set(unsure) - _differs_from(worktree, base, unsure) - untracked
        bad = {p: why for p, why in bad.items() if p not in same}
    bad_new = [
        (p, why)
        for p in sorted(untracked)
        if p not in changed and (why := rules.refusal(p.rstrip("/"), p.endswith("/")))
    ]
    reverted: list[Reverted] = []
    failed: list[tuple[str, str]] = []
    if bad:
        not_restored = dict(_restore(worktree, base, list(bad)))
        for path, why in bad.items():
            if path in not_restored and path in untracked:  # in neither base nor the index
                not_restored[path] = _remove(worktree, path)
            if not_restored.get(path):
                failed.append((path, not_restored[path]))
            else:
                existed = os.path.lexists(worktree / path)  # restore deletes what base lacks
                reverted.append(Reverted(path, why, existed, path in committed))
    for path, why in bad_new:
        problem = _remove(worktree, path.rstrip("/"))
        if problem:
            failed.append((path, problem))
        else:
            reverted.append(Reverted(path, why, existed=False, committed=False))
    return Undo(tuple(reverted), tuple(failed))


def _status(worktree: Path) -> tuple[str, set[str], set[str]]:
    """(HEAD's sha, paths whose index or file differs from HEAD, untracked paths)."""
    out = git(
        worktree,
        *_GIT_FIXED,
        # no refresh of the index written back: a check that changes nothing leaves the
        # worktree's stamp as it was (see stamp), so the next check can be skipped
        "--no-optional-locks",
        "status",
        "--porcelain=v2",
        "--branch",
        "--untracked-files=all",
        "--no-renames",
        # a submodule's commit, not its files: finding those means running git in the
        # submodule's git directory, which a worker can swap (see hero.git.ops.confined)
        "--ignore-submodules=dirty",
    )
    head = ""
    changed: set[str] = set()
    untracked: set[str] = set()
    for line in out.splitlines():
        kind = line[:1]
        if line.startswith("# branch.oid "):
            head = line[len("# branch.oid ") :].strip()
        elif kind in ("1", "u"):
            path = line.split(" ", 8 if kind == "1" else 10)[-1]
            changed.add(unquote(path))
        elif kind == "2":  # a rename despite --no-renames: both of its paths changed
            fields = line.split(" ", 9)[-1]
            new, _, old = fields.partition("\t")
            changed.update({unquote(new), unquote(old)})
        elif kind == "?":
            untracked.add(unquote(line[2:]))
    return head, changed, untracked


@functools.lru_cache(maxsize=256)
def _commits_changed(worktree: Path, base: str, head: str) -> frozenset[str]:
    """The paths that differ between two commits' trees (a pure function of the two: cached,
    so a check between two commits of the worker's costs the status alone)."""
    out = git(worktree, *_GIT_FIXED, "diff", "--name-only", "--no-renames", base, head, "--")
    return frozenset(unquote(line) for line in out.splitlines() if line)


def _differs_from(worktree: Path, base: str, paths: list[str]) -> set[str]:
    """Which of ``paths`` (tracked) differ between ``base`` and the worktree."""
    found: set[str] = set()
    for i in range(0, len(paths), _RESTORE_BATCH):
        out = git(
            worktree,
            *_GIT_FIXED,
            "--literal-pathspecs",
            "diff",
            "--name-only",
            "--no-renames",
            base,
            "--",
            *paths[i : i + _RESTORE_BATCH],
        )
        found.update(unquote(line) for line in out.splitlines() if line)
    return found


def _restore(worktree: Path, base: str, paths: list[str]) -> list[tuple[str, str]]:
    """Make each path's index entry and file what they are at ``base`` (gone if absent
    there); the paths that could not be, with git's reason."""
    failed: list[tuple[str, str]] = []
    for i in range(0, len(paths), _RESTORE_BATCH):
        batch = paths[i : i + _RESTORE_BATCH]
        try:
            _restore_call(worktree, base, batch)
        except GitError:
            for path in batch:  # one path git refuses must not keep the others
                try:
                    _restore_call(worktree, base, [path])
                except GitError as exc:
                    failed.append((path, str(exc).rsplit("failed: ", 1)[-1]))
    return failed


def _restore_call(worktree: Path, base: str, paths: list[str]) -> None:
    git(
        worktree,
        "--literal-pathspecs",
        "restore",
        "--quiet",
        f"--source={base}",
        "--staged",
        "--worktree",
        "--",
        *paths,
    )


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _remove(worktree: Path, path: str) -> str:
    """Delete the new file (or directory: a repository cloned into the worktree) at
    ``path`` without following a symlink, then the directories it leaves empty; the
    problem, or ""."""
    fds = [os.open(worktree, _DIR_FLAGS)]
    parts = path.split("/")
    try:
        for part in parts[:-1]:
            fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
        except FileNotFoundError:
            return ""  # gone already
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=fds[-1])  # never follows a symlink inside
        else:
            os.unlink(name, dir_fd=fds[-1])
        for depth in range(len(parts) - 1, 0, -1):  # the directories it leaves empty
            try:
                os.rmdir(parts[depth - 1], dir_fd=fds[depth - 1])
            except OSError:
                break
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        for fd in fds:
            os.close(fd)
    return ""


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def unquote(path: str) -> str:
    """A path as git prints it (C-quoted when it holds special or non-ASCII bytes) as the
    name the file system has (bytes that are not UTF-8 as surrogate escapes)."""
    if not (path.startswith('"') and path.endswith('"') and len(path) >= 2):
        return path
    body = path[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            octal = body[i + 1 : i + 4]
            if len(octal) == 3 and all(d in "01234567" for d in octal):
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
        out.extend(c.encode("utf-8", "surrogateescape"))
        i += 1
    return os.fsdecode(bytes(out))
