"""hero.roles.planner: reading and checking the planner's JSON answer, the retry, the prompt;
hero.roles.repo.repo_layout: what the planner sees of the repository."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import git

from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings
from hero.git.ops import GitError
from hero.llm.client import LlmClient
from hero.llm.scripted import ScriptedModel, text
from hero.roles.planner import (
    PlanInvalid,
    check_answer,
    find_plan_object,
    plan_stories,
    planner_messages,
)
from hero.roles.repo import repo_layout


def story(story_id: str, deps: tuple[str, ...] = (), **fields: Any) -> dict[str, Any]:
    """One story as the planner answers it."""
    entry: dict[str, Any] = {
        "id": story_id,
        "title": f"Story {story_id}",
        "priority": "normal",
        "verify": {"unit": ["python -m unittest"]},
        "scope": ["calc/**"],
        "depends_on": list(deps),
        "body": f"## Goal\nDo {story_id}.\n\n## Acceptance Criteria\n- [ ] {story_id} works\n",
    }
    entry.update(fields)
    return entry


def answer(*stories: dict[str, Any], plan: str = "calc") -> str:
    return json.dumps({"plan": plan, "stories": list(stories)})


VALID = answer(story("a"), story("b", ("a",)), story("c", ("a",)), story("d", ("b", "c")))


def client_for(model: ScriptedModel) -> LlmClient:
    provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
    return LlmClient(
        RoleConfig("planner", provider, "planner-model", None),
        LlmSettings(timeout_s=10, max_attempts=1, backoff_base_s=0.01, backoff_max_s=0.01),
    )


# ----------------------------------------------------------------------------- the answer


def test_a_valid_answer_becomes_stories_hero_would_read() -> None:
    tiers = {"lint": ["ruff check ."], "unit": ["pytest -q", "python -m unittest"]}
    draft = check_answer(
        answer(story("a", priority="high", verify=tiers), story("b", ("a",), verify=["make"]))
    )
    assert draft.plan == "calc"
    assert [s.id for s in draft.stories] == ["a", "b"]
    first = draft.stories[0]
    assert first.metadata["priority"] == "high"
    assert first.story.priority == "high"
    assert [(t.name, t.commands) for t in first.story.verify] == [
        ("lint", ("ruff check .",)),
        ("unit", ("pytest -q", "python -m unittest")),
    ]
    assert first.story.acceptance_criteria == ("a works",)
    assert first.story.scope == ("calc/**",)
    assert draft.stories[1].depends_on == ("a",)
    assert [(t.name, t.commands) for t in draft.stories[1].story.verify] == [("verify", ("make",))]
    assert draft.deps() == {"a": (), "b": ("a",)}
    assert draft.titles() == {"a": "Story a", "b": "Story b"}


def test_declared_tier_order_is_kept_even_against_the_alphabet() -> None:
    tiers = {"zeta": ["true"], "alpha": ["true"], "mid": ["true"]}
    draft = check_answer(answer(story("a", verify=tiers)))
    assert [t.name for t in draft.stories[0].story.verify] == ["zeta", "alpha", "mid"]
    assert list(draft.stories[0].metadata["verify"]) == ["zeta", "alpha", "mid"]


def test_fences_and_prose_around_the_object_are_tolerated() -> None:
    fenced = f"Here is the plan.\n\n```json\n{VALID}\n```\n\nLet me know {{if}} it fits."
    assert [s.id for s in check_answer(fenced).stories] == ["a", "b", "c", "d"]
    bare_fence = f"```\n{VALID}\n```"
    assert len(check_answer(bare_fence).stories) == 4
    prose = f"Sure! {VALID} That is all."
    assert len(check_answer(prose).stories) == 4


def test_of_several_objects_the_one_with_stories_is_taken() -> None:
    text_ = f'First a note: {{"note": "thinking", "n": 1}}\nThen the plan: {VALID}'
    data = find_plan_object(text_)
    assert data is not None and data["plan"] == "calc"
    assert find_plan_object('{"verdict": "x"}') is None


def test_every_problem_of_an_answer_is_listed_not_just_the_first() -> None:
    bad = answer(
        story("root"),
        story("a", ("b", "root")),
        story("b", ("a",)),  # a -> b -> a
        story("c", ("ghost",)),
        story("d", title=None),
        story("e", priority="urgent"),
        story("f", body="## Goal\nNo criteria here.\n"),
        story("root"),
        story("g", ("g", "root")),
    )
    with pytest.raises(PlanInvalid) as caught:
        check_answer(bad)
    assert caught.value.errors == [
        "story 5 ('d'): title: required field is missing; expected a non-empty string",
        "story 6 ('e'): priority: expected one of low, normal, high; found the string 'urgent'",
        "story 7 ('f'): body: expected a '## Acceptance Criteria' section listing verifiable "
        "criteria (- [ ] ...); found none",
        "story 8 ('root'): id: expected unique ids; story 1 has this id too",
        "c: depends on 'ghost', which is not a story of the plan",
        "g: depends on itself",
        "cycle: a -> b -> a (each story depends on the next)",
    ]


def test_shape_problems_are_named() -> None:
    with pytest.raises(PlanInvalid) as caught:
        check_answer(
            json.dumps(
                {
                    "stories": [
                        "not an object",
                        story("a", estimate=3),
                        story("b", body=""),
                        story("c", depends_on=[1]),
                        story("plan"),
                        story("bad id!"),
                    ]
                }
            )
        )
    errors = caught.value.errors
    assert errors[0] == "story 1: expected a JSON object; found the string 'not an object'"
    assert errors[1].startswith("story 2 ('a'): unknown key(s) 'estimate'; expected only id,")
    assert errors[2].startswith("story 3 ('b'): body: expected the story's markdown")
    assert errors[3].startswith("story 4 ('c'): depends_on: expected a list of non-empty")
    assert errors[4].startswith("story 5 ('plan'): id: expected another name: 'plan' is reserved")
    assert errors[5].startswith("story 6 ('bad id!'): id: expected letters, digits")
    assert len(errors) == 6


def test_no_root_and_no_stories_are_refused() -> None:
    with pytest.raises(PlanInvalid) as caught:
        check_answer(answer(story("a", ("b",)), story("b", ("a",))))
    assert caught.value.errors[-1].startswith("no root: every story depends on another")
    with pytest.raises(PlanInvalid) as caught:
        check_answer('{"plan": "x", "stories": []}')
    assert caught.value.errors == [
        '"stories": expected a non-empty list of story objects; found an empty list'
    ]


def test_an_answer_without_usable_json_says_what_is_wrong() -> None:
    with pytest.raises(PlanInvalid) as caught:
        check_answer("I would split it into three stories.")
    assert caught.value.errors == ['the answer held no JSON object with a "stories" list']
    with pytest.raises(PlanInvalid) as caught:
        check_answer('```json\n{"plan": "x", "stories": [,]}\n```')
    assert caught.value.errors[0].startswith("the answer's JSON is not valid (Expecting value")
    with pytest.raises(PlanInvalid) as caught:
        check_answer("")
    assert caught.value.errors[0].startswith("the answer was empty")


# ----------------------------------------------------------------------------- the call


def test_an_invalid_answer_goes_back_once_with_its_exact_errors(
    scripted: Callable[..., ScriptedModel],
) -> None:
    bad = answer(story("a"), story("b", ("zzz",)), story("c", priority="soon"))
    model = scripted([text(bad), text(VALID)])
    draft = plan_stories(
        client_for(model), "# Plan\nDo it.", plan_file="p.md", layout="x.py", rules="", home=None
    )
    assert draft.answers == 2
    assert [s.id for s in draft.stories] == ["a", "b", "c", "d"]
    assert len(model.requests) == 2
    first, second = (r.body["messages"] for r in model.requests)
    assert second[:2] == first
    assert second[2] == {"role": "assistant", "content": bad}
    assert second[3]["role"] == "user"
    retry = second[3]["content"]
    assert (
        "- story 3 ('c'): priority: expected one of low, normal, high; found the string "
        "'soon'" in retry
    )
    assert "- b: depends on 'zzz', which is not a story of the plan" in retry
    assert len(second) == 4


def test_an_answer_still_invalid_raises_with_the_last_errors(
    scripted: Callable[..., ScriptedModel],
) -> None:
    model = scripted(
        [text(answer(story("a", ("a",)))), text(answer(story("a"), story("b", ("c",))))]
    )
    with pytest.raises(PlanInvalid) as caught:
        plan_stories(
            client_for(model), "# Plan", plan_file="p.md", layout="x.py", rules="", home=None
        )
    assert caught.value.errors == ["b: depends on 'c', which is not a story of the plan"]
    assert len(model.requests) == 2  # asked once more, never a third time


def test_the_task_holds_the_plan_the_layout_the_rules_and_the_contract() -> None:
    messages = planner_messages(
        "# Login\nAdd a login page.",
        plan_file="login.md",
        layout="app/main.py\ntests/test_main.py",
        rules="## Repository rules (follow them)\n### AGENTS.md\nRun `make check`.",
        home=None,
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "planner" in messages[0]["content"]
    task = messages[1]["content"]
    assert "login.md" in task
    assert "Add a login page." in task
    assert "app/main.py\ntests/test_main.py" in task
    assert "Run `make check`." in task
    for key in ('"plan"', '"stories"', '"depends_on"', '"verify"', '"scope"', '"body"'):
        assert key in task
    assert "## Acceptance Criteria" in task
    no_rules = planner_messages("x", plan_file="p.md", layout="", rules="", home=None)
    assert "(none: the repository has no AGENTS.md" in no_rules[1]["content"]


def test_a_home_may_override_the_planner_prompts(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "planner_system.md").write_text("Be a careful planner.")
    messages = planner_messages("x", plan_file="p.md", layout="", rules="", home=tmp_path)
    assert messages[0]["content"] == "Be a careful planner."


# ----------------------------------------------------------------------------- repo_layout


def test_layout_lists_tracked_files_only(target_repo: Path) -> None:
    (target_repo / "notes with space.md").write_text("x")
    (target_repo / "untracked.txt").write_text("x")
    git(target_repo, "add", "notes with space.md")
    git(target_repo, "commit", "-q", "-m", "notes")
    layout = repo_layout(target_repo).splitlines()
    assert "calc/__init__.py" in layout
    assert "tests/test_calc.py" in layout
    assert "notes with space.md" in layout
    assert "untracked.txt" not in layout


def test_layout_is_cut_with_a_note_of_what_was_left_out(target_repo: Path) -> None:
    (target_repo / "pkg").mkdir()
    for i in range(50):
        (target_repo / "pkg" / f"module_{i:02d}.py").write_text("")
    git(target_repo, "add", "-A")
    git(target_repo, "commit", "-q", "-m", "many")
    full = repo_layout(target_repo)
    total = len(full.splitlines())
    cut = repo_layout(target_repo, max_chars=200)
    lines = cut.splitlines()
    assert len(cut) < 400
    shown = len(lines) - 1
    assert lines[-1].startswith(f"[... {total - shown} more of {total} tracked files not shown")
    assert "pkg/ (" in lines[-1]


def test_layout_of_a_folder_that_is_no_repository_is_a_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError):
        repo_layout(tmp_path)
