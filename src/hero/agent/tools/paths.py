"""Confinement: every path a tool touches resolves inside the worktree; the one guarded write.

The file tools never check a path and then open it by name (a symlink swapped in between
would be followed). They open it in one walk from the worktree's directory descriptor, one
component at a time, each ``os.open(name, ... | O_NOFOLLOW, dir_fd=parent)``: a symlink is
never followed by the kernel; hero reads it and, when its target stays inside the worktree,
walks the target the same way. A regular file with more than one hard link may be the same
file as one outside the worktree, so the file tools refuse it (git never makes hard links in
a worktree).

The search tools hand paths to git and ripgrep, which open them by name. What those report
is checked afterwards with :class:`TreeWalk`: each reported path is walked the same way, and
a path whose directories changed while the search ran is searched again through the
descriptor the walk opened (see ``search``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hero.agent.tools.context import ToolContext, ToolError, os_reason
from hero.agent.tools.scope import rules_of
from hero.errors import HeroError

#: Symlinks followed in one path before it counts as a loop (Linux's own limit).
MAX_SYMLINKS = 40

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = os.O_NOFOLLOW
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC
# O_NONBLOCK: opening a FIFO must not hang the tool; it is refused once fstat sees it.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC
_WRITE_FLAGS = os.O_RDWR | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC
# What open(..., O_NOFOLLOW) says about a symlink: ELOOP, or ENOTDIR with O_DIRECTORY on
# some kernels, EMLINK on the BSDs. Which it was is asked of readlink.
_MAYBE_SYMLINK = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EMLINK})

#: Flags of the walk: a directory (never through a symlink), a file to read (a FIFO never
#: blocks the open).
DIR_FLAGS = _DIR_FLAGS
READ_FLAGS = _READ_FLAGS

#: read: a regular file; write: a regular file, created if missing; list: a directory;
#: search: whatever is there (a directory, a file, or something else for the caller to refuse).
Purpose = Literal["read", "write", "list", "search"]
_VERB = {"read": "read", "write": "write", "list": "list", "search": "search"}


def resolve_path(ctx: ToolContext, rel_path: str) -> Path:
    """Absolute, symlink-resolved path inside ``ctx.root``; ToolError if it escapes.

    For the search tools, which hand the path to git and ripgrep; the file tools open
    through :func:`open_in_worktree` instead."""
    if "\x00" in rel_path:
        raise ToolError(f"path {rel_path!r} contains a NUL byte")
    raw = Path(rel_path.strip() or ".")
    candidate = raw if raw.is_absolute() else ctx.root / raw
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops
        raise ToolError(f"path '{rel_path}' cannot be resolved: {exc}") from None
    if resolved != ctx.root and ctx.root not in resolved.parents:
        raise ToolError(f"path '{rel_path}' is outside the worktree")
    return resolved


def rel(ctx: ToolContext, path: Path) -> str:
    """``path`` (inside the worktree) as a root-relative posix path; "." for the root."""
    rel_path = path.relative_to(ctx.root).as_posix()
    return rel_path if rel_path else "."


def _has_git_part(parts: tuple[str, ...] | list[str]) -> bool:
    return any(part.lower() == ".git" for part in parts)


@dataclass
class Opened:
    """A file or directory opened inside the worktree: its descriptor (the caller closes
    it), its symlink-resolved path, and whether this open created it."""

    fd: int
    path: Path
    created: bool = False


def _outside(rel_path: str) -> ToolError:
    return ToolError(f"path '{rel_path}' is outside the worktree")


def _hard_link(rel_path: str) -> ToolError:
    return ToolError(
        f"path '{rel_path}' is a hard link; hero's file tools do not follow links out of "
        "the worktree"
    )


def is_hard_linked(st: os.stat_result) -> bool:
    """A regular file with more than one hard link: the file tools refuse it, the search
    tools leave it out."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink > 1


#: The error of the file tools for such a file (read_file, edit_file, a grep of one file).
hard_link_error = _hard_link


def _not_found(rel_path: str, purpose: Purpose) -> ToolError:
    if purpose in ("list", "search"):
        return ToolError(f"path not found: '{rel_path}'")
    return ToolError(f"file not found: '{rel_path}' (use find or ls to locate files)")


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part and part != "."]


