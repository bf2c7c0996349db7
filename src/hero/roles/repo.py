"""What a role reads of the target repository besides the story: its rules for agents and
the layout of its files.

The rules files are in the worker's reach: between two rounds it may have made any of them
(or ``.roo``, or ``.roo/rules``) a symlink to a host file, a FIFO, or a huge file. hero reads
them itself, outside any sandbox, to build prompts, so each one is opened the way the file
tools open a path (:func:`hero.agent.tools.paths.open_in_worktree`): one component at a time
from the worktree's descriptor, never following a symlink out of the worktree, a regular file
only (no FIFO, no device, no hard link), and read with a size limit. What cannot be read so
is left out with a one-line note in its place; nothing here stops a story.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path

from hero.agent.tools.context import ToolContext, ToolError
from hero.agent.tools.paths import open_in_worktree
from hero.git.ops import git

#: Files in the target repo whose rules the worker must follow, in this order.
RULE_FILES = ("AGENTS.md", "CLAUDE.md")
RULE_DIRS = (".roo/rules",)
#: Characters shown of one rules file; the rest is cut, with a note saying how much.
MAX_RULES_CHARS = 20_000
#: Bytes read of one rules file: enough for MAX_RULES_CHARS characters of UTF-8, never more.
MAX_RULES_BYTES = 4 * MAX_RULES_CHARS
#: Characters shown of all rules files together; the files after are left out, with a note.
MAX_RULES_TOTAL_CHARS = 100_000
#: Entries of a rules directory looked at, and files of it shown.
MAX_RULE_DIR_ENTRIES = 1_000
MAX_RULE_DIR_FILES = 50


def repo_rules(worktree: Path) -> str:
    """The repository's own instructions for agents, each file under its own heading.

    A rules file that is missing is left out; one that cannot be read safely (a link out of
    the worktree, not a regular file, a hard link) is named with the reason instead of its
    text. Each file is cut at MAX_RULES_CHARS characters, all of them together at
    MAX_RULES_TOTAL_CHARS (plus the notes saying so)."""
    if not worktree.is_dir():
        return ""
    ctx = ToolContext(root=worktree, env={})
    names: list[str] = list(RULE_FILES)
    notes: list[str] = []
    for directory in RULE_DIRS:
        found, note = _rule_dir_files(ctx, directory)
        names.extend(found)
        if note:
            notes.append(note)
    parts: list[str] = []
    seen: dict[tuple[int, int], str] = {}  # CLAUDE.md -> AGENTS.md: shown once
    total = 0
    for n, name in enumerate(names):
        if total >= MAX_RULES_TOTAL_CHARS:
            notes.append(
                f"[... {len(names) - n} more rules files not shown: hero shows at most "
                f"{MAX_RULES_TOTAL_CHARS} characters of repository rules]"
            )
            break
        text = _rule_file_text(ctx, name, seen)
        if text is None:
            continue
        room = MAX_RULES_TOTAL_CHARS - total
        if len(text) > room:
            text = text[:room] + f"\n[... {len(text) - room} characters cut: rules too long]"
        total += len(text)
        parts.append(f"### {name}\n{text}")
    parts.extend(notes)
    if not parts:
        return ""
    return "\n## Repository rules (follow them)\n" + "\n\n".join(parts) + "\n"


def _not_there(exc: ToolError) -> bool:
    """The path does not exist, or names a directory where a file was looked for: left out
    without a note, as in a repository without that file."""
    message = str(exc)
    return message.startswith(("file not found:", "path not found:")) or "is a directory" in message


def _rule_dir_files(ctx: ToolContext, directory: str) -> tuple[list[str], str]:
    """The root-relative paths of the entries of ``directory`` that may be rules files
    (regular files and symlinks, sorted by name), and a note ("" when none) when the
    directory could not be listed or had more than hero shows."""
    try:
        opened = open_in_worktree(ctx, directory, "list")
    except ToolError as exc:
        return [], "" if _not_there(exc) else f"[{directory}/ not read: {exc}]"
    names: list[str] = []
    more = False
    try:
        with os.scandir(opened.fd) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_RULE_DIR_ENTRIES:
                    more = True
                    break
                try:
                    if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError as exc:
        return [], f"[{directory}/ not read: {exc.strerror or exc}]"
    finally:
        os.close(opened.fd)
    names.sort()
    if len(names) > MAX_RULE_DIR_FILES:
        names = names[:MAX_RULE_DIR_FILES]
        more = True
    note = (
        f"[... {directory}/ has more files than hero reads; only the first "
        f"{len(names)} by name are shown]"
        if more
        else ""
    )
    return [f"{directory}/{name}" for name in names], note


def _rule_file_text(ctx: ToolContext, name: str, seen: dict[tuple[int, int], str]) -> str | None:
    """The text of the rules file ``name`` (root-relative), cut to MAX_RULES_CHARS; a
    one-line note when it cannot be read safely or was shown already; None when it does not
    exist."""
    try:
        opened = open_in_worktree(ctx, name, "read")
    except ToolError as exc:
        return None if _not_there(exc) else f"[not read: {exc}]"
    try:
        if any(part.lower() == ".git" for part in opened.path.relative_to(ctx.root).parts):
            return "[not read: it leads into .git]"
        info = os.fstat(opened.fd)
        identity = (info.st_dev, info.st_ino)
        if identity in seen:
            return f"(the same file as {seen[identity]})"
        seen[identity] = name
        data = _read_at_most(opened.fd, MAX_RULES_BYTES)
    except OSError as exc:
        return f"[not read: {exc.strerror or exc}]"
    finally:
        os.close(opened.fd)
    if len(data) > MAX_RULES_BYTES:  # too big to count its characters: say its size
        # not final: a character cut in half at the limit is dropped, not replaced
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = decoder.decode(data[:MAX_RULES_BYTES], final=False).strip()[:MAX_RULES_CHARS]
        size = max(info.st_size, len(data))
        return (
            f"{text}\n[... cut: the file has {size} bytes; only its first "
            f"{MAX_RULES_CHARS} characters are shown]"
        )
    text = data.decode("utf-8", errors="replace").strip()
    if len(text) > MAX_RULES_CHARS:
        text = text[:MAX_RULES_CHARS] + f"\n[... {len(text) - MAX_RULES_CHARS} characters cut]"
    return text


def _read_at_most(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes from ``fd``: one more than allowed says it is bigger."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit and (chunk := os.read(fd, min(limit + 1 - size, 1 << 20))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


#: How much of the repository's file list the planner is shown.
MAX_LAYOUT_CHARS = 12_000


def repo_layout(repo: Path, max_chars: int = MAX_LAYOUT_CHARS) -> str:
    """The files git tracks in ``repo`` (``git ls-files``), one path a line, cut to about
    ``max_chars`` with a last line saying how many files were left out, and where.

    GitError (from :func:`hero.git.ops.git`) when ``repo`` is not a git repository.
    """
    # -z: names as they are, not C-quoted (a space or an accent stays readable)
    files = [f for f in git(repo, "ls-files", "-z").split("\0") if f]
    if not files:
        return "(no tracked files)"
    shown: list[str] = []
    size = 0
    for path in files:
        if size + len(path) + 1 > max_chars:
            break
        shown.append(path)
        size += len(path) + 1
    left_out = files[len(shown) :]
    if left_out:
        # where the unseen files are, so that a big repository's later folders are not unknown
        folders: dict[str, int] = {}
        for path in left_out:
            top = path.split("/", 1)[0] + ("/" if "/" in path else "")
            folders[top] = folders.get(top, 0) + 1
        where = ", ".join(f"{top} ({n})" for top, n in list(folders.items())[:40])
        more = f", and {len(folders) - 40} more places" if len(folders) > 40 else ""
        shown.append(
            f"[... {len(left_out)} more of {len(files)} tracked files not shown; "
            f"by top-level folder: {where}{more}]"
        )
    return "\n".join(shown)
