"""The file tools: read_file, write_file, edit_file and ls."""

from __future__ import annotations

import os
from pathlib import Path

from hero.agent.tools.context import ToolContext, ToolError, ToolOutcome, os_reason
from hero.agent.tools.paths import (
    open_in_worktree,
    read_all,
    rel,
    write_file_bytes,
    write_text_file,
)
from hero.agent.tools.text import BINARY_SNIFF_BYTES, LINE_MAX_CHARS, cut_line, is_binary

READ_DEFAULT_LIMIT = 400
READ_MAX_LINE_CHARS = 2000
DIFF_MAX_LINES = 80
LS_MAX_ENTRIES = 500


def _read_text(ctx: ToolContext, rel_path: str) -> tuple[Path, str]:
    opened = open_in_worktree(ctx, rel_path, "read")
    try:
        data = read_all(opened.fd)
    except OSError as exc:
        raise ToolError(f"cannot read '{rel_path}': {os_reason(exc)}") from None
    finally:
        os.close(opened.fd)
    if is_binary(data):
        raise ToolError(f"'{rel_path}' is a binary file ({len(data)} bytes); not shown")
    return opened.path, data.decode("utf-8", errors="surrogateescape")


def _diff(rel_path: str, old: str, new: str) -> str:
    import difflib  # an edit's answer only: off hero's start

    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"a/{rel_path}", f"b/{rel_path}", lineterm="", n=3
        )
    )
    lines = [cut_line(line, LINE_MAX_CHARS) for line in lines]
    if len(lines) > DIFF_MAX_LINES:
        extra = len(lines) - DIFF_MAX_LINES
        lines = lines[:DIFF_MAX_LINES] + [f"... (diff cut: {extra} more lines)"]
    return "\n".join(lines).encode("utf-8", "replace").decode("utf-8")


def _count_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def tool_read_file(
    ctx: ToolContext, path: str, offset: int = 1, limit: int = READ_DEFAULT_LIMIT
) -> ToolOutcome:
    if offset < 0:
        raise ToolError("tool 'read_file': offset is 1-based and must be >= 1")
    offset = max(offset, 1)
    if limit < 1:
        raise ToolError("tool 'read_file': limit must be >= 1")
    opened = open_in_worktree(ctx, path, "read")
    budget = max(1000, ctx.max_result_chars - 200)
    out: list[str] = []
    used = 0
    end = offset - 1
    total = 0
    try:
        with os.fdopen(opened.fd, "rb") as f:
            if is_binary(f.read(BINARY_SNIFF_BYTES)):
                size = os.fstat(f.fileno()).st_size
                raise ToolError(f"'{path}' is a binary file ({size} bytes); not shown")
            f.seek(0)
            for total, raw in enumerate(f, 1):
                if total < offset or total >= offset + limit or (out and used > budget):
                    continue
                line = raw.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
                text = f"{total:>6}\t{cut_line(line, READ_MAX_LINE_CHARS)}"
                if out and used + len(text) + 1 > budget:
                    used = budget + 1  # stop collecting; keep counting lines
                    continue
                out.append(text)
                used += len(text) + 1
                end = total
    except OSError as exc:
        raise ToolError(f"cannot read '{path}': {os_reason(exc)}") from None
    if total == 0:
        return ToolOutcome(f"(empty file: {path})", is_error=False)
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of '{path}' ({total} lines)")
    if end < total:
        out.append(f"(lines {offset}-{end} of {total}; use offset={end + 1} to read more)")
    elif offset > 1:
        out.append(f"(lines {offset}-{end} of {total})")
    return ToolOutcome("\n".join(out), is_error=False)


def tool_write_file(ctx: ToolContext, path: str, content: str) -> ToolOutcome:
    written = write_file_bytes(ctx, path, content)
    rel_path = rel(ctx, written.path)
    if written.old is None:
        return ToolOutcome(f"created {rel_path} ({_count_lines(content)} lines)", is_error=False)
    diff = _diff(rel_path, written.old.decode("utf-8", errors="replace"), content)
    if not diff:
        return ToolOutcome(f"{rel_path} unchanged (same content)", is_error=False)
    return ToolOutcome(f"updated {rel_path}\n{diff}", is_error=False)


def tool_edit_file(
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
    rel_path = rel(ctx, file)
    plural = "" if count == 1 else "s"
    return ToolOutcome(
        f"edited {rel_path} ({count} replacement{plural})\n{_diff(rel_path, text, new_text)}",
        is_error=False,
    )


def tool_ls(ctx: ToolContext, path: str = ".") -> ToolOutcome:
    opened = open_in_worktree(ctx, path, "list")
    target = opened.path
    names = []
    try:
        # Listed through the descriptor the walk opened; each entry's type is asked while it
        # is still open (an entry's stat is relative to it).
        with os.scandir(opened.fd) as it:
            for e in sorted(it, key=lambda e: e.name):
                if e.name.lower() == ".git":
                    continue
                try:
                    is_dir = e.is_dir(follow_symlinks=False)  # never stat outside
                except OSError:
                    is_dir = False
                names.append(e.name + "/" if is_dir else e.name)
    except OSError as exc:
        raise ToolError(f"cannot list '{path}': {os_reason(exc)}") from None
    finally:
        os.close(opened.fd)
    if not names:
        return ToolOutcome(f"(empty directory: {rel(ctx, target)})", is_error=False)
    if len(names) > LS_MAX_ENTRIES:
        extra = len(names) - LS_MAX_ENTRIES
        names = names[:LS_MAX_ENTRIES] + [f"(... {extra} more entries; use find to narrow)"]
    return ToolOutcome("\n".join(names), is_error=False)
