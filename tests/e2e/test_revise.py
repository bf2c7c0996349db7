"""End to end: follow-ups (`revises:`, `hero revise`) on the scripted server over real HTTP,
with real git: more rounds for a finished story on its own branch, from its tip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import VERIFY_SUB, backlog, commit_once, is_ancestor, task_text
from run_support import (
    APPROVE,
    COMMIT,
    good_worker,
    policy,
    review_requests,
    run_hero,
    worker_requests,
)
from watch_support import Procs

from hero.cli import main
from hero.llm.scripted import call, text
from hero.locks import story_lock
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
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, model = _passed_story(scripted, make_home, write_story, {"s1-rev-1": _docs_work()})
    tip = git(target_repo, "rev-parse", "hero/s1").strip()
    capsys.readouterr()
    path = write_followup(home, "s1", [Finding(FINDING, file="calc/__init__.py", line=5)])
    calls = len(model.requests)
    assert run_hero(home, path, "--dry-run", "--json") == 0  # what it would do, first
    dry = json.loads(capsys.readouterr().out)
    assert dry["start"]["branch"] == "hero/s1" and dry["start"]["base_sha"] == tip
    assert dry["start"]["max_rounds"] == 3  # followup_max_rounds
    assert "## Findings on the work of s1" in dry["request"]["body"]["messages"][1]["content"]
    assert len(model.requests) == calls

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


def _bump(name: str) -> list[Any]:
    """A follow-up's worker that commits ``name``.txt."""
    return [call("bash", command=commit_once(name)), text(f"Added {name}.")]


@pytest.mark.slow
def test_two_follow_ups_queued_for_hero_watch_run_one_after_the_other(
    scripted, make_home, write_story, target_repo: Path, procs: Procs
) -> None:
    workers = {"s1-rev-1": _bump("first"), "s1-rev-2": _bump("second")}
    home, model = _passed_story(scripted, make_home, write_story, workers)
    tip = git(target_repo, "rev-parse", "hero/s1").strip()
    for words in ("Add first.txt", "Add second.txt"):
        assert main(["revise", "s1", words, "--queue", "--home", str(home)]) == 0
    backlog(*(home / "inbox").glob("s1-rev-*.md"))
    (home / "config" / "roles.yaml").write_text(
        (home / "config" / "roles.yaml").read_text() + "max_parallel: 2\n"
    )

    daemon = procs.start(home, "--exit-when-idle")
    assert daemon.wait_exit() == 0, daemon.output()

    order = [
        (e["event"], e["story"]) for e in daemon.events() if e["event"] in ("started", "finished")
    ]
    assert order == [
        ("started", "s1-rev-1"),
        ("finished", "s1-rev-1"),
        ("started", "s1-rev-2"),
        ("finished", "s1-rev-2"),
    ]
    first, second = _state(home, "s1-rev-1"), _state(home, "s1-rev-2")
    assert first["status"] == second["status"] == "passed"
    assert first["base_sha"] == tip and second["base_sha"] == first["head_sha"]
    log = git(target_repo, "log", "--format=%s", f"{tip}..hero/s1").split()
    assert log == ["second", "first"]
    assert second["head_sha"] == git(target_repo, "rev-parse", "hero/s1").strip()
    assert "Add second.txt" in json.dumps(review_requests(model)[-1])


@pytest.mark.slow
def test_a_follow_up_whose_story_is_unknown_or_whose_branch_is_gone_fails_clearly(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    home, model = _passed_story(scripted, make_home, write_story, {})
    calls = len(model.requests)
    unknown = write_followup(home, "nope", ["anything"])
    assert run_hero(home, unknown) == 1
    state = _state(home, "nope-rev-1")
    assert state["status"] == "error" and state["revises"] == "nope"
    assert "revises 'nope': no story by that id has run in this home" in state["error"]
    assert unknown.is_file()  # nothing lost: the file waits for an edit or `hero retry`

    tip = git(target_repo, "rev-parse", "hero/s1").strip()
    git(target_repo, "branch", "-D", "hero/s1")
    gone = write_followup(home, "s1", ["anything"])
    assert run_hero(home, gone) == 1
    state = _state(home, "s1-rev-1")
    assert state["status"] == "error"
    assert "whose branch hero/s1 is gone" in state["error"]
    assert gone.is_file() and len(model.requests) == calls  # no model call was made
    assert "hero/s1" not in git(target_repo, "branch", "--format=%(refname:short)").split()
    assert git(target_repo, "cat-file", "-t", tip).strip() == "commit"


@pytest.mark.slow
def test_a_follow_up_waits_its_turn_while_its_story_is_in_use(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, model = _passed_story(scripted, make_home, write_story, {})
    tip = git(target_repo, "rev-parse", "hero/s1").strip()
    calls = len(model.requests)
    path = write_followup(home, "s1", ["anything"])
    capsys.readouterr()
    with story_lock(home, "s1"):  # another run of s1 (or a follow-up of it) holds it
        assert run_hero(home, path) == 2
    assert "story 's1' is being run by another hero process" in capsys.readouterr().err
    assert not (home / "runs" / "state" / "s1-rev-1.json").exists()
    assert git(target_repo, "rev-parse", "hero/s1").strip() == tip
    assert len(model.requests) == calls and path.is_file()
