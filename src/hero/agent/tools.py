"""Tools given to the Worker model. Tool names and argument names are a contract.

Every path is confined to the worktree (``ToolContext.root``); ``execute_tool`` never raises
(except KeyboardInterrupt / SystemExit, which must reach the caller).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from hero.runner import run_command, truncate_middle

READ_DEFAULT_LIMIT = 400
READ_MAX_LINE_CHARS = 2000
DIFF_MAX_LINES = 80
GREP_MAX_LINES = 200
GREP_MAX_LINE_CHARS = 500
GREP_TIMEOUT_S = 60.0
FIND_MAX_PATHS = 200
LS_MAX_ENTRIES = 500
BINARY_SNIFF_BYTES = 8192
GREP_MAX_FILE_BYTES = 20_000_000
OUTPUT_MODES = ("content", "files_with_matches", "count")


class ToolError(Exception):
    """A tool failed in a way the model should read about (bad path, bad argument, ...)."""


@dataclass
class ToolContext:
    root: Path  # the worktree; resolved once in __post_init__
    env: Mapping[str, str]  # environment for bash (already built with child_env)
    bash_timeout_s: float = 300.0  # default per-call timeout; the model's timeout_s is capped
    max_bash_timeout_s: float = 1800.0
    cancel: threading.Event | None = None
    max_result_chars: int = 20_000  # tool result text cap (truncate_middle)
    use_ripgrep: bool | None = None  # None: use rg when installed; False: pure-Python grep
    rg_path: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if self.use_ripgrep is not False:
            self.rg_path = shutil.which("rg")


@dataclass(frozen=True)
class ToolOutcome:
    content: str  # text sent back to the model as the tool message
    is_error: bool
    command_s: float = 0.0  # time spent in a subprocess (bash), for the benchmark


# ---------------------------------------------------------------------------------------------
# Contract: names, arguments, schemas


@dataclass(frozen=True)
class _Param:
    name: str
    type: str  # JSON schema type: string | integer | number | boolean
    required: bool = False
    description: str = ""
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class _ToolSpec:
    name: str
    description: str
    params: tuple[_Param, ...]


_PATH = _Param("path", "string", True)
_SPECS: tuple[_ToolSpec, ...] = (
    _ToolSpec(
        "bash",
        "Run a shell command (sh -c) in the worktree root, no stdin. Returns exit code and output.",
        (
            _Param("command", "string", True),
            _Param("timeout_s", "number", description="seconds"),
        ),
    ),
    _ToolSpec(
        "read_file",
        "Read a text file with line numbers. Paths are relative to the worktree root.",
        (
            _PATH,
            _Param("offset", "integer", description="1-based first line"),
            _Param("limit", "integer", description="max lines, default 400"),
        ),
    ),
    _ToolSpec(
        "write_file",
        "Create or overwrite a file (parent dirs created).",
        (_PATH, _Param("content", "string", True)),
    ),
    _ToolSpec(
        "edit_file",
        "Replace old_string with new_string in a file. old_string must match exactly once "
        "unless replace_all.",
        (
            _PATH,
            _Param("old_string", "string", True),
            _Param("new_string", "string", True),
            _Param("replace_all", "boolean"),
        ),
    ),
    _ToolSpec(
        "grep",
        "Regex search in files (respects .gitignore).",
        (
            _Param("pattern", "string", True),
            _Param("path", "string", description="file or dir"),
            _Param("glob", "string", description="file filter, e.g. *.py"),
            _Param("ignore_case", "boolean"),
            _Param("output_mode", "string", enum=OUTPUT_MODES),
        ),
    ),
    _ToolSpec(
        "find",
        "Find files by glob, e.g. **/*.py (*.md matches at any depth).",
        (_Param("pattern", "string", True), _Param("path", "string")),
    ),
    _ToolSpec("ls", "List a directory.", (_Param("path", "string"),)),
)

TOOL_NAMES: tuple[str, ...] = tuple(spec.name for spec in _SPECS)
_SPEC_BY_NAME: Mapping[str, _ToolSpec] = MappingProxyType({s.name: s for s in _SPECS})


def tool_schemas() -> list[dict]:
    """The OpenAI ``tools`` parameter for all tools (a fresh list each call)."""
    schemas: list[dict] = []
    for spec in _SPECS:
        props: dict[str, dict] = {}
        for p in spec.params:
            prop: dict = {"type": p.type}
            if p.enum:
                prop["enum"] = list(p.enum)
            if p.description:
                prop["description"] = p.description
            props[p.name] = prop
        schemas.append(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": [p.name for p in spec.params if p.required],
                    },
                },
            }
        )
    return schemas


def _shape(spec: _ToolSpec) -> str:
    parts = [f'"{p.name}"{"" if p.required else "?"}: {p.type}' for p in spec.params]
    return "{" + ", ".join(parts) + "}"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _coerce(value: object, type_: str) -> tuple[bool, object]:
    """(ok, value) for one argument against its JSON schema type."""
    if type_ == "string":
        return isinstance(value, str), value
    if type_ == "boolean":
        return isinstance(value, bool), value
    if isinstance(value, bool):
        return False, value
    if type_ == "integer":
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        return False, value
    if type_ == "number":
        return isinstance(value, int | float), value
    return False, value


def _parse_arguments(spec: _ToolSpec, raw: str | None) -> dict[str, object]:
    expected = f"expected a JSON object {_shape(spec)}"
    if isinstance(raw, Mapping):  # already parsed (lenient for callers)
        data: object = dict(raw)
    elif raw is None or not raw.strip():
        data = {}
    else:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ToolError(
                f"tool '{spec.name}': arguments are not valid JSON ({exc}); {expected}"
            ) from None
    if not isinstance(data, dict):
        raise ToolError(
            f"tool '{spec.name}': arguments must be a JSON object, got {_json_type(data)}; "
            f"{expected}"
        )
    known = {p.name for p in spec.params}
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        names = ", ".join(f"'{k}'" for k in unknown)
        raise ToolError(f"tool '{spec.name}': unknown argument {names}; {expected}")
    args: dict[str, object] = {}
    for p in spec.params:
        value = data.get(p.name)
        if value is None:
            if p.required:
                raise ToolError(
                    f"tool '{spec.name}': missing required argument '{p.name}'; {expected}"
                )
            continue
        ok, value = _coerce(value, p.type)
        if not ok:
            raise ToolError(
                f"tool '{spec.name}': argument '{p.name}' must be {p.type}, got "
                f"{_json_type(value)}; {expected}"
            )
        if p.enum and value not in p.enum:
            raise ToolError(
                f"tool '{spec.name}': argument '{p.name}' must be one of "
                f"{', '.join(p.enum)}; got {value!r}"
            )
        args[p.name] = value
    return args


# ---------------------------------------------------------------------------------------------
# Paths


def resolve_path(ctx: ToolContext, rel_path: str) -> Path:
    """Absolute, symlink-resolved path inside ``ctx.root``; ToolError if it escapes."""
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


def _rel(ctx: ToolContext, path: Path) -> str:
    rel = path.relative_to(ctx.root).as_posix()
    return rel if rel else "."


def _in_git_dir(ctx: ToolContext, path: Path) -> bool:
    return any(part.lower() == ".git" for part in path.relative_to(ctx.root).parts)


def write_text_file(ctx: ToolContext, rel_path: str, content: str) -> Path:
    """The one guarded write: confined to the worktree, never into .git; creates parents."""
    path = resolve_path(ctx, rel_path)
    if path == ctx.root or path.is_dir():
        raise ToolError(f"path '{rel_path}' is a directory")
    if _in_git_dir(ctx, path):
        raise ToolError(f"path '{rel_path}' is inside .git; writing there is not allowed")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(content)
    except (OSError, UnicodeError) as exc:
        raise ToolError(f"cannot write '{rel_path}': {_os_reason(exc)}") from None
    return path


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def _existing_file(ctx: ToolContext, rel_path: str) -> Path:
    path = resolve_path(ctx, rel_path)
    if path.is_dir():
        raise ToolError(f"'{rel_path}' is a directory; use ls to list it")
    if not path.exists():
        raise ToolError(f"file not found: '{rel_path}' (use find or ls to locate files)")
    if not path.is_file():
        raise ToolError(f"'{rel_path}' is not a regular file")
    return path


def _read_text(ctx: ToolContext, rel_path: str) -> tuple[Path, str]:
    path = _existing_file(ctx, rel_path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ToolError(f"cannot read '{rel_path}': {_os_reason(exc)}") from None
    if _is_binary(data):
        raise ToolError(f"'{rel_path}' is a binary file ({len(data)} bytes); not shown")
    return path, data.decode("utf-8", errors="surrogateescape")


def _diff(rel: str, old: str, new: str) -> str:
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"a/{rel}", f"b/{rel}", lineterm="", n=3
        )
    )
    lines = [_cut_line(line, GREP_MAX_LINE_CHARS) for line in lines]
    if len(lines) > DIFF_MAX_LINES:
        extra = len(lines) - DIFF_MAX_LINES
        lines = lines[:DIFF_MAX_LINES] + [f"... (diff cut: {extra} more lines)"]
    return "\n".join(lines).encode("utf-8", "replace").decode("utf-8")


def _cut_line(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... [{len(line) - limit} more characters]"


def _count_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


# ---------------------------------------------------------------------------------------------
# Tools


def _tool_bash(ctx: ToolContext, command: str, timeout_s: float | None = None) -> ToolOutcome:
    if not command.strip():
        raise ToolError("tool 'bash': command must not be empty")
    timeout = ctx.bash_timeout_s if timeout_s is None else float(timeout_s)
    if timeout <= 0:
        raise ToolError("tool 'bash': timeout_s must be > 0")
    notes = []
    if timeout > ctx.max_bash_timeout_s:
        timeout = ctx.max_bash_timeout_s
        notes.append(f"(timeout_s capped at {timeout:g})")
    result = run_command(
        command,
        ctx.root,
        timeout_s=timeout,
        env=ctx.env,
        cancel=ctx.cancel,
        max_output_bytes=max(4 * ctx.max_result_chars, 1 << 16),
    )
    header = f"exit code: {result.exit_code}"
    if result.timed_out:
        header += f" (timed out after {timeout:g} s; process group killed)"
    elif result.cancelled:
        header += " (cancelled; process group killed)"
    if result.output_truncated_bytes:
        notes.append(
            f"({result.output_truncated_bytes} bytes dropped from the middle of the output)"
        )
    head = "\n".join([header, *notes]) + "\n"
    output = result.output if result.output.strip() else "(no output)"
    body = truncate_middle(output, max(200, ctx.max_result_chars - len(head)))
    return ToolOutcome(head + body, is_error=result.cancelled, command_s=result.duration_s)


def _tool_read_file(
    ctx: ToolContext, path: str, offset: int = 1, limit: int = READ_DEFAULT_LIMIT
) -> ToolOutcome:
    if offset < 0:
        raise ToolError("tool 'read_file': offset is 1-based and must be >= 1")
    offset = max(offset, 1)
    if limit < 1:
        raise ToolError("tool 'read_file': limit must be >= 1")
    file = _existing_file(ctx, path)
    budget = max(1000, ctx.max_result_chars - 200)
    out: list[str] = []
    used = 0
    end = offset - 1
    total = 0
    try:
        with open(file, "rb") as f:
            if _is_binary(f.read(BINARY_SNIFF_BYTES)):
                size = os.fstat(f.fileno()).st_size
                raise ToolError(f"'{path}' is a binary file ({size} bytes); not shown")
            f.seek(0)
            for total, raw in enumerate(f, 1):
                if total < offset or total >= offset + limit or (out and used > budget):
                    continue
                line = raw.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
                text = f"{total:>6}\t{_cut_line(line, READ_MAX_LINE_CHARS)}"
                if out and used + len(text) + 1 > budget:
                    used = budget + 1  # stop collecting; keep counting lines
                    continue
                out.append(text)
                used += len(text) + 1
                end = total
    except OSError as exc:
        raise ToolError(f"cannot read '{path}': {_os_reason(exc)}") from None
    if total == 0:
        return ToolOutcome(f"(empty file: {path})", is_error=False)
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of '{path}' ({total} lines)")
    if end < total:
        out.append(f"(lines {offset}-{end} of {total}; use offset={end + 1} to read more)")
    elif offset > 1:
        out.append(f"(lines {offset}-{end} of {total})")
    return ToolOutcome("\n".join(out), is_error=False)


def _tool_write_file(ctx: ToolContext, path: str, content: str) -> ToolOutcome:
    target = resolve_path(ctx, path)
    old: str | None = None
    if target.is_file():
        try:
            old = target.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            old = None
    written = write_text_file(ctx, path, content)
    rel = _rel(ctx, written)
    if old is None:
        return ToolOutcome(f"created {rel} ({_count_lines(content)} lines)", is_error=False)
    diff = _diff(rel, old, content)
    if not diff:
        return ToolOutcome(f"{rel} unchanged (same content)", is_error=False)
    return ToolOutcome(f"updated {rel}\n{diff}", is_error=False)


def _tool_edit_file(
    ctx: ToolContext, path: str, old_string: str, new_string: str, replace_all: bool = False
) -> ToolOutcome:
    if not old_string:
        raise ToolError("tool 'edit_file': old_string must not be empty (use write_file)")
    if old_string == new_string:
        raise ToolError("tool 'edit_file': old_string and new_string are identical")
    file, text = _read_text(ctx, path)
    count = text.count(old_string)
    if count == 0 and "\r\n" in text and "\n" in old_string and "\r\n" not in old_string:
        # The model usually writes LF; the file uses CRLF.
        crlf_old = old_string.replace("\n", "\r\n")
        if text.count(crlf_old):
            old_string, new_string = crlf_old, new_string.replace("\n", "\r\n")
            count = text.count(old_string)
    if count == 0:
        raise ToolError(
            f"old_string not found in '{path}'; it must match exactly, including whitespace "
            "and indentation (read_file the region again)"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string matches {count} times in '{path}'; add surrounding lines to make it "
            "unique, or set replace_all=true"
        )
    new_text = text.replace(old_string, new_string)
    write_text_file(ctx, path, new_text)
    rel = _rel(ctx, file)
    plural = "" if count == 1 else "s"
    return ToolOutcome(
        f"edited {rel} ({count} replacement{plural})\n{_diff(rel, text, new_text)}",
        is_error=False,
    )


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
        return lambda rel: (rx.match(rel) is not None) is not negate
    return lambda rel: (rx.match(rel.rsplit("/", 1)[-1]) is not None) is not negate


def _subprocess_env(ctx: ToolContext) -> dict[str, str]:
    env = dict(ctx.env)
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


def _is_file_entry(path: Path) -> bool:
    """A regular file or a symlink (never followed), as git and ripgrep list them."""
    return path.is_symlink() or path.is_file()


def _path_key(rel: str) -> list[str]:
    """Sort component by component, as ripgrep's --sort=path does."""
    return rel.split("/")


