"""The search tools grep and find: the glob compiler, the rg engine and its pure-Python fallback.

Confinement. The path the model gives is opened with the file tools' walk (from the
worktree's descriptor, never following a symlink out). git and ripgrep then open what they
list by name, and a symlink swapped in meanwhile (for the search root, a directory on the
way, or a file while ripgrep walks) would be followed. So nothing they report is shown
unchecked: every reported path is walked again from the worktree's descriptor
(:class:`~hero.agent.tools.paths.TreeWalk`) and dropped when it is not there (an outside
name). For grep with ripgrep, a file whose directories changed while rg ran (their ctime)
may have been read through a swapped symlink: it is searched again through the descriptor
the walk opened (``/proc/self/fd/N``), so its lines are the worktree's. The pure-Python
grep reads every file through that walk itself.

A regular file with more than one hard link may be the same file as one outside the
worktree (hero's home, say): as read_file refuses it, grep and find leave it out and say so.
The git they run (``ls-files``) runs no hook and no filesystem monitor the worker may have
set in the repository (``hero.git.ops.NO_PROGRAMS``): it runs outside any sandbox.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from hero.agent.tools.context import ToolContext, ToolError, ToolOutcome, os_reason
from hero.agent.tools.paths import (
    DIR_FLAGS,
    READ_FLAGS,
    TreeWalk,
    hard_link_error,
    is_hard_linked,
    open_in_worktree,
    rel,
)
from hero.agent.tools.scope import glob_to_regex
from hero.agent.tools.text import BINARY_SNIFF_BYTES, LINE_MAX_CHARS, cut_line, is_binary
from hero.git.ops import NO_PROGRAMS

GREP_MAX_LINES = 200
GREP_TIMEOUT_S = 60.0
GREP_MAX_FILE_BYTES = 20_000_000
FIND_MAX_PATHS = 200
#: Hard-linked files named in the note that says they were left out.
LINKED_NAMED = 10

#: How far a file's ctime may lag the clock: the kernel stamps files from a clock that is
#: updated once a tick (at most 10 ms at HZ=100).
_CLOCK_SLACK_NS = 50_000_000
#: Files searched again per rg run (each is an open descriptor handed to rg).
_RECHECK_BATCH = 200


# ---------------------------------------------------------------------------------------------
# Globs


def _glob_matcher(pattern: str) -> Callable[[str], bool]:
    """Match a root-or-base-relative posix path: a pattern without ``/`` tests the basename;
    a leading ``!`` negates (as in ripgrep's --glob)."""
    pat = pattern.strip()
    while pat.startswith("./"):
        pat = pat[2:]
    pat = pat.lstrip("/")
    negate = pat.startswith("!")
    if negate:
        pat = pat[1:]
    rx = glob_to_regex(pat)
    if "/" in pat:
        return lambda rel_path: (rx.match(rel_path) is not None) is not negate
    return lambda rel_path: (rx.match(rel_path.rsplit("/", 1)[-1]) is not None) is not negate


# ---------------------------------------------------------------------------------------------
# Listing files (find, and the pure-Python grep)


def _subprocess_env(ctx: ToolContext) -> dict[str, str]:
    env = dict(ctx.env)
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


def _path_key(rel_path: str) -> list[str]:
    """Sort component by component, as ripgrep's --sort=path does."""
    return rel_path.split("/")


def _in_git_dir(rel_path: str) -> bool:
    return any(part.lower() == ".git" for part in rel_path.split("/"))


def _join(rel_dir: str, name: str) -> str:
    return name if rel_dir == "." else f"{rel_dir}/{name}"


def _list_files(ctx: ToolContext, base_fd: int, rel_base: str) -> list[str]:
    """Root-relative posix paths of non-directory entries under the directory ``rel_base``
    (open as ``base_fd``): git's tracked and untracked-not-ignored files that are in the
    worktree now (a regular file or a symlink, never followed), else a walk of ``base_fd``
    that skips .git. Sorted."""
    try:
        proc = subprocess.run(
            [
                "git",
                *NO_PROGRAMS,
                "--literal-pathspecs",
                "ls-files",
                "-co",
                "--exclude-standard",
                "-z",
                "--",
                rel_base,
            ],
            cwd=ctx.root,
            env=_subprocess_env(ctx),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GREP_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        proc = None
    if proc is not None and proc.returncode == 0:
        names = {n for n in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if n}
        files = []
        # git read the directories by name: a name it listed from a directory swapped for a
        # symlink meanwhile is not in the worktree's directory, and is dropped here.
        with TreeWalk(ctx) as walk:
            for name in sorted(names, key=_path_key):
                if _in_git_dir(name):
                    continue
                found = walk.lookup(name)
                if found and (stat.S_ISREG(found[2].st_mode) or stat.S_ISLNK(found[2].st_mode)):
                    files.append(name)
        # An explicitly named ignored directory is still listed (as ripgrep searches it).
        if files or rel_base == ".":
            return files
    return sorted(_walk_files(base_fd, rel_base), key=_path_key)


def _walk_files(top_fd: int, rel_top: str) -> list[str]:
    """Non-directory entries under the directory ``top_fd`` (symlinks listed, never
    followed; ``.git`` skipped), each directory opened from its parent's descriptor with
    O_NOFOLLOW. Unreadable directories are skipped. Open descriptors: one per level."""
    files: list[str] = []
    stack: list[tuple[int, str, Iterator[str]]] = []

    def enter(fd: int, rel_dir: str) -> None:
        subdirs = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name.lower() == ".git":
                        continue
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    if is_dir:
                        subdirs.append(entry.name)
                    else:
                        files.append(_join(rel_dir, entry.name))
        except OSError:
            os.close(fd)
            return
        stack.append((fd, rel_dir, iter(subdirs)))

    try:
        enter(os.dup(top_fd), rel_top)
        while stack:
            fd, rel_dir, subdirs = stack[-1]
            name = next(subdirs, None)
            if name is None:
                os.close(stack.pop()[0])
                continue
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            enter(child, _join(rel_dir, name))
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return files


# ---------------------------------------------------------------------------------------------
# grep engines


@functools.cache
def find_rg() -> str | None:
    """The ``rg`` program, found once per process: first where the ``ripgrep`` wheel installs
    it beside this interpreter (so ``venv/bin/hero`` finds it without the venv on PATH), then
    the user scripts dir, then PATH. None when there is none (the pure-Python grep is used)."""
    import sysconfig  # lazily: only the first grep pays for it

    dirs = [sysconfig.get_path("scripts")]
    if sys.executable:
        dirs.append(str(Path(sys.executable).parent))
    try:
        dirs.append(sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user")))
    except (KeyError, ValueError):
        pass
    return shutil.which("rg", path=os.pathsep.join(d for d in dirs if d)) or shutil.which("rg")


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= limit and (chunk := os.read(fd, min(limit + 1 - size, 1 << 20))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _grep_records(
    ctx: ToolContext,
    pattern: str,
    base_fd: int,
    rel_base: str,
    is_dir: bool,
    glob: str | None,
    ignore_case: bool,
    mode: str,
) -> tuple[list[str], list[str]]:
    """The records, and the hard-linked files left out (see the module's docstring)."""
    if not is_dir and is_binary(os.pread(base_fd, BINARY_SNIFF_BYTES, 0)):
        raise ToolError(f"'{rel_base}' is a binary file; grep searches text")
    rg = None if ctx.use_ripgrep is False else find_rg()
    if ctx.use_ripgrep is True and not rg:
        raise ToolError("ripgrep (rg) was requested but is not installed")
    if rg:
        return _grep_rg(ctx, rg, pattern, rel_base, glob, ignore_case, mode)
    return _grep_py(ctx, pattern, base_fd, rel_base, is_dir, glob, ignore_case, mode)


def _rg_flags(ignore_case: bool, mode: str, globs: tuple[str, ...] = ()) -> list[str]:
    flags = [
        "--no-config",
        "--hidden",
        "--null",
        "--color=never",
        "--sort=path",
        "--with-filename",
    ]
    for glob in globs:  # in order: a later glob wins
        flags += ["--glob", glob]
    if ignore_case:
        flags.append("--ignore-case")
    if mode == "files_with_matches":
        flags.append("--files-with-matches")
    elif mode == "count":
        flags.append("--count")
    else:
        flags += ["--line-number", "--no-heading"]
    return flags


def _run_rg(
    ctx: ToolContext, cmd: list[str], pass_fds: tuple[int, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            cmd,
            cwd=ctx.root,
            env=_subprocess_env(ctx),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GREP_TIMEOUT_S,
            pass_fds=pass_fds,
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"grep timed out after {GREP_TIMEOUT_S:g} s; narrow path or glob") from None


#: One grep result: the path as rg printed it, and what follows it (None for a path alone).
_Record = tuple[bytes, str | None]


def _rg_records(out: bytes, mode: str, *, strict: bool = False) -> list[_Record]:
    """rg's --null output as records; ``strict`` drops lines without a path (rg's notes
    about binary files it was given by name)."""
    if mode == "files_with_matches":
        return [(p, None) for p in out.split(b"\0") if p.strip(b"\n")]
    records: list[_Record] = []
    for line in out.split(b"\n"):
        if not line:
            continue
        path, sep, rest = line.partition(b"\0")
        if strict and not sep:
            continue
        records.append((path, rest.decode("utf-8", "replace").removesuffix("\r")))
    return records


def _show(path: bytes, rest: str | None) -> str:
    shown = path.decode("utf-8", "replace")
    return shown if rest is None else f"{shown}:{rest}"


def _grep_rg(
    ctx: ToolContext,
    rg: str,
    pattern: str,
    rel_base: str,
    glob: str | None,
    ignore_case: bool,
    mode: str,
) -> tuple[list[str], list[str]]:
    globs = ("!.git", glob) if glob else ("!.git",)
    args = [rg, *_rg_flags(ignore_case, mode, globs), "-e", pattern, "--"]
    started = time.time_ns()
    proc = _run_rg(ctx, [*args, rel_base] if rel_base != "." else args)
    if proc.returncode == 2 and not proc.stdout:
        # rg's complaint may name files it listed through a symlink swapped in: it is shown
        # only when it is about the pattern or the glob, which rg then repeats with no file
        # of the worktree to read. Otherwise some files could not be read, none matched.
        probe = _run_rg(ctx, [*args, os.devnull])
        if probe.returncode == 2:
            err = probe.stderr.decode("utf-8", "replace").strip()
            if "regex" in err:
                raise ToolError(f"invalid regex {pattern!r}: {err}")
            raise ToolError(f"grep failed: {err}")
        err = proc.stderr.decode("utf-8", "replace")
        if (note := err.find("rg: No files were searched")) >= 0:  # rg's last words: a filter
            raise ToolError(f"grep failed: {err[note:].strip()}")
    records = _rg_records(proc.stdout, mode)
    return _checked(ctx, rg, pattern, ignore_case, mode, records, started - _CLOCK_SLACK_NS)


def _checked(
    ctx: ToolContext,
    rg: str,
    pattern: str,
    ignore_case: bool,
    mode: str,
    records: list[_Record],
    since_ns: int,
) -> tuple[list[str], list[str]]:
    """rg's records for what the worktree holds: rg opened each file by name, so each is
    walked again from the worktree's descriptor. Not there (an outside name, a symlink
    now): dropped. A directory on its way changed since rg started, so rg may have read it
    through a symlink swapped in and back: searched again through the walk's descriptor.
    A file with several hard links: dropped, and named in the second list."""
    if not records:
        return [], []
    gone: set[bytes] = set()
    linked: list[str] = []
    again: dict[bytes, int] = {}  # path -> descriptor, to search again
    try:
        with TreeWalk(ctx, since_ns) as walk:
            for path in dict.fromkeys(p for p, _ in records):
                found = walk.lookup(os.fsdecode(path))
                if found is None or not stat.S_ISREG(found[2].st_mode):
                    gone.add(path)
                elif is_hard_linked(found[2]):
                    gone.add(path)
                    linked.append(path.decode("utf-8", "replace"))
                elif found[3]:
                    dir_fd, name = found[0], found[1]
                    try:
                        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
                    except OSError:
                        gone.add(path)
                        continue
                    again[path] = fd
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        gone.add(path)
                    elif is_hard_linked(st):
                        gone.add(path)
                        linked.append(path.decode("utf-8", "replace"))
        redone = _search_fds(ctx, rg, pattern, ignore_case, mode, again, gone) if again else {}
    finally:
        for fd in again.values():
            os.close(fd)
    out: list[str] = []
    for path, rest in records:
        if path in gone:
            continue
        if path in redone:
            out.extend(redone.pop(path))
        elif path not in again:
            out.append(_show(path, rest))
    return out, linked


@functools.cache
def _fd_dir() -> str | None:
    """Where a process names its own open descriptors (/proc/self/fd, /dev/fd), if anywhere."""
    for fd_dir in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(fd_dir):
            return fd_dir
    return None


def _search_fds(
    ctx: ToolContext,
    rg: str,
    pattern: str,
    ignore_case: bool,
    mode: str,
    files: dict[bytes, int],
    skip: set[bytes],
) -> dict[bytes, list[str]]:
    """rg's records for already open files (path -> descriptor), searched as
    ``<fd dir>/<fd>``: the very files, whatever their names point to now. Binary files (as
    rg's own walk would skip them) and those in ``skip`` give none."""
    fd_dir = _fd_dir()
    todo = [(p, fd) for p, fd in files.items() if p not in skip]
    if fd_dir is None:  # nowhere to name a descriptor: leave the files out
        skip.update(p for p, _ in todo)
        return {}
    todo = [(p, fd) for p, fd in todo if not is_binary(os.pread(fd, BINARY_SNIFF_BYTES, 0))]
    redone: dict[bytes, list[str]] = {}
    for start in range(0, len(todo), _RECHECK_BATCH):
        batch = todo[start : start + _RECHECK_BATCH]
        by_arg = {os.fsencode(f"{fd_dir}/{fd}"): p for p, fd in batch}
        cmd = [rg, *_rg_flags(ignore_case, mode), "-e", pattern, "--"]
        proc = _run_rg(ctx, cmd + [os.fsdecode(a) for a in by_arg], tuple(fd for _, fd in batch))
        for arg, rest in _rg_records(proc.stdout, mode, strict=True):
            path = by_arg.get(arg)
            if path is not None:
                redone.setdefault(path, []).append(_show(path, rest))
    return redone


def _grep_py(
    ctx: ToolContext,
    pattern: str,
    base_fd: int,
    rel_base: str,
    is_dir: bool,
    glob: str | None,
    ignore_case: bool,
    mode: str,
) -> tuple[list[str], list[str]]:
    """The fallback where the ripgrep wheel cannot install: same records for what grep promises
    (Python ``re`` syntax instead of rg's; .gitignore through git ls-files). Every file is
    read through a descriptor the walk from the worktree's descriptor opened."""
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ToolError(f"invalid regex {pattern!r}: {exc}") from None
    records: list[str] = []
    linked: list[str] = []
    if not is_dir:
        _search_text(rx, rel_base, _read_at_most(base_fd, GREP_MAX_FILE_BYTES), mode, records)
        return records, linked
    match = _glob_matcher(glob) if glob else None
    candidates = [f for f in _list_files(ctx, base_fd, rel_base) if match is None or match(f)]
    with TreeWalk(ctx) as walk:
        for rel_path in candidates:
            found = walk.lookup(rel_path)
            if found is None or not stat.S_ISREG(found[2].st_mode):
                continue  # a symlink (never followed), or gone
            if is_hard_linked(found[2]):
                linked.append(rel_path)
                continue
            try:
                fd = os.open(found[1], READ_FLAGS, dir_fd=found[0])
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    continue
                if is_hard_linked(st):
                    linked.append(rel_path)
                    continue
                data = _read_at_most(fd, GREP_MAX_FILE_BYTES)
            except OSError:
                continue
            finally:
                os.close(fd)
            _search_text(rx, rel_path, data, mode, records)
    return records, linked


def _search_text(
    rx: re.Pattern[str], rel_path: str, data: bytes, mode: str, records: list[str]
) -> None:
    if len(data) > GREP_MAX_FILE_BYTES or is_binary(data):
        return
    count = 0
    lines = data.decode("utf-8", "replace").split("\n")
    if lines[-1] == "":
        lines.pop()  # text after the last newline only
    for n, line in enumerate(lines, 1):
        line = line.removesuffix("\r")
        if rx.search(line) is None:
            continue
        count += 1
        if mode == "content":
            records.append(f"{rel_path}:{n}:{line}")
        elif mode == "files_with_matches":
            break
    if count and mode == "files_with_matches":
        records.append(rel_path)
    elif count and mode == "count":
        records.append(f"{rel_path}:{count}")


# ---------------------------------------------------------------------------------------------
# Tools


def tool_grep(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    ignore_case: bool = False,
    output_mode: str = "content",
) -> ToolOutcome:
    if not pattern:
        raise ToolError("tool 'grep': pattern must not be empty")
    opened = open_in_worktree(ctx, path, "search")
    try:
        st = os.fstat(opened.fd)
        kind = st.st_mode
        if not stat.S_ISDIR(kind) and not stat.S_ISREG(kind):
            raise ToolError(f"'{path}' is not a regular file")
        if is_hard_linked(st):
            raise hard_link_error(path)
        records, linked = _grep_records(
            ctx,
            pattern,
            opened.fd,
            rel(ctx, opened.path),
            stat.S_ISDIR(kind),
            glob,
            ignore_case,
            output_mode,
        )
    except OSError as exc:
        raise ToolError(f"cannot search '{path}': {os_reason(exc)}") from None
    finally:
        os.close(opened.fd)
    shown = [cut_line(r, LINE_MAX_CHARS) for r in records[:GREP_MAX_LINES]] or ["no matches"]
    if len(records) > GREP_MAX_LINES:
        shown.append(
            f"(showing first {GREP_MAX_LINES} of {len(records)} results; "
            "narrow the pattern, path or glob)"
        )
    if linked:
        shown.append(_linked_note(linked, "searched"))
    return ToolOutcome("\n".join(shown), is_error=False)


def _linked_note(linked: list[str], verb: str) -> str:
    """What grep and find say of the hard-linked files they left out."""
    names = ", ".join(cut_line(n, LINE_MAX_CHARS) for n in linked[:LINKED_NAMED])
    more = f" and {len(linked) - LINKED_NAMED} more" if len(linked) > LINKED_NAMED else ""
    return (
        f"({len(linked)} file(s) with more than one hard link not {verb}: {names}{more}; "
        "hero's file tools do not follow links out of the worktree)"
    )


def tool_find(ctx: ToolContext, pattern: str, path: str = ".") -> ToolOutcome:
    if not pattern.strip():
        raise ToolError("tool 'find': pattern must not be empty")
    opened = open_in_worktree(ctx, path, "search")
    try:
        if not stat.S_ISDIR(os.fstat(opened.fd).st_mode):
            raise ToolError(f"'{path}' is not a directory")
        rel_base = rel(ctx, opened.path)
        files = _list_files(ctx, opened.fd, rel_base)
    except OSError as exc:
        raise ToolError(f"cannot search '{path}': {os_reason(exc)}") from None
    finally:
        os.close(opened.fd)
    match = _glob_matcher(pattern)
    prefix = "" if rel_base == "." else rel_base + "/"
    found, linked = _without_hard_links(
        ctx, [f for f in files if match(f.removeprefix(prefix)) or (prefix and match(f))]
    )
    shown = found[:FIND_MAX_PATHS] or [f"no files match '{pattern}' under '{rel_base}'"]
    if len(found) > FIND_MAX_PATHS:
        shown.append(f"(showing first {FIND_MAX_PATHS} of {len(found)} paths; narrow the pattern)")
    if linked:
        shown.append(_linked_note(linked, "listed"))
    return ToolOutcome("\n".join(shown), is_error=False)


def _without_hard_links(ctx: ToolContext, paths: list[str]) -> tuple[list[str], list[str]]:
    """``paths`` (root-relative, sorted by directory) without the regular files that have
    more than one hard link, and those."""
    kept: list[str] = []
    linked: list[str] = []
    with TreeWalk(ctx) as walk:
        for path in paths:
            found = walk.lookup(path)
            (linked if found is not None and is_hard_linked(found[2]) else kept).append(path)
    return kept, linked
