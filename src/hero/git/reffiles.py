"""A branch's tip, and the branch HEAD names, read from the repository's files without
starting git.

The daemon asks "where does ``refs/heads/<branch>`` point" and "which branch is checked
out" many times per story; each answer cost a git process (and, in a story's repository,
a sandbox around it). ``ref_from_files`` and ``head_from_files`` answer the plain case from
the files git itself keeps, the loose ref first and then ``packed-refs`` (the order that is
safe against a concurrent ``git pack-refs``, which writes ``packed-refs`` before it deletes
the loose file). Whenever the case is not plain they return None and the caller asks git,
so an answer given here is always the one git gives.

A story's repository holds whatever its worker wrote into ``.git``, so nothing read here
trusts it: every path below the repository is opened one component at a time with
``O_NOFOLLOW`` relative to its parent's descriptor (a symlink anywhere, swapped in at any
moment, is never followed: the answer is None), files are opened ``O_NONBLOCK`` (a FIFO
cannot hang the reader) and read only when they are regular and small, and every byte of
a ref, ``HEAD`` and ``packed-refs`` must have the exact form git writes, else None. Not
plain either: a ``.git`` that is a file (a linked worktree), a ``commondir`` or
``reftable`` entry, a config that names an object format or a ref storage (git then reads
ids or refs differently), a branch name git might read differently, ``packed-refs`` lines
out of order or repeated.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from hero.errors import HeroError

_OID = re.compile(rb"[0-9a-f]{40}")
#: Branch names read from files: plain components only (no "..", no leading dot, no
#: ".lock" end, no characters git refuses or treats specially); anything else goes to git.
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_MAX_REF = 4096
_MAX_CONFIG = 1 << 20
_MAX_PACKED = 16 << 20  # a packed-refs over this is left to git
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_ABSENT = (errno.ENOENT, errno.ENOTDIR)


class _NotPlain(HeroError):
    """The files are not in the plain form: git must answer."""


def plain_branch(branch: str) -> bool:
    """``branch`` is a name this module reads (every component plain)."""
    return all(
        _PLAIN.fullmatch(p) and ".." not in p and not p.endswith((".lock", "."))
        for p in branch.split("/")
    )


def _open_dir(parent: int, name: str) -> int | None:
    """``name`` under the directory ``parent``, opened without following a link: its
    descriptor, None when there is no such directory; _NotPlain when it is a link or
    cannot be opened."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise _NotPlain from None  # ELOOP/ENOTDIR: a link or a file where a directory was


def _walk(top: int, parts: list[str]) -> int | None:
    """The directory ``top/parts...``, every step without following a link (the caller
    closes the descriptor returned), or None when one of them does not exist."""
    fd = os.dup(top)
    for part in parts:
        try:
            nxt = _open_dir(fd, part)
        finally:
            os.close(fd)
        if nxt is None:
            return None
        fd = nxt
    return fd