def _list_files(ctx: ToolContext, base: Path) -> list[str]:
    """Root-relative posix paths of non-directory entries under ``base``: git's tracked and
    untracked-not-ignored files, else a walk that skips .git. Sorted."""
    rel_base = _rel(ctx, base)
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
        files = [f for f in files if not _in_git_dir(ctx, ctx.root / f)]
        # An explicitly named ignored directory is still listed (as ripgrep searches it).
        if files or base == ctx.root:
            return sorted(files, key=_path_key)
    files = []
    for dirpath, dirnames, filenames in os.walk(base):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d != ".git" and d not in links]
        files.extend(_rel(ctx, Path(dirpath, f)) for f in [*filenames, *links] if f != ".git")
    return sorted(files, key=_path_key)


def _grep_records(
    ctx: ToolContext, pattern: str, base: Path, glob: str | None, ignore_case: bool, mode: str
) -> list[str]:
    if base.is_file():
        with open(base, "rb") as f:
            if _is_binary(f.read(BINARY_SNIFF_BYTES)):
                raise ToolError(f"'{_rel(ctx, base)}' is a binary file; grep searches text")
    if ctx.use_ripgrep is True and not ctx.rg_path:
        raise ToolError("ripgrep (rg) was requested but is not installed")
    if ctx.rg_path and ctx.use_ripgrep is not False:
        return _grep_rg(ctx, ctx.rg_path, pattern, base, glob, ignore_case, mode)
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
        cmd.append(_rel(ctx, base))
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
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ToolError(f"invalid regex {pattern!r}: {exc}") from None
    if base.is_file():
        candidates = [_rel(ctx, base)]
    else:
        match = _glob_matcher(glob) if glob else None
        candidates = [
            f
            for f in _list_files(ctx, base)
            if (match is None or match(f)) and not os.path.islink(ctx.root / f)
        ]
    records: list[str] = []
    for rel in candidates:
        try:
            with open(ctx.root / rel, "rb") as f:
                data = f.read(GREP_MAX_FILE_BYTES + 1)
        except OSError:
            continue
        if len(data) > GREP_MAX_FILE_BYTES or _is_binary(data):
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
                records.append(f"{rel}:{n}:{line}")
            elif mode == "files_with_matches":
                break
        if count and mode == "files_with_matches":
            records.append(rel)
        elif count and mode == "count":
            records.append(f"{rel}:{count}")
    return records


