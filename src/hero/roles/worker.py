"""The worker's prompt: the story, its scope and checks, the repo's own rules, feedback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hero.prompting import render
from hero.story import Story, VerifyTier

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


def format_verify(tiers: tuple[VerifyTier, ...]) -> str:
    if not tiers:
        return "(none configured: check your work with the repository's own tests)"
    lines = []
    for tier in tiers:
        lines.append(f"- {tier.name}:")
        lines.extend(f"  - `{cmd}`" for cmd in tier.commands)
    return "\n".join(lines)


def format_scope(scope: tuple[str, ...]) -> str:
    if not scope:
        return "(whole repository)"
    return "Change only files matching: " + ", ".join(f"`{g}`" for g in scope)


def build_messages(
    story: Story,
    tiers: tuple[VerifyTier, ...],
    worktree: Path,
    *,
    round_no: int,
    max_rounds: int,
    feedback: str,
    home: Path | None,
) -> list[dict[str, Any]]:
    """The system and task messages; raises PromptError for a template that does not fit."""
    system = render("worker_system.md", home)
    task = render(
        "worker_task.md",
        home,
        id=story.id,
        title=story.title,
        body=story.body.strip(),
        scope=format_scope(story.scope),
        verify=format_verify(tiers),
        repo_rules=repo_rules(worktree),
        feedback=(
            f"\n## Feedback on round {round_no - 1} (address every point)\n{feedback.strip()}\n"
            if feedback
            else ""
        ),
        round=round_no,
        max_rounds=max_rounds,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": task}]