def _parts_inside(ctx: ToolContext, absolute: str, rel_path: str) -> list[str]:
    """The root-relative components of an absolute path (the model's, or a symlink's
    target); ToolError when it is outside the worktree."""
    path = Path(absolute)
    if ".." not in path.parts and (path == ctx.root or ctx.root in path.parents):
        return _split(path.relative_to(ctx.root).as_posix())
    # Another spelling of the worktree (a symlinked ancestor, ".."): resolve it, then walk
    # the remainder from the worktree's descriptor like any other path.
    real = Path(os.path.realpath(path))
    if real == ctx.root or ctx.root in real.parents:
        return _split(real.relative_to(ctx.root).as_posix())
    raise _outside(rel_path)


def _symlink_target(exc: OSError, name: str, dir_fd: int) -> str | None:
    """The target of ``name`` when the open failed because it is a symlink, else None."""
    if exc.errno not in _MAYBE_SYMLINK:
        return None
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def open_in_worktree(ctx: ToolContext, rel_path: str, purpose: Purpose) -> Opened:
    """Open ``rel_path`` inside the worktree without following a symlink out of it.

    ``read``: an existing regular file, read-only. ``list``: an existing directory.
    ``search``: an existing entry of any kind, read-only (a FIFO does not block the open).
    ``write``: a regular file opened read-write, created (with its missing parent
    directories) when absent, never inside .git. A regular file with several hard links is
    refused for ``read`` and ``write``. Every problem is a ToolError for the model."""
    if "\x00" in rel_path:
        raise ToolError(f"path {rel_path!r} contains a NUL byte")
    text = rel_path.strip() or "."
    todo = deque(_parts_inside(ctx, text, rel_path) if text.startswith("/") else _split(text))
    verb = _VERB[purpose]
    try:
        root_fd = os.open(ctx.root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except OSError as exc:
        raise ToolError(f"cannot {verb} '{rel_path}': {os_reason(exc)}") from None
    fds = [root_fd]  # the directories walked so far; fds[-1] holds the next component
    names: list[str] = []  # their names, root-relative
    missing: list[str] = []  # components past the last existing directory
    links = 0
    creating = False  # walking again to create the missing directories
    try:
        while True:
            if not todo:  # the path names a directory: the root, or one ending in ".."
                if missing:
                    raise _not_found(rel_path, purpose)
                if purpose not in ("list", "search"):
                    if purpose == "write":
                        raise ToolError(f"path '{rel_path}' is a directory")
                    raise ToolError(f"'{rel_path}' is a directory; use ls to list it")
                return Opened(fds.pop(), ctx.root.joinpath(*names))
            name = todo.popleft()
            if name == "..":
                if missing:
                    missing.pop()
                elif names:
                    names.pop()
                    os.close(fds.pop())
                else:
                    raise _outside(rel_path)
                continue
            if missing:  # under a directory that does not exist: nothing to open yet
                missing.append(name)
                if todo:
                    continue
                if purpose != "write":
                    raise _not_found(rel_path, purpose)
                if _has_git_part([*names, *missing]):
                    raise ToolError(
                        f"path '{rel_path}' is inside .git; writing there is not allowed"
                    )
                _check_rules(ctx, [*names, *missing], rel_path)
                todo.extend(missing)  # walk them again, creating each directory
                missing.clear()
                creating = True
                continue
            dir_fd = fds[-1]
            if todo:  # an intermediate component: a directory
                try:
                    fds.append(os.open(name, _DIR_FLAGS, dir_fd=dir_fd))
                except OSError as exc:
                    target = _symlink_target(exc, name, dir_fd)
                    if target is not None:
                        links = _follow(ctx, rel_path, target, todo, fds, names, links, creating)
                    elif creating and exc.errno == errno.ENOENT:
                        fds.append(_mkdir(name, dir_fd, rel_path))
                        names.append(name)
                    elif exc.errno in (errno.ENOENT, errno.ENOTDIR) and not creating:
                        missing.append(name)
                    else:
                        raise ToolError(f"cannot {verb} '{rel_path}': {os_reason(exc)}") from None
                    continue
                names.append(name)
                continue
            # The last component.
            if purpose == "write" and _has_git_part([*names, name]):
                raise ToolError(f"path '{rel_path}' is inside .git; writing there is not allowed")
            if purpose == "write":
                _check_rules(ctx, [*names, name], rel_path)
            try:
                opened = _open_last(ctx, name, dir_fd, purpose, rel_path, names)
            except _Symlink as link:
                links = _follow(ctx, rel_path, link.target, todo, fds, names, links, creating)
                continue
            except _Missing:
                if purpose != "write":
                    raise _not_found(rel_path, purpose) from None
                todo.appendleft(name)  # created since the first try: open it again
                links += 1
                if links > MAX_SYMLINKS:
                    raise ToolError(f"cannot write '{rel_path}': it keeps changing") from None
                continue
            return opened
    finally:
        for fd in fds:
            os.close(fd)


def _check_rules(ctx: ToolContext, parts: list[str], rel_path: str) -> None:
    """Refuse a write outside the story's scope or to a protected file (``parts``: the
    root-relative path the write would reach). Through a symlink, both the link's path and
    its target's are checked."""
    path = "/".join(parts)
    why = rules_of(ctx).refusal(path)
    if why is None:
        return
    named = f"'{rel_path}'" if rel_path.strip().strip("/") == path else f"'{rel_path}' ('{path}')"
    raise ToolError(f"cannot write {named}: {why}")


class _Symlink(HeroError):
    """Signal inside open_in_worktree: the component is a symlink to ``target``."""

    def __init__(self, target: str) -> None:
        self.target = target


class _Missing(HeroError):
    """Signal inside open_in_worktree: the last component does not exist (now)."""


def _follow(
    ctx: ToolContext,
    rel_path: str,
    target: str,
    todo: deque[str],
    fds: list[int],
    names: list[str],
    links: int,
    creating: bool,
) -> int:
    """Splice a symlink's target into the walk (from the root when it is absolute)."""
    if creating:  # the path was missing a moment ago: something else is changing it
        raise ToolError(f"cannot write '{rel_path}': it changed while hero was writing it")
    links += 1
    if links > MAX_SYMLINKS:
        raise ToolError(f"path '{rel_path}' cannot be resolved: too many levels of symbolic links")
    if target.startswith("/"):
        parts = _parts_inside(ctx, target, rel_path)
        while len(fds) > 1:
            os.close(fds.pop())
        names.clear()
    else:
        parts = _split(target)
    todo.extendleft(reversed(parts))
    return links


def _mkdir(name: str, dir_fd: int, rel_path: str) -> int:
    """Make the directory ``name`` in ``dir_fd`` (if nothing made it meanwhile) and open it,
    without following a symlink; its descriptor."""
    try:
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    except FileExistsError:
        pass  # made meanwhile: opened below, without following, like any other
    except OSError as exc:
        raise ToolError(f"cannot write '{rel_path}': {os_reason(exc)}") from None
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if _symlink_target(exc, name, dir_fd) is not None:
            raise ToolError(
                f"cannot write '{rel_path}': it changed while hero was writing it"
            ) from None
        raise ToolError(f"cannot write '{rel_path}': {os_reason(exc)}") from None


def _open_last(
    ctx: ToolContext, name: str, dir_fd: int, purpose: Purpose, rel_path: str, names: list[str]
) -> Opened:
    """Open the last component in ``dir_fd``; raises _Symlink or _Missing for the walk."""
    created = False
    flags = {
        "read": _READ_FLAGS,
        "write": _WRITE_FLAGS,
        "list": _DIR_FLAGS,
        "search": _READ_FLAGS,
    }[purpose]
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        target = _symlink_target(exc, name, dir_fd)
        if target is not None:
            raise _Symlink(target) from None
        if exc.errno == errno.ENOENT and purpose == "write":
            try:
                fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=dir_fd)
            except FileExistsError:
                raise _Missing from None  # appeared meanwhile: try again without creating
            except OSError as exc2:
                raise ToolError(f"cannot write '{rel_path}': {os_reason(exc2)}") from None
            created = True
        elif exc.errno == errno.ENOENT:
            raise _Missing from None
        elif exc.errno == errno.EISDIR:
            raise ToolError(f"path '{rel_path}' is a directory") from None
        elif exc.errno == errno.ENOTDIR and purpose == "list":
            raise ToolError(
                f"'{rel_path}' is a file, not a directory; use read_file to read it"
            ) from None
        else:
            raise ToolError(f"cannot {_VERB[purpose]} '{rel_path}': {os_reason(exc)}") from None
    try:
        if purpose in ("read", "write"):
            _check_file(fd, purpose, rel_path)
    except BaseException:
        os.close(fd)
        raise
    return Opened(fd, ctx.root.joinpath(*names, name), created)


