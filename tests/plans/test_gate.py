"""The dependency rule (hero.plans.gate): ready, wait, skip, unknown, and cycles."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hero.plans.gate import Gate, Rule
from hero.state import RunState, Status, file_digest, save_state
from hero.story.format import parse_story
from hero.story.record import Story


def story(home: Path, story_id: str, *deps: str, plan: str = "") -> Story:
    folder = home / "inbox" / plan if plan else home / "inbox"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{story_id}.md"
    path.write_text(
        f"---\nid: {story_id}\ntitle: Story {story_id}\ndepends_on: {list(deps)}\n---\nDo it.\n"
    )
    parsed = parse_story(path)
    return replace(parsed, plan=plan)


def record(home: Path, s: Story, status: Status, *, edited: bool = False) -> None:
    save_state(
        home,
        RunState(
            id=s.id,
            plan=s.plan,
            status=status,
            story_path=str(s.path),
            story_digest="0" * 64 if edited else file_digest(s.path),
        ),
    )


def test_ready_once_every_dependency_passed_and_waiting_before(tmp_path: Path) -> None:
    a, b, c = story(tmp_path, "a"), story(tmp_path, "b"), story(tmp_path, "c", "a", "b")
    rule = Rule.over(tmp_path, [a, b, c])
    assert rule.gate(a).gate == Gate.READY
    decision = rule.gate(c)
    assert decision.gate == Gate.WAIT
    assert decision.waits_for == ("a (not run yet)", "b (not run yet)")

    record(tmp_path, a, Status.PASSED)
    record(tmp_path, b, Status.RUNNING)
    decision = Rule.over(tmp_path, [a, b, c]).gate(c)
    assert decision.gate == Gate.WAIT and decision.waits_for == ("b (running)",)

    record(tmp_path, b, Status.PASSED)
    assert Rule.over(tmp_path, [a, b, c]).gate(c).gate == Gate.READY


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (Status.GAVE_UP, "gave up"),
        (Status.ERROR, "ended in error"),
        (Status.CANCELLED, "was cancelled"),
    ],
)
def test_a_failed_dependency_skips_and_names_it(tmp_path: Path, status: Status, said: str) -> None:
    a, b = story(tmp_path, "a"), story(tmp_path, "b", "a")
    record(tmp_path, a, status)
    decision = Rule.over(tmp_path, [a, b]).gate(b)
    assert decision.gate == Gate.SKIP
    assert decision.reason == f"story 'a' {said}"
    assert decision.failed is not None and decision.failed[0].id == "a"


def test_a_failed_dependency_edited_since_runs_again_so_its_dependents_wait(
    tmp_path: Path,
) -> None:
    a, b = story(tmp_path, "a"), story(tmp_path, "b", "a")
    record(tmp_path, a, Status.GAVE_UP, edited=True)
    assert Rule.over(tmp_path, [a, b]).gate(b).gate == Gate.WAIT
    record(tmp_path, a, Status.QUEUED)  # `hero retry a`
    assert Rule.over(tmp_path, [a, b]).gate(b).gate == Gate.WAIT


@pytest.mark.parametrize("first", ["b", "c"])
def test_a_skip_goes_down_through_stories_not_run_yet_in_any_order(
    tmp_path: Path, first: str
) -> None:
    a, b, c = story(tmp_path, "a"), story(tmp_path, "b", "a"), story(tmp_path, "c", "b")
    record(tmp_path, a, Status.GAVE_UP)
    rule = Rule.over(tmp_path, [a, b, c])
    if first == "b":
        rule.gate(b)
    decision = rule.gate(c)
    assert decision.gate == Gate.SKIP
    assert decision.reason == "story 'a' gave up (through 'b')"


def test_a_skipped_dependency_whose_ancestor_is_retried_waits(tmp_path: Path) -> None:
    a, b, c = story(tmp_path, "a"), story(tmp_path, "b", "a"), story(tmp_path, "c", "b")
    record(tmp_path, a, Status.QUEUED)  # it gave up, then `hero retry a`
    record(tmp_path, b, Status.SKIPPED)
    assert Rule.over(tmp_path, [a, b, c]).gate(c).gate == Gate.WAIT
    assert Rule.over(tmp_path, [a, b, c]).gate(b).gate == Gate.WAIT


def test_an_unknown_dependency_is_unknown_not_waited_on(tmp_path: Path) -> None:
    b = story(tmp_path, "b", "ghost")
    decision = Rule.over(tmp_path, [b]).gate(b)
    assert decision.gate == Gate.UNKNOWN
    assert "'ghost'" in decision.reason and "fix depends_on" in decision.reason


def test_a_plan_s_story_depends_on_stories_of_its_own_plan_only(tmp_path: Path) -> None:
    loose = story(tmp_path, "a")
    record(tmp_path, loose, Status.PASSED)
    other = story(tmp_path, "a", plan="p2")
    record(tmp_path, other, Status.PASSED)
    mine = story(tmp_path, "b", "a", plan="p1")
    decision = Rule.over(tmp_path, [loose, other, mine]).gate(mine)
    assert decision.gate == Gate.UNKNOWN and "plan 'p1'" in decision.reason
    own = story(tmp_path, "a", plan="p1")
    assert Rule.over(tmp_path, [own, mine]).gate(mine).gate == Gate.WAIT
    record(tmp_path, own, Status.PASSED)
    assert Rule.over(tmp_path, [own, mine]).gate(mine).gate == Gate.READY


@pytest.mark.parametrize("first", ["a", "b", "c"])
def test_a_cycle_is_said_for_its_stories_and_those_under_it(tmp_path: Path, first: str) -> None:
    a, b, c = story(tmp_path, "a", "b"), story(tmp_path, "b", "a"), story(tmp_path, "c", "a")
    free = story(tmp_path, "free")
    rule = Rule.over(tmp_path, [a, b, c, free])
    rule.gate({"a": a, "b": b, "c": c}[first])
    for member in (a, b):
        decision = rule.gate(member)
        assert decision.gate == Gate.UNKNOWN and decision.cycle
        assert decision.reason.startswith("its dependencies form a cycle: ")
        assert set(decision.cycle) == {"a", "b"}
    under = rule.gate(c)
    assert under.gate == Gate.UNKNOWN
    assert under.reason.startswith("depends on 'a', which is in a cycle of dependencies: ")
    assert rule.gate(free).gate == Gate.READY
