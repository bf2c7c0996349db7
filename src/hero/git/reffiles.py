"""A branch's tip read from the repository's files, without starting git.

The daemon asks "where does ``refs/heads/<branch>`` point" about twenty times per story;
each answer cost a ``git rev-parse`` process (a fork of a large, many-threaded interpreter
plus git's own start-up). ``ref_from_files`` answers the common case from the files git
itself keeps, the loose ref first and then ``packed-refs`` (the order that is safe against
a concurrent ``git pack-refs``, which writes ``packed-refs`` before it deletes the loose
file), and returns None whenever the case is not the plain one: a ``.git`` that is a file,
the reftable format, a symbolic or symlinked ref, content that is not one object id, a
name git might read differently. The caller then asks git, so an answer given here is
always the one ``git rev-parse --verify --quiet refs/heads/<branch>`` gives.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

_OID = re.compile(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?")
#: Branch names read from files: plain components only (no "..", no leading dot, no
#: ".lock" end, no characters git refuses or treats specially); anything else goes to git.
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_MAX_PACKED = 16 << 20  # a packed-refs over this is left to git


def _plain_branch(branch: str) -> bool:
    parts = branch.split("/")
    return all(
        _PLAIN.fullmatch(p) and ".." not in p and not p.endswith((".lock", ".")) for p in parts
    )


def _read_nofollow(path: Path, limit: int) -> bytes | None:
    """The file's bytes (b"" when it does not exist), or None when it is not a regular
    file of 1 to ``limit`` bytes or cannot be read (a symlink included)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        return b"" if exc.errno == errno.ENOTDIR else None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000 or not 0 < st.st_size <= limit:
            return None
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)


def ref_from_files(repo: Path, branch: str) -> str | None:
    """The object id ``refs/heads/<branch>`` of the repository at ``repo`` holds, "" when
    there is no such branch, or None when only git can tell (see the module's note)."""
    gitdir = repo / ".git"
    if not _plain_branch(branch) or not gitdir.is_dir() or gitdir.is_symlink():
        return None
    if (gitdir / "reftable").exists():
        return None
    # every directory on the way must be a real one (a symlinked refs/heads/hero is git's
    # business), so walk it without following links
    parent = gitdir / "refs" / "heads"
    for part in ["", *branch.split("/")[:-1]]:
        parent = parent / part if part else parent
        try:
            st = parent.lstat()
        except FileNotFoundError:
            break
        except OSError:
            return None
        if st.st_mode & 0o170000 != 0o040000:
            return None
    loose = _read_nofollow(gitdir / "refs" / "heads" / branch, 4096)
    if loose is None:
        return None
    if loose:
        oid = loose.rstrip(b"\n")
        return oid.decode() if _OID.fullmatch(oid) else None
    packed = _read_nofollow(gitdir / "packed-refs", _MAX_PACKED)
    if packed is None:
        return None
    want = b" refs/heads/" + branch.encode()
    for line in packed.splitlines():
        if line.endswith(want) and len(line) in (40 + len(want), 64 + len(want)):
            oid = line[: len(line) - len(want)]
            return oid.decode() if _OID.fullmatch(oid) else None
    return ""
