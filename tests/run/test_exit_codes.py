"""Exit codes of a story's end: 124 for a time budget (the run record says which budget
tripped, in ``budget``), 75 and 2 for a pause on a provider, 1 for any other failure; and
`hero run-plan`'s for a plan as a whole. The budgets' own end-to-end runs (`hero run` exiting
124 on max_story_wall_s and max_round_wall_s) are in test_budgets and test_budget_stops.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import is_review, step_of, verdict
from plan_support import PLAN_TIMEOUT_S, PlanPolicy, RunPlan, state_of, write_plan

from hero.cli import main
from hero.daemon.runplan import PlanRun, plan_exit_code
from hero.errors import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, EXIT_UNAVAILABLE, EXIT_USAGE
from hero.llm.scripted import Raw, ScriptedModel, call, text
from hero.plans.finish import PlanOutcome
from hero.state import (
    TIME_BUDGETS,
    RunState,
    StateError,
    Status,
    exit_code,
    load_state,
    save_state,
)


@pytest.mark.parametrize(
    ("status", "budget", "outage", "code"),
    [
        (Status.PASSED, "", {}, EXIT_OK),
        (Status.BUDGET_EXCEEDED, "max_story_wall_s", {}, EXIT_TIMEOUT),
        (Status.BUDGET_EXCEEDED, "max_round_wall_s", {}, EXIT_TIMEOUT),
        (Status.BUDGET_EXCEEDED, "max_story_tokens", {}, EXIT_FAILED),
        (Status.BUDGET_EXCEEDED, "max_round_cost_usd", {}, EXIT_FAILED),
        # a record of an older hero: no budget named, so no timeout claimed
        (Status.BUDGET_EXCEEDED, "", {}, EXIT_FAILED),
        (Status.GAVE_UP, "", {}, EXIT_FAILED),
        (Status.ERROR, "", {}, EXIT_FAILED),
        (Status.CANCELLED, "", {}, EXIT_FAILED),
        (Status.INTERRUPTED, "", {"kind": "transient"}, EXIT_UNAVAILABLE),
        (Status.INTERRUPTED, "", {"kind": "permanent"}, EXIT_USAGE),
        # a budget key left by a run that ended otherwise is no timeout
        (Status.GAVE_UP, "max_story_wall_s", {}, EXIT_FAILED),
    ],
)
def test_a_story_end_and_its_exit_code(
    status: Status, budget: str, outage: dict[str, str], code: int
) -> None:
    assert exit_code(RunState(id="s", status=status, budget=budget, outage=outage)) == code


def test_the_time_budgets_are_the_wall_time_settings() -> None:
    from hero.config.sections import Budgets
    from hero.run.budget import settings

    assert {k for k in settings(Budgets()) if k.endswith("_wall_s")} == TIME_BUDGETS


def test_the_budget_is_kept_in_the_record_and_an_old_record_loads(tmp_path: Path) -> None:
    state = RunState(id="s", status=Status.BUDGET_EXCEEDED, budget="max_round_wall_s")
    save_state(tmp_path, state)
    path = tmp_path / "runs" / "state" / "s.json"
    assert json.loads(path.read_text())["budget"] == "max_round_wall_s"
    loaded = load_state(tmp_path, "s")
    assert loaded is not None and loaded.timed_out

    # an older hero's record has no such key; a record that does not end on a budget
    # leaves it out, as before
    record = json.loads(path.read_text())
    del record["budget"]
    path.write_text(json.dumps(record))
    loaded = load_state(tmp_path, "s")
    assert loaded is not None and loaded.budget == "" and not loaded.timed_out
    save_state(tmp_path, RunState(id="s", status=Status.GAVE_UP))
    assert "budget" not in json.loads(path.read_text())


def test_a_record_with_a_budget_that_is_not_text_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "state" / "s.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "s", "status": "budget_exceeded", "budget": ["x"]}))
    with pytest.raises(StateError, match=r"s\.json: unreadable state \(budget: expected text"):
        load_state(tmp_path, "s")


def _plan_states(home: Path, ends: dict[str, tuple[Status, str]]) -> None:
    write_plan(home, "p", dict.fromkeys(ends, ()))
    for story_id, (status, budget) in ends.items():
        save_state(home, RunState(id=story_id, plan="p", status=status, budget=budget))


NOT_MADE = PlanRun(interrupted=False, outcome=None)


def test_run_plan_exits_124_when_the_stories_that_failed_ran_out_of_time(
    tmp_path: Path,
) -> None:
    _plan_states(
        tmp_path,
        {
            "a": (Status.PASSED, ""),
            "b": (Status.BUDGET_EXCEEDED, "max_story_wall_s"),
            "c": (Status.SKIPPED, ""),  # b's descendant
            "d": (Status.BUDGET_EXCEEDED, "max_round_wall_s"),
        },
    )
    assert plan_exit_code(tmp_path, "p", NOT_MADE) == EXIT_TIMEOUT


@pytest.mark.parametrize(
    "other", [(Status.GAVE_UP, ""), (Status.BUDGET_EXCEEDED, "max_story_cost_usd")]
)
def test_run_plan_exits_1_when_a_story_failed_otherwise(
    tmp_path: Path, other: tuple[Status, str]
) -> None:
    _plan_states(tmp_path, {"a": (Status.BUDGET_EXCEEDED, "max_story_wall_s"), "b": other})
    assert plan_exit_code(tmp_path, "p", NOT_MADE) == EXIT_FAILED


def test_run_plan_exits_1_when_nothing_failed_but_the_branch_was_not_made(
    tmp_path: Path,
) -> None:
    _plan_states(tmp_path, {"a": (Status.PASSED, ""), "b": (Status.PASSED, "")})
    failed = PlanRun(interrupted=False, outcome=PlanOutcome("hero/plan/p", "", "", "conflict"))
    assert plan_exit_code(tmp_path, "p", failed) == EXIT_FAILED
    made = PlanRun(interrupted=False, outcome=PlanOutcome("hero/plan/p", "f" * 40, "merged", ""))
    assert plan_exit_code(tmp_path, "p", made) == EXIT_OK


# --------------------------------------------------------------------------- end to end


def _handler(worker: list[Any]) -> Callable[[dict[str, Any]], Any]:
    def handler(body: dict[str, Any]) -> Any:
        if is_review(body):
            return verdict("APPROVED", "Fine.")
        return worker[min(step_of(body), len(worker) - 1)]

    return handler


def test_a_content_filtered_answer_ends_the_story_in_error_not_the_provider(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    withheld = Raw(
        {
            "id": "x",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None},
                    "finish_reason": "content_filter",
                }
            ],
            "usage": {"prompt_tokens": 50, "completion_tokens": 0},
        }
    )
    model = scripted(_handler([withheld]))
    home = make_home(model)
    story = write_story(home, "s1")

    assert main(["run", str(story), "--home", str(home)]) == EXIT_FAILED
    state = load_state(home, "s1")
    assert state is not None and state.status == Status.ERROR
    assert "content filter withheld the answer" in state.error
    assert state.outage == {}  # the provider is not paused: other stories run on
    assert len(model.requests) == 1  # not asked again
    assert "content filter" in capsys.readouterr().out


def test_a_worker_calling_its_tools_wrongly_fails_its_round_with_the_reason(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
) -> None:
    wrong = [call("read_file", path=f"missing-{n}.txt") for n in range(5)]
    model = scripted(_handler([*wrong, text("Done.")]))
    home = make_home(model, worker_max_tool_errors=3, max_retries=1)
    story = write_story(home, "s1")

    assert main(["run", str(story), "--home", str(home)]) == EXIT_FAILED
    state = load_state(home, "s1")
    assert state is not None and state.status == Status.GAVE_UP
    (only,) = state.rounds
    assert only.worker.stop_reason == "tool_errors"
    assert "worker_max_tool_errors 3" in only.worker.detail
    assert only.review.short_circuited and "worker_max_tool_errors 3" in only.review.summary
    assert not any(is_review(r.body) for r in model.requests)


@pytest.mark.slow
def test_hero_run_plan_exits_124_when_its_story_runs_out_of_time(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    tmp_path: Path,
) -> None:
    pass

    # a's first command outlasts its round's time budget: the next model call is refused
    model = scripted(PlanPolicy(commands={"a": ["sleep 1.5", "true"]}))
    home = make_home(model, max_round_wall_s=1)
    write_plan(home, "slow", {"a": [], "b": ["a"]})
    hero = RunPlan(home, "slow", tmp_path, "run-plan")
    try:
        assert hero.wait(PLAN_TIMEOUT_S) == EXIT_TIMEOUT, hero.output()
    finally:
        if hero.proc.poll() is None:
            hero.proc.kill()
            hero.proc.wait()
    a, b = state_of(home, "slow", "a"), state_of(home, "slow", "b")
    assert (a["status"], a["budget"]) == ("budget_exceeded", "max_round_wall_s")
    assert b["status"] == "skipped"
