"""The worker's prompt: the story, its scope and checks, the repo's own rules, feedback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hero.roles.prompting import load_template, render, render_added
from hero.roles.repo import MAX_RULES_CHARS as MAX_RULES_CHARS
from hero.roles.repo import repo_rules
from hero.story.record import Story, VerifyTier


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
    builds_on: str = "",
    memory: str = "",
    baseline: str = "",
    feedback_title: str = "",
) -> list[dict[str, Any]]:
    """The system and task messages; raises PromptError for a template that does not fit.

    ``memory``: what the repository's memory tells the story (hero.memory.recall), computed
    once at the round's start. It goes into the task message, after the repository's rules
    and before the feedback, never into the system message: the system message and the
    task are the same on every turn of the round (the prompt's cached prefix), and ""
    leaves the task byte for byte as without memory. ``feedback_title``: the heading of
    the feedback ("": the reviewer's feedback on the round before; a follow-up's findings
    have their own, hero.run.revision)."""
    system = render("worker_system.md", home)
    task = render_added(
        "worker_task.md",
        home,
        {"memory": memory, "baseline": baseline},
        id=story.id,
        title=story.title,
        body=story.body.strip(),
        scope=format_scope(story.scope),
        verify=format_verify(tiers),
        repo_rules=repo_rules(worktree),
        builds_on=(
            "\n## Builds on (their work is already in your branch; build on it, keep it working)\n"
            f"{builds_on.strip()}\n"
            if builds_on.strip()
            else ""
        ),
        feedback=(
            f"\n## {feedback_title or f'Feedback on round {round_no - 1} (address every point)'}"
            f"\n{feedback.strip()}\n"
            if feedback
            else ""
        ),
        round=round_no,
        max_rounds=max_rounds,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": task}]


def condense_prompt(home: Path | None) -> Callable[[str], str]:
    """The prompt that asks the model for a summary of a round's older turns (the
    ``worker_condense.md`` template, overridable per home); checked now, so that a broken
    override fails the round before its first turn, not in the middle of it."""
    template = load_template("worker_condense.md", home)
    template.render(history="")
    return lambda history: template.render(history=history)
