"""End to end: follow-ups (`revises:`, `hero revise`) on the scripted server over real HTTP,
with real git: more rounds for a finished story on its own branch, from its tip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import VERIFY_SUB, is_ancestor, task_text
from run_support import (
    APPROVE,
    COMMIT,
    good_worker,
    policy,
    review_requests,
    run_hero,
    worker_requests,
)

from hero.cli import main
from hero.llm.scripted import call, text
from hero.story.followup import Finding, write_followup

FINDING = "Add a docstring to calc.sub saying it subtracts"


def _state(home: Path, story_id: str) -> dict[str, Any]:
    return json.loads((home / "runs" / "state" / f"{story_id}.json").read_text())


def _docs_work(msg: str = "docstring") -> list[Any]:
    """The follow-up's worker: a docstring on calc.sub, committed."""
    return [
        call(
            "edit_file",
            path="calc/__init__.py",
            old_string="def sub(a, b):\n",
            new_string='def sub(a, b):\n    """Subtract b from a."""\n',
        ),
        call("bash", command=COMMIT.format(msg=msg)),
        text("Documented sub."),
    ]


def _passed_story(scripted, make_home, write_story, workers: dict[str, Any]) -> tuple[Path, Any]:
    model = scripted(policy({"s1": good_worker(), **workers}, APPROVE))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    assert run_hero(home, story) == 0
    return home, model


@pytest.mark.slow
def test_a_revises_story_adds_a_round_on_the_branch_of_a_passed_story(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    home, model = _passed_story(scripted, make_home, write_story, {"s1-rev-1": _docs_work()})
    tip = git(target_repo, "rev-parse", "hero/s1").strip()
    path = write_followup(home, "s1", [Finding(FINDING, file="calc/__init__.py", line=5)])

    assert run_hero(home, path) == 0

    new_tip = git(target_repo, "rev-parse", "hero/s1").strip()
    assert new_tip != tip and git(target_repo, "rev-parse", f"{new_tip}^").strip() == tip
    assert git(target_repo, "log", "-1", "--format=%s", "hero/s1").strip() == "docstring"
    assert '"""Subtract b from a."""' in git(target_repo, "show", "hero/s1:calc/__init__.py")
    assert "hero/s1-rev-1" not in git(target_repo, "branch", "--format=%(refname:short)")
    state = _state(home, "s1-rev-1")
    assert state["status"] == "passed" and state["revises"] == "s1"
    assert state["branch"] == "hero/s1" and state["base_sha"] == tip
    assert state["head_sha"] == new_tip
    # verify ran (the revised story's checks) and so did the review
    [round1] = state["rounds"]
    assert [c["command"] for c in round1["verify"]["commands"]] == VERIFY_SUB
    assert round1["review"]["verdict"] == "APPROVED" and not round1["review"]["short_circuited"]
    # the finding reached the worker as the reviewer's feedback, with the story's own text
    task = task_text(next(b for b in worker_requests(model) if "s1-rev-1" in task_text(b)))
    assert "## Findings on the work of s1 (address every point)" in task
    assert f"1. `calc/__init__.py` line 5: {FINDING}" in task
    assert "Add a `sub(a, b)` function to calc." in task
    review = task_text(review_requests(model)[-1])
    assert "## Follow-up of s1: findings to address" in review and FINDING in review
    # the reviewer reads the follow-up's commits alone: on top of the revised story's tip
    assert '+    """Subtract b from a."""' in review and "+def sub(a, b):" not in review
    # the story revised says where its branch is now; the follow-up's file is in done/
    assert _state(home, "s1")["head_sha"] == new_tip
    assert (home / "done" / "s1-rev-1.md").is_file() and not path.exists()


@pytest.mark.slow
def test_hero_revise_runs_the_instruction_as_a_finding_now(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, model = _passed_story(scripted, make_home, write_story, {"s1-rev-1": _docs_work()})
    tip = git(target_repo, "rev-parse", "hero/s1").strip()
    capsys.readouterr()

    code = main(["revise", "s1", FINDING, "--home", str(home), "--json"])

    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "passed" and out["id"] == "s1-rev-1"
    assert out["branch"] == "hero/s1"
    new_tip = git(target_repo, "rev-parse", "hero/s1").strip()
    assert is_ancestor(target_repo, tip, new_tip) and new_tip != tip
    assert out["head_sha"] == new_tip
    task = task_text(next(b for b in worker_requests(model) if "s1-rev-1" in task_text(b)))
    assert "## Findings on the work of s1 (address every point)\n" in task
    assert f"1. {FINDING}" in task
    assert _state(home, "s1-rev-1")["rounds"][0]["verify"]["passed"] is True
    assert review_requests(model)[-1] is not None and len(review_requests(model)) == 2

    # a second revision builds on the first: same branch, on top of its tip
    write_followup(home, "s1", ["Say so in the README too"])
