"""What a role reads of the target repository besides the story: its rules for agents and
the layout of its files."""

from __future__ import annotations

from pathlib import Path

from hero.gitops import git

#: Files in the target repo whose rules the worker must follow, in this order.
RULE_FILES = ("AGENTS.md", "CLAUDE.md")
RULE_DIRS = (".roo/rules",)
MAX_RULES_CHARS = 20_000


def repo_rules(worktree: Path) -> str:
    """The repository's own instructions for agents, each file under its own heading."""
    paths = [worktree / name for name in RULE_FILES]
    for directory in RULE_DIRS:
        d = worktree / directory
        if d.is_dir():
            paths.extend(sorted(p for p in d.iterdir() if p.is_file()))
    parts = []
    for path in paths:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        if len(text) > MAX_RULES_CHARS:
            text = text[:MAX_RULES_CHARS] + f"\n[... {len(text) - MAX_RULES_CHARS} characters cut]"
        parts.append(f"### {path.relative_to(worktree)}\n{text}")
    if not parts:
        return ""
    return "\n## Repository rules (follow them)\n" + "\n\n".join(parts) + "\n"


#: How much of the repository's file list the planner is shown.
MAX_LAYOUT_CHARS = 12_000


def repo_layout(repo: Path, max_chars: int = MAX_LAYOUT_CHARS) -> str:
    """The files git tracks in ``repo`` (``git ls-files``), one path a line, cut to about
    ``max_chars`` with a last line saying how many files were left out, and where.

    GitError (from :func:`hero.gitops.git`) when ``repo`` is not a git repository.
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
