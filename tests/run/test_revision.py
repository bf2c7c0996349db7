"""A follow-up's rules (hero.run.revision): its limits, the branch it works on through a
chain of follow-ups, and when `hero watch` keeps it waiting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hero.config.home import Config
from hero.config.sections import Budgets
from hero.run.revision import root_of, run_limits, waits_for
from hero.state import RunState, Status, save_state
from hero.story.record import Story


def _story(story_id: str, revises: str | None = None, **more: object) -> Story:
    return Story(path=Path(f"{story_id}.md"), id=story_id, title="T", revises=revises, **more)  # type: ignore[arg-type]


def test_a_follow_up_has_its_own_rounds_and_token_budget(tmp_path: Path) -> None:
    config = Config(
        home=tmp_path,
        target_repo=tmp_path,
        max_retries=5,
        followup_max_rounds=2,
        max_followup_tokens=1000,
        budgets=Budgets(story_tokens=50_000, story_cost_usd=3.0),
    )
    assert run_limits(_story("s1"), config) == (5, config.budgets)
    rounds, budgets = run_limits(_story("s1-rev-1", "s1"), config)
    assert rounds == 2 and budgets == replace(config.budgets, story_tokens=1000)
    assert run_limits(_story("s1-rev-1", "s1", max_retries=4), config)[0] == 4
    lower = replace(config, budgets=Budgets(story_tokens=10))  # the lower of the two holds
    assert run_limits(_story("s1-rev-1", "s1"), lower)[1].story_tokens == 10
    unset = replace(config, max_followup_tokens=None)
    assert run_limits(_story("s1-rev-1", "s1"), unset)[1] == config.budgets


def test_a_follow_up_of_a_follow_up_works_on_the_first_story_s_branch(tmp_path: Path) -> None:
    save_state(tmp_path, RunState(id="s1", status=Status.PASSED))
    save_state(tmp_path, RunState(id="s1-rev-1", status=Status.PASSED, revises="s1"))
    save_state(tmp_path, RunState(id="a", status=Status.PASSED, revises="b"))
    save_state(tmp_path, RunState(id="b", status=Status.PASSED, revises="a"))  # a loop
    assert root_of(tmp_path, "s1-rev-1").branch == "hero/s1"
    assert root_of(tmp_path, "s1").branch == "hero/s1"
    assert root_of(tmp_path, "unknown").branch == "hero/unknown"
    assert root_of(tmp_path, "a").id in ("a", "b")  # a loop ends, somewhere in it


def test_watch_runs_follow_ups_of_one_story_one_at_a_time(tmp_path: Path) -> None:
    s1, other = _story("s1"), _story("s2")
    rev1, rev2 = _story("s1-rev-1", "s1"), _story("s1-rev-2", "s1")
    assert waits_for(tmp_path, rev1, [], [rev1, rev2]) == ""
    assert "waits for 's1-rev-1', queued before it on hero/s1" in waits_for(
        tmp_path, rev2, [], [rev1, rev2]
    )
    assert "waits for 's1-rev-2', which is running on hero/s1" in waits_for(
        tmp_path, rev1, [rev2], [rev1]
    )
    assert "waits for 's1'" in waits_for(tmp_path, rev1, [s1], [rev1])
    assert "waits for 's1'" in waits_for(tmp_path, rev2, [], [s1, rev2])
    assert waits_for(tmp_path, rev1, [other], [rev1]) == ""
    assert waits_for(tmp_path, s1, [rev1], [s1]) == ""  # a story itself is not a follow-up