def _tool_grep(
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
    shown = [_cut_line(r, GREP_MAX_LINE_CHARS) for r in records[:GREP_MAX_LINES]]
    if len(records) > GREP_MAX_LINES:
        shown.append(
            f"(showing first {GREP_MAX_LINES} of {len(records)} results; "
            "narrow the pattern, path or glob)"
        )
    return ToolOutcome("\n".join(shown), is_error=False)


def _tool_find(ctx: ToolContext, pattern: str, path: str = ".") -> ToolOutcome:
    if not pattern.strip():
        raise ToolError("tool 'find': pattern must not be empty")
    base = resolve_path(ctx, path)
    if not base.is_dir():
        raise ToolError(
            f"'{path}' is not a directory" if base.exists() else f"path not found: '{path}'"
        )
    match = _glob_matcher(pattern)
    prefix = "" if base == ctx.root else _rel(ctx, base) + "/"
    found = [
        f for f in _list_files(ctx, base) if match(f.removeprefix(prefix)) or (prefix and match(f))
    ]
    if not found:
        return ToolOutcome(f"no files match '{pattern}' under '{_rel(ctx, base)}'", False)
    shown = found[:FIND_MAX_PATHS]
    if len(found) > FIND_MAX_PATHS:
        shown.append(f"(showing first {FIND_MAX_PATHS} of {len(found)} paths; narrow the pattern)")
    return ToolOutcome("\n".join(shown), is_error=False)


def _tool_ls(ctx: ToolContext, path: str = ".") -> ToolOutcome:
    target = resolve_path(ctx, path)
    if not target.exists():
        raise ToolError(f"path not found: '{path}'")
    if not target.is_dir():
        raise ToolError(f"'{path}' is a file, not a directory; use read_file to read it")
    try:
        entries = sorted(os.scandir(target), key=lambda e: e.name)
    except OSError as exc:
        raise ToolError(f"cannot list '{path}': {_os_reason(exc)}") from None
    names = []
    for e in entries:
        if e.name == ".git":
            continue
        try:
            is_dir = e.is_dir()
        except OSError:
            is_dir = False
        names.append(e.name + "/" if is_dir else e.name)
    if not names:
        return ToolOutcome(f"(empty directory: {_rel(ctx, target)})", is_error=False)
    if len(names) > LS_MAX_ENTRIES:
        extra = len(names) - LS_MAX_ENTRIES
        names = names[:LS_MAX_ENTRIES] + [f"(... {extra} more entries; use find to narrow)"]
    return ToolOutcome("\n".join(names), is_error=False)


_HANDLERS: Mapping[str, Callable[..., ToolOutcome]] = MappingProxyType(
    {
        "bash": _tool_bash,
        "read_file": _tool_read_file,
        "write_file": _tool_write_file,
        "edit_file": _tool_edit_file,
        "grep": _tool_grep,
        "find": _tool_find,
        "ls": _tool_ls,
    }
)


def execute_tool(ctx: ToolContext, name: str, raw_arguments: str | None) -> ToolOutcome:
    """Run one tool call. Never raises (other than KeyboardInterrupt / SystemExit): every
    problem becomes an ``is_error`` outcome whose text tells the model what to fix."""
    try:
        spec = _SPEC_BY_NAME.get(name)
        if spec is None:
            return ToolOutcome(
                f"unknown tool '{name}'; available tools: {', '.join(TOOL_NAMES)}", is_error=True
            )
        args = _parse_arguments(spec, raw_arguments)
        outcome = _HANDLERS[name](ctx, **args)
    except ToolError as exc:
        outcome = ToolOutcome(str(exc), is_error=True)
    except Exception as exc:  # the model must get a message
        outcome = ToolOutcome(f"tool '{name}' failed: {type(exc).__name__}: {exc}", True)
    if len(outcome.content) > ctx.max_result_chars:
        return ToolOutcome(
            truncate_middle(outcome.content, ctx.max_result_chars),
            outcome.is_error,
            outcome.command_s,
        )
    return outcome
