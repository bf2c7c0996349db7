"""Tests for hero.roles.prompting: templates and their values must match, through the roles too."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from hero.cli import main
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings
from hero.llm.client import LlmClient
from hero.llm.scripted import ScriptedModel, text
from hero.roles.prompting import PromptError, Template, load_template, render
from hero.roles.reviewer import review
from hero.roles.worker import build_messages
from hero.story.format import parse_story_text
from hero.story.record import Story, VerifyTier
from hero.trace import Trace

PROMPTS = REPO_ROOT / "src" / "hero" / "prompts"
PLACEHOLDER = re.compile(r"\{\{\s*\w+\s*\}\}")
APPROVAL = {"verdict": "APPROVED", "summary": "Fine.", "ac_check": [], "comments": []}


def template(text_: str, name: str = "t.md", path: Path | None = None) -> Template:
    return Template(name, path or PROMPTS / name, text_)


@pytest.fixture
def story(tmp_path: Path) -> Story:
    return parse_story_text(
        "---\nid: s1\ntitle: Add sub\nscope: [calc/*.py]\n---\n## Goal\nAdd {{sub}}.\n",
        tmp_path / "s1.md",
    )


@pytest.fixture
def reviewer_model(
    scripted: Callable[..., ScriptedModel],
) -> Iterator[tuple[ScriptedModel, LlmClient]]:
    model = scripted([text(json.dumps(APPROVAL))])
    provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
    client = LlmClient(
        RoleConfig("reviewer", provider, "judge", None),
        LlmSettings(timeout_s=10, max_attempts=1, backoff_base_s=0.01, backoff_max_s=0.01),
    )
    yield model, client


def worker_messages(story: Story, tmp_path: Path, home: Path | None) -> list[str]:
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    tiers = (VerifyTier("tests", ("pytest -q",)),)
    messages = build_messages(
        story, tiers, worktree, round_no=2, max_rounds=3, feedback="fix it", home=home
    )
    return [m["content"] for m in messages]


def reviewer_messages(
    story: Story, tmp_path: Path, home: Path | None, model: ScriptedModel, client: LlmClient
) -> list[str]:
    with Trace(tmp_path / "trace.jsonl") as trace:
        review(
            client,
            story,
            round_no=1,
            branch="hero/s1",
            base_sha="0123456789abcdef",
            verify_summary="- [PASS] tests",
            git_log="abc123 add sub",
            diff_stat=" calc/__init__.py | 2 ++",
            diff="+def sub(a, b):\n",
            home=home,
            trace=trace,
        )
    return [m["content"] for m in model.requests[0].body["messages"]]


# ----------------------------------------------------------------------------- render


def test_render_fills_every_placeholder_once() -> None:
    t = template("{{a}}-{{ b }}-{{a}}")
    assert t.placeholders() == {"a", "b"}
    assert t.render(a=1, b="two") == "1-two-1"


def test_values_are_not_rendered_again() -> None:
    assert template("[{{a}}]").render(a="{{a}} {{b}}") == "[{{a}} {{b}}]"


def test_unknown_placeholder_is_an_error_naming_file_and_names() -> None:
    t = template("{{a}} {{typo}} {{other}}", path=Path("/h/prompts/t.md"))
    with pytest.raises(PromptError) as err:
        t.render(a=1)
    assert str(err.value) == (
        "/h/prompts/t.md (the home's override of t.md): unknown placeholder(s) {{other}}, "
        "{{typo}}, which hero gives no value; it must use exactly {{a}}"
    )


def test_value_the_template_does_not_use_is_an_error() -> None:
    with pytest.raises(PromptError) as err:
        template("only {{a}}").render(a=1, feedback="", round=2)
    assert str(err.value) == (
        f"{PROMPTS / 't.md'} (built in): placeholder(s) {{{{feedback}}}}, {{{{round}}}} "
        "missing from the template; it must use exactly {{a}}, {{feedback}}, {{round}}"
    )


def test_template_without_values_must_have_no_placeholders() -> None:
    assert template("plain {text}").render() == "plain {text}"
    with pytest.raises(PromptError, match=r"unknown placeholder\(s\) \{\{id\}\}.*no placeholders"):
        template("You are {{id}}").render()


def test_load_template_prefers_the_home_override(tmp_path: Path) -> None:
    assert load_template("worker_system.md", tmp_path).path == PROMPTS / "worker_system.md"
    override = tmp_path / "prompts" / "worker_system.md"
    override.parent.mkdir()
    override.write_text("custom")
    loaded = load_template("worker_system.md", tmp_path)
    assert (loaded.path, loaded.text, loaded.overridden) == (override, "custom", True)
    assert render("worker_system.md", tmp_path) == "custom"


def test_unreadable_template_is_a_prompt_error(tmp_path: Path) -> None:
    override = tmp_path / "prompts" / "worker_task.md"
    override.parent.mkdir()
    override.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(PromptError, match=re.escape(str(override))):
        load_template("worker_task.md", tmp_path)


# ----------------------------------------------------------------------------- built-in templates

#: Every built-in template, with the role that renders it and which of its messages it is.
BUILT_IN = {
    "worker_system.md": ("worker", 0),
    "worker_task.md": ("worker", 1),
    "reviewer_system.md": ("reviewer", 0),
    "reviewer_task.md": ("reviewer", 1),
    "planner_system.md": ("planner", 0),
    "planner_task.md": ("planner", 1),
    "planner_retry.md": ("planner", 2),
    "worker_condense.md": ("condense", 0),
}


def condense_messages_for(home: Path | None) -> list[str]:
    """The summary request of a long round, over a history that quotes the story."""
    from hero.roles.worker import condense_prompt

    return [condense_prompt(home)("ASSISTANT: I read {{sub}}")]


def planner_messages_for(story: Story, home: Path | None) -> list[str]:
    """The planner's messages, the plan being the story's text; then its retry message."""
    from hero.roles.planner import planner_messages

    messages = planner_messages(
        story.body, plan_file="PLAN.md", layout="calc/__init__.py", rules="", home=home
    )
    retry = render("planner_retry.md", home, errors="- {{sub}} is no story")
    return [*(m["content"] for m in messages), retry]


def test_every_built_in_template_is_checked_below() -> None:
    assert sorted(p.name for p in PROMPTS.glob("*.md")) == sorted(BUILT_IN)


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_built_in_template_fits_the_values_its_role_passes(
    name: str, story: Story, tmp_path: Path, reviewer_model: tuple[ScriptedModel, LlmClient]
) -> None:
    role, index = BUILT_IN[name]
    if role == "worker":
        sent = worker_messages(story, tmp_path, None)[index]
    elif role == "planner":
        sent = planner_messages_for(story, None)[index]
    elif role == "condense":
        sent = condense_messages_for(None)[index]
    else:
        sent = reviewer_messages(story, tmp_path, None, *reviewer_model)[index]
    built_in = load_template(name)
    assert not built_in.overridden
    # The role rendered it (a mismatch would have raised) and every placeholder was filled:
    # what is left in braces came from the story's own text.
    assert PLACEHOLDER.findall(sent) == (["{{sub}}"] if built_in.placeholders() else [])
    if not built_in.placeholders():
        assert sent == built_in.text


# ----------------------------------------------------------------------------- home overrides


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_override_with_a_typo_fails_in_its_role_naming_the_file(
    name: str, story: Story, tmp_path: Path, reviewer_model: tuple[ScriptedModel, LlmClient]
) -> None:
    home = tmp_path / "home"
    override = home / "prompts" / name
    override.parent.mkdir(parents=True)
    built_in = load_template(name).text
    # A system template takes no values; a task template has one name misspelt.
    name_kept = "{{errors}}" if name == "planner_retry.md" else "{{plan}}"
    kept = name_kept if name.startswith("planner") else "{{id}}"
    if name == "worker_condense.md":
        kept = "{{history}}"
    misspelt = kept.replace("}}", "x}}")
    typo = built_in + "{{verison}}\n" if "system" in name else built_in.replace(kept, misspelt)
    override.write_text(typo)
    model, client = reviewer_model
    with pytest.raises(PromptError) as err:
        if name == "worker_condense.md":
            condense_messages_for(home)
        elif name.startswith("worker"):
            worker_messages(story, tmp_path, home)
        elif name.startswith("planner"):
            planner_messages_for(story, home)
        else:
            reviewer_messages(story, tmp_path, home, model, client)
    message = str(err.value)
    assert message.startswith(f"{override} (the home's override of {name}): ")
    if "system" in name:
        assert "unknown placeholder(s) {{verison}}" in message
        assert message.endswith("it must use no placeholders")
    else:
        assert f"unknown placeholder(s) {misspelt}, which hero gives no value" in message
        assert f"placeholder(s) {kept} missing from the template" in message
    assert model.requests == []  # nothing was sent with a broken prompt


# ----------------------------------------------------------------------------- the pipeline


def test_hero_run_with_a_broken_override_ends_in_error(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = scripted([text("never asked")])
    home = make_home(model)
    override = home / "prompts" / "worker_task.md"
    override.parent.mkdir()
    override.write_text("Story {{id}}: {{titel}}\n")
    story = write_story(home, "s1", verify=["true"])

    assert main(["run", str(story), "--home", str(home)]) == 1

    state = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert state["status"] == "error"
    assert state["error"].startswith(
        f"prompt template error: {override} (the home's override of worker_task.md): "
        "unknown placeholder(s) {{titel}}, which hero gives no value; placeholder(s) {{body}}, "
    )
    assert state["error"] in capsys.readouterr().out
    assert model.requests == []
    assert not (home / "runs" / "s1" / "error.log").exists()  # not an internal error