def _check_file(fd: int, purpose: Purpose, rel_path: str) -> None:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        if purpose == "write":
            raise ToolError(f"path '{rel_path}' is a directory")
        raise ToolError(f"'{rel_path}' is a directory; use ls to list it")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"'{rel_path}' is not a regular file")
    if st.st_nlink > 1:
        raise _hard_link(rel_path)


class TreeWalk:
    """Root-relative paths (as git and ripgrep print them) walked from the worktree's
    descriptor one component at a time, never following a symlink.

    The directories of the last path stay open, so paths sorted by directory cost one
    ``open`` per directory and one ``stat`` per entry. With ``since_ns``, :meth:`lookup`
    also says whether a directory on the way changed (its ctime) at or after that time: a
    path whose directories did not change since a program started names, for that program,
    the very file this walk reaches. Close it (or use it as a context manager)."""

    def __init__(self, ctx: ToolContext, since_ns: int | None = None) -> None:
        self._since = since_ns
        self._root = os.open(ctx.root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        # The open chain of directories below the root: names, descriptors, and whether
        # one of them (or the root) changed; _fds[0] and _changed_so_far[0] are the root's.
        self._names: list[str] = []
        self._fds = [self._root]
        try:
            self._changed_so_far = [self._changed(self._root)]
        except BaseException:
            os.close(self._root)
            raise

    def __enter__(self) -> TreeWalk:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        self._names.clear()

    def _changed(self, fd: int) -> bool:
        if self._since is None:
            return False
        ctime = os.fstat(fd).st_ctime_ns
        # A file system that keeps whole seconds rounds a change down to its second.
        grain = 1_000_000_000 if ctime % 1_000_000_000 == 0 else 0
        return ctime >= self._since - grain

    def lookup(self, rel_path: str) -> tuple[int, str, os.stat_result, bool] | None:
        """(its directory's descriptor, its name, its lstat, whether a directory on the way
        changed), or None when a component is missing, not a directory, or a symlink. The
        descriptor belongs to the walk and stays open until the next lookup."""
        dirs = rel_path.split("/")
        name = dirs.pop()
        if name in _NOT_NAMES or "" in dirs or "." in dirs or ".." in dirs:
            return None
        if dirs != self._names:  # another directory than the last path's
            names, fds, changed = self._names, self._fds, self._changed_so_far
            keep = 0
            while keep < min(len(names), len(dirs)) and names[keep] == dirs[keep]:
                keep += 1
            while len(names) > keep:
                names.pop()
                changed.pop()
                os.close(fds.pop())
            for part in dirs[keep:]:
                try:
                    fd = os.open(part, _DIR_FLAGS, dir_fd=fds[-1])
                except OSError:
                    return None
                try:
                    changed.append(changed[-1] or self._changed(fd))
                except OSError:
                    os.close(fd)
                    return None
                names.append(part)
                fds.append(fd)
        try:
            st = os.stat(name, dir_fd=self._fds[-1], follow_symlinks=False)
        except OSError:
            return None
        return self._fds[-1], name, st, self._changed_so_far[-1]


_NOT_NAMES = frozenset({"", ".", ".."})


@dataclass(frozen=True)
class Written:
    path: Path  # symlink-resolved, inside the worktree
    old: bytes | None  # what the file held before; None when this write created it


def write_file_bytes(ctx: ToolContext, rel_path: str, content: str) -> Written:
    """The one guarded write: confined to the worktree, never into .git, never through a
    link; creates parents. Returns the path and what the file held before."""
    try:
        data = content.encode("utf-8", errors="surrogateescape")
    except UnicodeError as exc:
        raise ToolError(f"cannot write '{rel_path}': {os_reason(exc)}") from None
    opened = open_in_worktree(ctx, rel_path, "write")
    fd = opened.fd
    try:
        old = None if opened.created else read_all(fd)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise ToolError(f"cannot write '{rel_path}': {os_reason(exc)}") from None
    finally:
        os.close(fd)
    return Written(opened.path, old)


def read_all(fd: int) -> bytes:
    """Everything from ``fd``'s position to its end."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def write_text_file(ctx: ToolContext, rel_path: str, content: str) -> Path:
    """The one guarded write (see :func:`write_file_bytes`); returns the path written."""
    return write_file_bytes(ctx, rel_path, content).path
