"""The story wall budget counts rounds that were stopped in their middle: by Ctrl-C, or by
SIGKILL (up to the record's last save), once, however often the story is run again.

hero runs as a real child process (`python -m hero run ...`) against the scripted model
over loopback HTTP, as in test_e2e_interrupt.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    Hero,
    commit_once,
    is_review,
    load_state,
    long_command,
    step_of,
    verdict,
)
from watch_support import Procs

from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.views.status import collect_status

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

STOP_TIMEOUT_S = 20.0  # a generous "did not hang" bound, not a speed check


def policy() -> Callable[[dict[str, Any]], Reply]:
    """Two quick turns (the record is saved after them), then a long command to stop hero
    in; run again, the round goes on to its end and is approved."""
    plan = [
        call("bash", command=commit_once("first")),
        call("bash", command="true"),
        call("bash", command=long_command("stop.pid")),
        call("bash", command=commit_once("second")),
        text("Done."),
    ]

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "Fine.")
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


def wall_s(home: Path) -> float:
    (row,) = collect_status(home)["stories"]
    return float(row["wall_s"])


def stopped(hero: Hero, signum: int) -> int:
    hero.proc.send_signal(signum)
    try:
        return hero.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hero did not stop within {STOP_TIMEOUT_S} s:\n{hero.output()}")


def test_a_round_stopped_by_ctrl_c_counts_once(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
    procs: Procs,
) -> None:
    model = scripted(policy(), latency_s=0.5)
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["true"])

    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    procs.append(hero.wait_for_file(home / "worktrees" / "s1" / "stop.pid"))
    assert stopped(hero, signal.SIGINT) == 130, hero.output()

    state = load_state(home)
    assert state["status"] == "interrupted" and state["rounds"] == []
    assert "round_started_at" not in state  # no round in progress any more
    cut_short = state["cut_short_s"]
    assert cut_short >= 1.0  # two answers of at least 0.5 s each, and the stop
    assert wall_s(home) == cut_short  # `hero status` shows it (it showed 0s before)

    # run again: the round starts over and passes; the stopped part is counted once
    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    state = load_state(home)
    assert state["status"] == "passed"
    assert state["cut_short_s"] == cut_short
    assert wall_s(home) == pytest.approx(cut_short + state["rounds"][0]["duration_s"])


def test_a_round_killed_counts_up_to_its_last_save_once_and_holds_the_budget(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
    procs: Procs,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = scripted(policy(), latency_s=0.5)
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["true"])

    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    procs.append(hero.wait_for_file(home / "worktrees" / "s1" / "stop.pid"))
    assert stopped(hero, signal.SIGKILL) == -signal.SIGKILL

    # nobody could record the kill: the round is still open in the record. Make the kill
    # a day old: the time counted must end at the last save, not at the next run
    path = home / "runs" / "state" / "s1.json"
    state = json.loads(path.read_text())
    assert state["status"] == "running" and state["rounds"] == []
    for key in ("started_at", "updated_at", "round_started_at"):
        state[key] -= 86_400
    path.write_text(json.dumps(state))
    killed = round(state["updated_at"] - state["round_started_at"], 3)
    assert killed >= 1.0  # the record was saved after the two quick turns
    assert wall_s(home) == killed  # `hero status` counts the killed round up to its save

    # a story wall budget below that: the next run stops before any model call
    calls = len(model.requests)
    make_home(model, sandbox="none", max_story_wall_s=1)
    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 124, again.output()  # a time budget: timed out
    state = load_state(home)
    assert state["status"] == "budget_exceeded", again.output()
    assert state["budget"] == "max_story_wall_s"
    assert "max_story_wall_s 1" in state["error"]
    assert len(model.requests) == calls
    # the killed part, and the moment this run's round lasted before it stopped: the
    # killed part is counted once (not twice, nor up to now)
    assert killed <= state["cut_short_s"] < 2 * killed
    cut_short = state["cut_short_s"]

    # `hero retry` refuses while the budget is used up
    capsys.readouterr()
    assert main(["retry", "s1", "--home", str(home)]) == 2
    assert "Raise max_story_wall_s in config/roles.yaml" in capsys.readouterr().err

    # raised: the retry is accepted and the story passes, the time kept as it was
    make_home(model, sandbox="none", max_story_wall_s=3600)
    assert main(["retry", "s1", "--home", str(home)]) == 0
    third = Hero(home, story, tmp_path, "third")
    procs.append(third)
    assert third.wait() == 0, third.output()
    state = load_state(home)
    assert state["status"] == "passed"
    assert state["cut_short_s"] == cut_short
    assert wall_s(home) == pytest.approx(cut_short + state["rounds"][0]["duration_s"])


def test_a_kill_while_a_tool_runs_loses_none_of_the_calls_spend(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
    procs: Procs,
) -> None:
    """The model answered with a tool call, and hero is killed while that tool runs: the
    record already counts that answer (and every one before it), and the next run holds
    the budget by it."""
    plan = [
        call("bash", command="true"),
        call("bash", command=long_command("stop.pid")),
        text("Done."),
    ]

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "Fine.")
        return replace(plan[min(step_of(body), len(plan) - 1)], prompt_tokens=1000, cost=0.25)

    model = scripted(handler)
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["true"])

    hero = Hero(home, story, tmp_path, "killed")
    procs.append(hero)
    procs.append(hero.wait_for_file(home / "worktrees" / "s1" / "stop.pid"))  # the tool runs
    assert stopped(hero, signal.SIGKILL) == -signal.SIGKILL

    state = load_state(home)
    assert state["status"] == "running"  # nobody could record the kill
    answered = len(model.requests)
    assert answered == 2
    usage = state["usage"]
    assert usage["llm_calls"] == answered
    assert usage["tokens_in"] == 1000 * answered and usage["cost_usd"] == 0.25 * answered
    assert usage["estimated_calls"] == 0  # the endpoint counted them

    # the next run counts them against the budgets: a story budget they used up stops it
    # before any model call
    make_home(model, sandbox="none", max_story_cost_usd=0.5)
    provider = home / "config" / "providers" / "scripted.yaml"  # a USD budget needs prices
    provider.write_text(provider.read_text() + "input_usd_per_mtok: 1\noutput_usd_per_mtok: 1\n")
    assert main(["run", str(story), "--home", str(home)]) == 1
    state = load_state(home)
    assert state["status"] == "budget_exceeded" and state["budget"] == "max_story_cost_usd"
    assert len(model.requests) == answered
