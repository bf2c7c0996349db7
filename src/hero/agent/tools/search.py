"""The search tools grep and find: the glob compiler, the rg engine and its pure-Python fallback."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from hero.agent.tools.context import ToolContext, ToolError, ToolOutcome
from hero.agent.tools.paths import in_git_dir, rel, resolve_path
from hero.agent.tools.text import BINARY_SNIFF_BYTES, LINE_MAX_CHARS, cut_line, is_binary

GREP_MAX_LINES = 200
GREP_TIMEOUT_S = 60.0
GREP_MAX_FILE_BYTES = 20_000_000
FIND_MAX_PATHS = 200


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


def _is_file_entry(path: Path) -> bool:
    """A regular file or a symlink (never followed), as git and ripgrep list them."""
    return path.is_symlink() or path.is_file()


def _path_key(rel_path: str) -> list[str]:
    """Sort component by component, as ripgrep's --sort=path does."""
    return rel_path.split("/")


def _list_files(ctx: ToolContext, base: Path) -> list[str]:
    """Root-relative posix paths of non-directory entries under ``base``: git's tracked and
    untracked-not-ignored files, else a walk that skips .git. Sorted."""
    rel_base = rel(ctx, base)
    try:
        proc = subprocess.run(
            [
                "git",
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
        files = [n for n in names if _is_file_entry(ctx.root / n)]
        files = [f for f in files if not in_git_dir(ctx, ctx.root / f)]
        # An explicitly named ignored directory is still listed (as ripgrep searches it).
        if files or base == ctx.root:
            return sorted(files, key=_path_key)
    files = []
    for dirpath, dirnames, filenames in os.walk(base):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d != ".git" and d not in links]
        files.extend(rel(ctx, Path(dirpath, f)) for f in [*filenames, *links] if f != ".git")
    return sorted(files, key=_path_key)


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


def _grep_records(
    ctx: ToolContext, pattern: str, base: Path, glob: str | None, ignore_case: bool, mode: str
) -> list[str]:
    if base.is_file():
        with open(base, "rb") as f:
            if is_binary(f.read(BINARY_SNIFF_BYTES)):
                raise ToolError(f"'{rel(ctx, base)}' is a binary file; grep searches text")
    rg = None if ctx.use_ripgrep is False else find_rg()
    if ctx.use_ripgrep is True and not rg:
        raise ToolError("ripgrep (rg) was requested but is not installed")
    if rg:
        return _grep_rg(ctx, rg, pattern, base, glob, ignore_case, mode)
    return _grep_py(ctx, pattern, base, glob, ignore_case, mode)


def _grep_rg(
    ctx: ToolContext,
    rg: str,
    pattern: str,
    base: Path,
    glob: str | None,
    ignore_case: bool,
    mode: str,
) -> list[str]:
    cmd = [
        rg,
        "--no-config",
        "--hidden",
        "--null",
        "--color=never",
        "--sort=path",
        "--with-filename",
        "--glob",
        "!.git",
    ]
    if ignore_case:
        cmd.append("--ignore-case")
    if glob:
        cmd += ["--glob", glob]
    if mode == "files_with_matches":
        cmd.append("--files-with-matches")
    elif mode == "count":
        cmd.append("--count")
    else:
        cmd += ["--line-number", "--no-heading"]
    cmd += ["-e", pattern, "--"]
    if base != ctx.root:
        cmd.append(rel(ctx, base))
    try:
        proc = subprocess.run(
            cmd,
            cwd=ctx.root,
            env=_subprocess_env(ctx),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GREP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"grep timed out after {GREP_TIMEOUT_S:g} s; narrow path or glob") from None
    if proc.returncode == 2 and not proc.stdout:
        err = proc.stderr.decode("utf-8", "replace").strip()
        if "regex" in err:
            raise ToolError(f"invalid regex {pattern!r}: {err}")
        raise ToolError(f"grep failed: {err}")
    out = proc.stdout.decode("utf-8", "replace")
    if mode == "files_with_matches":
        return [p for p in out.split("\0") if p.strip("\n")]
    records = []
    for line in out.split("\n"):
        if not line:
            continue
        path, _, rest = line.partition("\0")
        records.append(f"{path}:{rest.removesuffix(chr(13))}")
    return records


def _grep_py(
    ctx: ToolContext, pattern: str, base: Path, glob: str | None, ignore_case: bool, mode: str
) -> list[str]:
    """The fallback where the ripgrep wheel cannot install: same records for what grep promises
    (Python ``re`` syntax instead of rg's; .gitignore through git ls-files)."""
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ToolError(f"invalid regex {pattern!r}: {exc}") from None
    if base.is_file():
        candidates = [rel(ctx, base)]
    else:
        match = _glob_matcher(glob) if glob else None
        candidates = [
            f
            for f in _list_files(ctx, base)
            if (match is None or match(f)) and not os.path.islink(ctx.root / f)
        ]
    records: list[str] = []
    for rel_path in candidates:
        try:
            with open(ctx.root / rel_path, "rb") as f:
                data = f.read(GREP_MAX_FILE_BYTES + 1)
        except OSError:
            continue
        if len(data) > GREP_MAX_FILE_BYTES or is_binary(data):
            continue
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
    return records


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
    base = resolve_path(ctx, path)
    if not base.exists():
        raise ToolError(f"path not found: '{path}'")
    records = _grep_records(ctx, pattern, base, glob, ignore_case, output_mode)
    if not records:
        return ToolOutcome("no matches", is_error=False)
    shown = [cut_line(r, LINE_MAX_CHARS) for r in records[:GREP_MAX_LINES]]
    if len(records) > GREP_MAX_LINES:
        shown.append(
            f"(showing first {GREP_MAX_LINES} of {len(records)} results; "
            "narrow the pattern, path or glob)"
        )
    return ToolOutcome("\n".join(shown), is_error=False)


def tool_find(ctx: ToolContext, pattern: str, path: str = ".") -> ToolOutcome:
    if not pattern.strip():
        raise ToolError("tool 'find': pattern must not be empty")
    base = resolve_path(ctx, path)
    if not base.is_dir():
        raise ToolError(
            f"'{path}' is not a directory" if base.exists() else f"path not found: '{path}'"
        )
    match = _glob_matcher(pattern)
    prefix = "" if base == ctx.root else rel(ctx, base) + "/"
    found = [
        f for f in _list_files(ctx, base) if match(f.removeprefix(prefix)) or (prefix and match(f))
    ]
    if not found:
        return ToolOutcome(f"no files match '{pattern}' under '{rel(ctx, base)}'", False)
    shown = found[:FIND_MAX_PATHS]
    if len(found) > FIND_MAX_PATHS:
        shown.append(f"(showing first {FIND_MAX_PATHS} of {len(found)} paths; narrow the pattern)")
    return ToolOutcome("\n".join(shown), is_error=False)