def _read(parent: int, name: str, limit: int, *, empty_ok: bool = False) -> bytes | None:
    """The bytes of the regular file ``name`` under ``parent`` (opened without following a
    link, without blocking), None when it does not exist; _NotPlain when it is anything
    but a regular file of at most ``limit`` bytes (empty too, unless ``empty_ok``)."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise _NotPlain from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise _NotPlain
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        raise _NotPlain from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit or (not data and not empty_ok):
        raise _NotPlain
    return data


def _exists(top: int, path: str) -> bool:
    """Whether anything is at ``top/path`` (a link counts: _NotPlain)."""
    *parents, last = path.split("/")
    fd = _walk(top, parents)
    if fd is None:
        return False
    try:
        os.stat(last, dir_fd=fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return False
        raise _NotPlain from None
    finally:
        os.close(fd)
    return True


def _open_gitdir(repo: Path) -> int:
    """The descriptor of ``repo/.git`` once it is known to be a plain repository's own git
    directory (see the module's note); _NotPlain otherwise."""
    try:
        top = os.open(repo, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise _NotPlain from None
    try:
        gitdir = _open_dir(top, ".git")
    finally:
        os.close(top)
    if gitdir is None:
        raise _NotPlain
    try:
        config = _read(gitdir, "config", _MAX_CONFIG)
        if config is None:
            raise _NotPlain
        lowered = config.lower()
        if b"objectformat" in lowered or b"refstorage" in lowered:
            raise _NotPlain
        if _exists(gitdir, "reftable") or _exists(gitdir, "commondir"):
            raise _NotPlain
    except BaseException:
        os.close(gitdir)
        raise
    return gitdir


def _packed(gitdir: int) -> dict[bytes, bytes]:
    """The refs ``packed-refs`` holds (refname -> object id; none when there is no such
    file), _NotPlain unless every line has the form git writes: an optional ``# pack-refs
    with:`` header, then ``<oid> <refname>`` lines in strictly increasing order, each
    followed by at most one ``^<oid>`` (peeled) line."""
    data = _read(gitdir, "packed-refs", _MAX_PACKED, empty_ok=True)
    if not data:
        return {}
    if not data.endswith(b"\n"):
        raise _NotPlain
    lines = data[:-1].split(b"\n")
    if lines[0].startswith(b"# pack-refs with:"):
        lines = lines[1:]
    refs: dict[bytes, bytes] = {}
    last: bytes | None = None
    peeled_ok = False
    for line in lines:
        if line.startswith(b"^"):
            if not peeled_ok or not _OID.fullmatch(line[1:]):
                raise _NotPlain
            peeled_ok = False
            continue
        oid, sep, name = line.partition(b" ")
        if not sep or not _OID.fullmatch(oid) or not name.startswith(b"refs/"):
            raise _NotPlain
        if (last is not None and name <= last) or not all(32 < c < 127 for c in name):
            raise _NotPlain
        refs[name] = oid
        last, peeled_ok = name, True
    return refs


def _loose(gitdir: int, refname: str) -> str | None:
    """The object id of the loose ref ``refname``, None when there is no such file."""
    *parents, last = refname.split("/")
    fd = _walk(gitdir, parents)
    if fd is None:
        return None
    try:
        return _loose_at(fd, last)
    finally:
        os.close(fd)


def ref_from_files(repo: Path, branch: str) -> str | None:
    """The object id ``refs/heads/<branch>`` of the repository at ``repo`` holds, "" when
    there is no such branch, or None when only git can tell (see the module's note)."""
    if not plain_branch(branch):
        return None
    try:
        gitdir = _open_gitdir(repo)
        try:
            loose = _loose(gitdir, f"refs/heads/{branch}")
            if loose is not None:
                return loose
            return _packed(gitdir).get(f"refs/heads/{branch}".encode(), b"").decode()
        finally:
            os.close(gitdir)
    except _NotPlain:
        return None


def head_from_files(worktree: Path) -> str | None:
    """What ``git symbolic-ref --quiet --short HEAD`` prints in ``worktree``: the branch
    ``HEAD`` names, "" when ``HEAD`` is detached, None when only git can tell (the module's
    note; and a branch whose short name another ref would take, such as a tag of that name,
    which git shortens differently)."""
    try:
        gitdir = _open_gitdir(worktree)
        try:
            data = _read(gitdir, "HEAD", _MAX_REF)
            if data is None or not data.endswith(b"\n"):
                return None
            body = data[:-1]
            if _OID.fullmatch(body):
                return ""
            if not body.startswith(b"ref: refs/heads/"):
                return None
            try:
                branch = body[len(b"ref: refs/heads/") :].decode("ascii")
            except UnicodeDecodeError:
                return None
            if not plain_branch(branch):
                return None
            # git shortens refs/heads/<b> to <b> unless <b>, refs/<b> or refs/tags/<b> is a
            # ref too; anything at those paths, or packed under those names, goes to git
            if any(_exists(gitdir, p) for p in (branch, f"refs/{branch}", f"refs/tags/{branch}")):
                return None
            packed = _packed(gitdir)
            if f"refs/{branch}".encode() in packed or f"refs/tags/{branch}".encode() in packed:
                return None
            return branch
        finally:
            os.close(gitdir)
    except _NotPlain:
        return None


_MAX_LOOSE = 100_000  # more loose refs (or directory entries) than this are left to git
_MAX_DEPTH = 32  # refs nested deeper than this are left to git


def _walk_loose(fd: int, prefix: str, found: dict[str, str], depth: int = 0) -> None:
    """Every loose ref under the directory ``fd`` (named ``prefix``) into ``found``."""
    if depth > _MAX_DEPTH:
        raise _NotPlain
    names: list[str] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            names.append(entry.name)
            if len(names) > _MAX_LOOSE:
                raise _NotPlain
    for name in sorted(names):
        if not _PLAIN.fullmatch(name) or ".." in name or name.endswith((".lock", ".")):
            raise _NotPlain
        if len(found) >= _MAX_LOOSE:
            raise _NotPlain
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            sub = _open_dir(fd, name)
            if sub is None:  # gone meanwhile: git is at work there
                raise _NotPlain
            try:
                _walk_loose(sub, f"{prefix}{name}/", found, depth + 1)
            finally:
                os.close(sub)
        else:
            oid = _loose_at(fd, name)
            if oid is None:
                raise _NotPlain
            found[f"{prefix}{name}"] = oid


def _loose_at(fd: int, name: str) -> str | None:
    data = _read(fd, name, _MAX_REF)
    if data is None:
        return None
    oid = data[:-1] if data.endswith(b"\n") else data
    if not _OID.fullmatch(oid):
        raise _NotPlain  # a symbolic ref, a 64-digit id, trailing words: git's business
    return oid.decode()


def refs_from_files(repo: Path) -> dict[str, str] | None:
    """Every ref under ``refs/`` of the repository at ``repo`` (name -> object id) as its
    files hold them, loose over packed; None when only git can tell (the module's note, and
    any symbolic ref or name that is not plain). Unlike ``git for-each-ref`` this does not
    look for the objects: a ref whose object is missing is listed (git leaves it out), so
    an answer here says what the refs hold, not that git would list them all."""
    try:
        gitdir = _open_gitdir(repo)
        try:
            packed = _packed(gitdir)
            found: dict[str, str] = {}
            refs = _open_dir(gitdir, "refs")
            if refs is not None:
                try:
                    _walk_loose(refs, "refs/", found)
                except OSError:
                    raise _NotPlain from None
                finally:
                    os.close(refs)
        finally:
            os.close(gitdir)
    except _NotPlain:
        return None
    merged = {name.decode("ascii"): oid.decode() for name, oid in packed.items()}
    merged.update(found)
    return merged
