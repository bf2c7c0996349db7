"""A repository's refs in bulk: read in one call, changed in one transaction.

A worker can make refs by the thousand with one command (``git update-ref --stdin``). hero
reads every ref with one ``git for-each-ref`` (``read_refs``) and puts refs back or deletes
them with one ``git update-ref --no-deref --stdin -z`` transaction (``update_refs``). When git
refuses the transaction (a name it will not take, a directory/file clash, a loose ref file it
cannot read), the changes are split in halves until the refused ones stand alone: the others
still apply, and each refused one is reported with git's reason (at most ``LISTED`` of a
kind, then how many more).

Deleting tens of thousands of loose refs through git takes a minute (one lock file, one
rename and one directory scan per ref). In a story's own repository, where nothing of the
worker runs at a phase's end, ``drop_fast`` removes the worker's refs itself: each loose
ref file (or link: never followed) is unlinked through directory descriptors opened without
following links, so nothing outside ``.git/refs`` and ``.git/logs`` is touched whatever the
worker made there; ``packed-refs`` is written anew under ``packed-refs.lock``, the lock file
git itself takes, renamed into place as git does. Never in the user's repository.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hero.git.ops import GitError, git

#: refs of a kind listed by name in a report; the rest are counted.
LISTED = 20
#: Below this many deletions, git's own transaction is quick enough.
FAST_DROP_MIN = 64
#: The most transactions one ``update_refs`` runs while it splits refused changes apart.
MAX_TRANSACTIONS = 200
#: The most of ``packed-refs`` ``drop_fast`` reads (a bigger file is left to git).
PACKED_MAX_BYTES = 256 << 20
_SYMREF = "ref: "


@dataclass(frozen=True)
class Ref:
    """One ref as ``for-each-ref`` shows it."""

    name: str
    oid: str  # what it points at ("" for a symbolic ref whose target is missing)
    symref: str = ""  # the target of a symbolic ref

    @property
    def value(self) -> str:
        """The sha, or ``ref: <target>`` for a symbolic ref."""
        return f"{_SYMREF}{self.symref}" if self.symref else self.oid


def read_refs(repo: Path, prefix: str = "") -> dict[str, Ref]:
    """Every ref of ``repo`` (under ``prefix``), in one ``git for-each-ref``."""
    fmt = "%(refname)%00%(objectname)%00%(symref)%00"
    args = ["for-each-ref", f"--format={fmt}"] + ([prefix] if prefix else [])
    out = git(repo, *args)
    refs: dict[str, Ref] = {}
    for line in out.split("\0\n"):
        if not line:
            continue
        name, oid, symref = (line.split("\0") + ["", ""])[:3]
        refs[name] = Ref(name, oid, symref)
    return refs


@dataclass(frozen=True)
class Change:
    """Set ``name`` to ``value`` (a sha, or ``ref: <target>``), or delete it (``value`` "")."""

    name: str
    value: str = ""


@dataclass
class Outcome:
    """What ``update_refs`` did: the names it changed, those git refused and why."""

    done: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    transactions: int = 0

    def problems(self) -> list[str]:
        if not self.refused:
            return []
        names = sorted(self.refused)
        listed = [f"{n} ({_reason(self.refused[n])})" for n in names[:LISTED]]
        more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
        return [f"git refused to change {len(names)} ref(s): " + "; ".join(listed) + more]


def capped(items: Sequence[str], what: str) -> str:
    """``items`` for a report: the first ``LISTED`` by name, then how many more."""
    shown = ", ".join(items[:LISTED])
    more = f" and {len(items) - LISTED} more" if len(items) > LISTED else ""
    return f"{len(items)} {what}: {shown}{more}"


def update_refs(repo: Path, changes: Iterable[Change]) -> Outcome:
    """Apply ``changes`` (no ref dereferenced) in one transaction; what git refuses is split
    off (bisected) so that the others still apply. Symbolic refs are set one by one (git's
    transaction cannot set them here)."""
    outcome = Outcome()
    plain: list[Change] = []
    for change in changes:
        if not _name_ok(change.name):
            outcome.refused[change.name] = "not a ref name hero changes"
        elif change.value.startswith(_SYMREF):
            target = change.value[len(_SYMREF) :]
            try:
                git(repo, "symbolic-ref", change.name, target)
                outcome.done.append(change.name)
            except GitError as exc:
                outcome.refused[change.name] = str(exc)
        else:
            plain.append(change)
    _bisect(repo, plain, outcome)
    return outcome


def _bisect(repo: Path, changes: list[Change], outcome: Outcome) -> None:
    pending = [changes] if changes else []
    while pending:
        part = pending.pop()
        if outcome.transactions >= MAX_TRANSACTIONS:
            for c in part:
                outcome.refused[c.name] = "not tried: too many of its neighbours were refused"
            continue
        outcome.transactions += 1
        try:
            _transaction(repo, part)
        except GitError as exc:
            if len(part) == 1:
                outcome.refused[part[0].name] = str(exc)
            else:
                half = len(part) // 2
                pending += [part[half:], part[:half]]
            continue
        outcome.done += [c.name for c in part]


def _transaction(repo: Path, changes: Sequence[Change]) -> None:
    lines: list[bytes] = []
    for c in changes:
        name = c.name.encode("utf-8", "surrogateescape")
        if c.value:
            lines.append(b"update " + name + b"\0" + c.value.encode("ascii") + b"\0\0")
        else:
            lines.append(b"delete " + name + b"\0\0")
    git(repo, "update-ref", "--no-deref", "--stdin", "-z", input=b"".join(lines))


def _reason(text: str) -> str:
    """git's own words, from a GitError's message, on one line."""
    said = text.rsplit("failed: ", 1)[-1]
    return " ".join(said.split())[:200]


def _name_ok(name: str) -> bool:
    parts = name.split("/")
    return (
        len(parts) >= 2
        and parts[0] == "refs"
        and all(p and p not in (".", "..") and "\0" not in p for p in parts)
    )


# -- the fast way, in a story's own repository ----------------------------------------------


def drop_fast(gitdir: Path, names: Iterable[str], keep: Iterable[str] | None = None) -> None:
    """Remove the refs ``names`` of the repository whose git directory is ``gitdir`` (a
    story's own, with nothing of the worker running) without git: their loose files and
    reflogs, and their lines of ``packed-refs``. Nothing is followed: a link where a ref,
    a reflog or a directory of them should be is removed itself, and a ``.git/refs`` that is
    no directory is left alone.

    ``keep``: every other ref of the repository. When they are fewer than ``names``, the
    ``refs`` and ``logs/refs`` directories are made anew instead, holding the loose files
    of ``keep`` moved over (one rename each), and the old ones are renamed aside and deleted
    in the background: unlinking tens of thousands of files one by one takes seconds to
    minutes on a busy disk. The caller reads the refs again to see what is left or lost
    (and leaves that to ``update_refs``)."""
    wanted = sorted({n for n in names if _name_ok(n)})
    if not wanted or os.path.isdir(gitdir / "reftable"):
        return
    _sweep(gitdir)
    kept = None if keep is None else sorted({n for n in keep if _name_ok(n)} - set(wanted))
    for root in ("refs", "logs/refs"):
        if kept is not None and len(kept) < len(wanted):
            _rebuild(gitdir, root, [n.split("/")[1:] for n in kept])
        else:
            _unlink_under(gitdir, root, [n.split("/")[1:] for n in wanted])
    _drop_packed(gitdir, set(wanted))


#: The name of a directory of refs renamed aside, in the git directory, until it is deleted.
_ASIDE = "hero-dropped-"


def _sweep(gitdir: Path) -> None:
    """Delete, in the background, what earlier drops renamed aside (links not followed)."""
    try:
        aside = [gitdir / e for e in os.listdir(gitdir) if e.startswith(_ASIDE)]
    except OSError:
        return
    for path in aside:
        if os.path.isdir(path) and not os.path.islink(path):
            _delete_aside(path)


def _delete_aside(path: Path) -> None:
    """``path`` deleted in a thread of its own (``shutil.rmtree`` follows no link)."""
    threading.Thread(
        target=shutil.rmtree, args=(path,), kwargs={"ignore_errors": True}, daemon=True
    ).start()


def _rebuild(gitdir: Path, root: str, keep: list[list[str]]) -> None:
    """``root`` made anew with only the loose files of ``keep`` (moved, never followed); the
    old one renamed aside and deleted in the background. Left alone if ``root`` is no
    directory (a link is never renamed or followed)."""
    try:
        top = _open_dir(None, str(gitdir))
    except OSError:
        return
    *parents, leaf = root.split("/")
    fds: list[int] = [top]
    try:
        parent = top
        for part in parents:
            parent = _open_dir(parent, part)
            fds.append(parent)
        old = _open_dir(parent, leaf)  # fails on a link or a file: left alone
        os.close(old)
        aside = f"{_ASIDE}{leaf}-{os.getpid()}-{time.monotonic_ns()}"
        os.rename(leaf, aside, src_dir_fd=parent, dst_dir_fd=top)
        try:
            os.mkdir(leaf, dir_fd=parent)
        except OSError:  # never leave the repository without its refs
            os.rename(aside, leaf, src_dir_fd=top, dst_dir_fd=parent)
            raise
        new = _open_dir(parent, leaf)
        fds.append(new)
        if root == "refs":  # git's own layout
            for sub in ("heads", "tags"):
                os.mkdir(sub, dir_fd=new)
        _move_kept(_open_dir(top, aside), new, keep)
    except OSError:
        return
    finally:
        for fd in fds:
            os.close(fd)
    _delete_aside(gitdir / aside)


def _move_kept(old: int, new: int, keep: list[list[str]]) -> None:
    """Each of ``keep`` that is a regular file under ``old`` renamed to the same place
    under ``new`` (directories made as needed); nothing followed. Closes ``old``."""
    olds: dict[tuple[str, ...], int] = {(): old}
    news: dict[tuple[str, ...], int] = {(): new}
    try:
        for parts in keep:
            here: tuple[str, ...] = ()
            for part in parts[:-1]:
                if _descend(olds, here, part, unlink_link=False) is None:
                    break
                if (*here, part) not in news:
                    try:
                        os.mkdir(part, dir_fd=news[here])
                    except FileExistsError:
                        pass
                    news[(*here, part)] = _open_dir(news[here], part)
                here += (part,)
            else:
                try:
                    if stat.S_ISREG(os.lstat(parts[-1], dir_fd=olds[here]).st_mode):
                        os.rename(
                            parts[-1], parts[-1], src_dir_fd=olds[here], dst_dir_fd=news[here]
                        )
                except OSError:
                    pass  # not loose (packed only), or in the way: the caller checks
    finally:
        for fd in olds.values():
            os.close(fd)
        for key, fd in news.items():
            if key:
                os.close(fd)


def _open_dir(at: int | None, name: str) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, dir_fd=at)


def _unlink_under(gitdir: Path, root: str, paths: list[list[str]]) -> None:
    """Unlink each ``root/<path>`` (a file or a link) through descriptors opened without
    following links; a link met on the way below ``root`` is unlinked itself (a ``root``
    that is a link is left alone, nothing removed). Directories this left empty, two levels
    below ``root`` and deeper, are removed (``refs/heads`` itself stays)."""
    try:
        top = _open_dir(None, str(gitdir))
    except OSError:
        return
    fds: dict[tuple[str, ...], int] = {(): top}
    try:
        base: tuple[str, ...] = ()
        for part in root.split("/"):
            if _descend(fds, base, part, unlink_link=False) is None:
                return
            base += (part,)
        missing: set[tuple[str, ...]] = set()
        for parts in paths:
            here = base
            for part in parts[:-1]:
                if _descend(fds, here, part, missing=missing) is None:
                    break
                here += (part,)
            else:
                _unlink_leaf(fds[here], parts[-1])
        for d in sorted((k for k in fds if len(k) >= len(base) + 2), key=len, reverse=True):
            try:
                os.rmdir(d[-1], dir_fd=fds[d[:-1]])
            except OSError:
                pass  # not empty: other refs live there
    finally:
        for fd in fds.values():
            os.close(fd)


def _unlink_leaf(parent: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=parent)  # a link is removed, not followed
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        pass  # none, or a directory of refs (git sees no ref there)


def _descend(
    fds: dict[tuple[str, ...], int],
    here: tuple[str, ...],
    part: str,
    *,
    unlink_link: bool = True,
    missing: set[tuple[str, ...]] | None = None,
) -> int | None:
    """The directory ``here/part`` (opened once, cached; one found missing is remembered in
    ``missing``); None if it is missing, a file or a link (which is unlinked, never
    followed, when ``unlink_link``)."""
    key = (*here, part)
    if key in fds:
        return fds[key]
    if missing is not None and key in missing:
        return None
    parent = fds[here]
    try:
        fd = _open_dir(parent, part)
    except OSError as exc:
        if missing is not None:
            missing.add(key)
        if unlink_link and exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                if stat.S_ISLNK(os.lstat(part, dir_fd=parent).st_mode):
                    os.unlink(part, dir_fd=parent)
            except OSError:
                pass
        return None
    fds[key] = fd
    return fd


def _drop_packed(gitdir: Path, names: set[str]) -> None:
    """``packed-refs`` without the lines of ``names``, written under ``packed-refs.lock``
    (left alone if git holds that lock, or the file is no regular file or too big)."""
    path = gitdir / "packed-refs"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_size > PACKED_MAX_BYTES:
        return
    lock = gitdir / "packed-refs.lock"
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return
    try:
        with open(path, "rb") as fh:
            data = fh.read(PACKED_MAX_BYTES + 1)
        kept: list[bytes] = []
        skipping = False
        dropped = 0
        for line in data.split(b"\n"):
            if not line:
                continue
            if line.startswith(b"^"):
                if not skipping:
                    kept.append(line)
                continue
            _, _, name = line.partition(b" ")
            skipping = not line.startswith(b"#") and name.decode("utf-8", "replace") in names
            if skipping:
                dropped += 1
            else:
                kept.append(line)
        if not dropped:
            os.close(fd)
            fd = -1
            os.unlink(lock)
            return
        with os.fdopen(fd, "wb") as out:
            fd = -1
            out.write(b"".join(k + b"\n" for k in kept))
        os.replace(lock, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        if os.path.lexists(lock):
            os.unlink(lock)
        raise
