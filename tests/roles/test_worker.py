"""Tests for the worker's prompt: hero.roles.worker.build_messages, repo_rules, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from hero.roles.prompting import PromptError, load_template
from hero.roles.worker import MAX_RULES_CHARS, build_messages, repo_rules
from hero.story.format import parse_story
from hero.story.record import Story, VerifyTier

STORY = """\
---
id: add-sub
title: Add subtraction
scope: [calc/*.py, tests/test_calc.py]
verify:
  fast: [ruff check calc]
  tests: [python -m unittest -q, python -m doctest README.md]
---
## Goal
Add a `sub(a, b)` function to calc.

## Acceptance Criteria
- [ ] `calc.sub(5, 3) == 2`
- [ ] negative results work

## Constraints
Standard library only.

## Out of Scope
Multiplication and division.
"""


@pytest.fixture
def story(tmp_path: Path) -> Story:
    path = tmp_path / "add-sub.md"
    path.write_text(STORY)
    return parse_story(path)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    wt.mkdir()
    return wt


def build(
    story: Story,
    worktree: Path,
    *,
    round_no: int = 1,
    max_rounds: int = 3,
    feedback: str = "",
    home: Path | None = None,
) -> tuple[str, str]:
    messages = build_messages(
        story,
        story.verify,
        worktree,
        round_no=round_no,
        max_rounds=max_rounds,
        feedback=feedback,
        home=home,
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[0]["content"], messages[1]["content"]


def test_task_holds_the_story(story: Story, worktree: Path) -> None:
    _, task = build(story, worktree)
    assert "add-sub" in task
    assert "Add subtraction" in task
    assert "Add a `sub(a, b)` function to calc." in task
    assert "`calc.sub(5, 3) == 2`" in task
    assert "negative results work" in task
    assert "Standard library only." in task
    assert "Multiplication and division." in task
    assert "{{" not in task


def test_task_lists_scope_globs(story: Story, worktree: Path) -> None:
    _, task = build(story, worktree)
    assert "Change only files matching: `calc/*.py`, `tests/test_calc.py`" in task


def test_task_without_scope_says_whole_repository(tmp_path: Path, worktree: Path) -> None:
    path = tmp_path / "plain.md"
    path.write_text("---\nid: plain\ntitle: Plain\n---\n## Goal\nDo it.\n")
    story = parse_story(path)
    _, task = build(story, worktree)
    assert "(whole repository)" in task
    assert "(none configured" in task


def test_task_lists_verify_commands_by_tier(story: Story, worktree: Path) -> None:
    _, task = build(story, worktree)
    expected = (
        "- fast:\n  - `ruff check calc`\n"
        "- tests:\n  - `python -m unittest -q`\n  - `python -m doctest README.md`"
    )
    assert expected in task
    assert task.index("- fast:") < task.index("- tests:")


def test_verify_tiers_come_from_the_argument(story: Story, worktree: Path) -> None:
    messages = build_messages(
        story,
        (VerifyTier("default", ("make check",)),),
        worktree,
        round_no=1,
        max_rounds=2,
        feedback="",
        home=None,
    )
    task = messages[1]["content"]
    assert "- default:\n  - `make check`" in task
    assert "ruff check calc" not in task


def test_round_numbers(story: Story, worktree: Path) -> None:
    _, task = build(story, worktree, round_no=2, max_rounds=5, feedback="fix it")
    assert "This is round 2 of at most 5." in task


def test_no_feedback_in_round_one(story: Story, worktree: Path) -> None:
    _, task = build(story, worktree, round_no=1, feedback="")
    assert "Feedback on round" not in task
    assert "This is round 1 of at most 3." in task


def test_feedback_from_round_two(story: Story, worktree: Path) -> None:
    feedback = "**CHANGES_REQUESTED**: tests missing\n- [blocker] calc/__init__.py:3: wrong sign"
    _, task = build(story, worktree, round_no=2, feedback=feedback + "\n\n")
    assert "## Feedback on round 1 (address every point)" in task
    assert feedback in task
    assert task.index("Feedback on round 1") < task.index("This is round 2")


def test_system_prompt_is_the_packaged_one(story: Story, worktree: Path) -> None:
    system, _ = build(story, worktree)
    assert system == load_template("worker_system.md").text
    assert "worker" in system.lower()


def test_repo_rules_included_when_present(story: Story, worktree: Path) -> None:
    (worktree / "AGENTS.md").write_text("Use tabs, never spaces.\n")
    (worktree / "CLAUDE.md").write_text("Run make lint before committing.\n")
    rules = worktree / ".roo" / "rules"
    rules.mkdir(parents=True)
    (rules / "02-style.md").write_text("Names in snake_case.\n")
    (rules / "01-tests.md").write_text("Every change gets a test.\n")

    _, task = build(story, worktree)

    assert "## Repository rules (follow them)" in task
    for heading, text in [
        ("### AGENTS.md", "Use tabs, never spaces."),
        ("### CLAUDE.md", "Run make lint before committing."),
        ("### .roo/rules/01-tests.md", "Every change gets a test."),
        ("### .roo/rules/02-style.md", "Names in snake_case."),
    ]:
        assert f"{heading}\n{text}" in task
    order = [task.index(h) for h in ("AGENTS.md", "CLAUDE.md", "01-tests.md", "02-style.md")]
    assert order == sorted(order)


def test_no_rules_section_without_rule_files(story: Story, worktree: Path) -> None:
    assert repo_rules(worktree) == ""
    _, task = build(story, worktree)
    assert "Repository rules" not in task


def test_repo_rules_single_file(worktree: Path) -> None:
    (worktree / "CLAUDE.md").write_text("Only this.\n")
    rules = repo_rules(worktree)
    assert "### CLAUDE.md\nOnly this." in rules
    assert "AGENTS.md" not in rules


def test_long_rules_are_cut(worktree: Path) -> None:
    (worktree / "AGENTS.md").write_text("x" * (MAX_RULES_CHARS + 500))
    rules = repo_rules(worktree)
    assert "[... 500 characters cut]" in rules
    assert len(rules) < MAX_RULES_CHARS + 200


def test_system_prompt_override_from_home(story: Story, worktree: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "prompts").mkdir(parents=True)
    (home / "prompts" / "worker_system.md").write_text("You are a custom worker.\n")

    system, task = build(story, worktree, home=home)

    assert system == "You are a custom worker.\n"
    # The task template was not overridden: the packaged one is used.
    assert "This is round 1 of at most 3." in task


def test_task_prompt_override_from_home(story: Story, worktree: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "prompts").mkdir(parents=True)
    (home / "prompts" / "worker_task.md").write_text(
        "Do {{id}} ({{ title }}) in round {{round}}/{{max_rounds}}.\n{{body}}\n{{scope}}\n"
        "{{verify}}{{builds_on}}{{repo_rules}}{{feedback}}\n"
    )
    system, task = build(story, worktree, round_no=2, feedback="x", home=home)
    assert task.startswith("Do add-sub (Add subtraction) in round 2/3.\n## Goal\n")
    assert "## Feedback on round 1 (address every point)\nx" in task
    assert system == load_template("worker_system.md").text


def test_task_prompt_override_with_a_typo_is_an_error(
    story: Story, worktree: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / "prompts").mkdir(parents=True)
    override = home / "prompts" / "worker_task.md"
    override.write_text(
        "{{id}} {{title}} {{body}} {{scope}} {{verfiy}} {{builds_on}} {{repo_rules}} "
        "{{feedback}} {{round}} {{max_rounds}}\n"
    )
    with pytest.raises(PromptError) as err:
        build(story, worktree, home=home)
    message = str(err.value)
    assert message.startswith(f"{override} (the home's override of worker_task.md): ")
    assert "unknown placeholder(s) {{verfiy}}" in message
    assert "placeholder(s) {{verify}} missing from the template" in message


def test_home_without_prompts_uses_packaged_templates(
    story: Story, worktree: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert build(story, worktree, home=home) == build(story, worktree, home=None)


def test_story_text_with_braces_is_not_rendered_again(tmp_path: Path, worktree: Path) -> None:
    path = tmp_path / "braces.md"
    path.write_text("---\nid: braces\ntitle: Braces\n---\n## Goal\nKeep {{round}} literal.\n")
    _, task = build(parse_story(path), worktree, round_no=2, feedback="see {{id}}")
    assert "Keep {{round}} literal." in task
    assert "see {{id}}" in task


def test_builds_on_names_the_stories_a_story_starts_from(story: Story, worktree: Path) -> None:
    tiers = (VerifyTier("tests", ("pytest -q",)),)
    kwargs = {"round_no": 1, "max_rounds": 3, "feedback": "", "home": None}
    plain = build_messages(story, tiers, worktree, **kwargs)[1]["content"]  # type: ignore[arg-type]
    assert "## Builds on" not in plain
    deps = "- p/a: Add a (branch hero/plans/p/a)\n- p/b: Add b (branch hero/plans/p/b)"
    task = build_messages(story, tiers, worktree, builds_on=deps, **kwargs)[1]["content"]  # type: ignore[arg-type]
    section = task.split("## Builds on", 1)[1]
    assert "- p/a: Add a (branch hero/plans/p/a)" in section
    assert "- p/b: Add b (branch hero/plans/p/b)" in section
