"""Confinement: every path a tool touches resolves inside the worktree; the one guarded write."""

from __future__ import annotations

from pathlib import Path

from hero.agent.tools.context import ToolContext, ToolError, os_reason


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


def rel(ctx: ToolContext, path: Path) -> str:
    """``path`` (inside the worktree) as a root-relative posix path; "." for the root."""
    rel_path = path.relative_to(ctx.root).as_posix()
    return rel_path if rel_path else "."


def in_git_dir(ctx: ToolContext, path: Path) -> bool:
    return any(part.lower() == ".git" for part in path.relative_to(ctx.root).parts)


def write_text_file(ctx: ToolContext, rel_path: str, content: str) -> Path:
    """The one guarded write: confined to the worktree, never into .git; creates parents."""
    path = resolve_path(ctx, rel_path)
    if path == ctx.root or path.is_dir():
        raise ToolError(f"path '{rel_path}' is a directory")
    if in_git_dir(ctx, path):
        raise ToolError(f"path '{rel_path}' is inside .git; writing there is not allowed")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(content)
    except (OSError, UnicodeError) as exc:
        raise ToolError(f"cannot write '{rel_path}': {os_reason(exc)}") from None
    return path
