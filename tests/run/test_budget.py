"""Budgets per story and per round (tokens, dollars, wall time), through the real pipeline.

`hero run` runs in-process against hero's scripted model over real HTTP, in real git
repositories. Each model answer carries the tokens (and, where a test says so, the cost)
it spent, so every budget trips at a known call; every test checks that no model call was
made after the trip, that the story ends ``budget_exceeded`` naming the budget, and that
its work is kept on its branch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import is_review, load_state, review_round, step_of, verdict, worker_round

from hero.cli import main
from hero.config.loader import load_config
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import Budgets
from hero.llm.client import Completion, LlmClient
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.run.budget import BudgetExceeded, Meter, Spend, story_over, story_spend, unpriced
from hero.state import Round, RunState, save_state
from hero.views.status import collect_status, format_status

RESCUE = "hero: keep uncommitted work left when a budget ran out (s1)"
APPROVE = verdict("APPROVED", "All good.")
REJECT = verdict("CHANGES_REQUESTED", "Not yet.")

Plan = Sequence[Reply] | Mapping[int, Sequence[Reply]]


def spends(reply: Reply, tokens: int = 1000, cost: float | None = None) -> Reply:
    """``reply``, reported as spending ``tokens`` prompt tokens (and ``cost`` USD, if given)."""
    return replace(reply, prompt_tokens=tokens, completion_tokens=0, cost=cost)


def script(worker: Plan, reviewer: Reply | Mapping[int, Reply] = APPROVE) -> Callable[..., Any]:
    """The worker's answer by (round, step), the reviewer's by round; a worker's plan that
    runs out repeats its last answer."""

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return reviewer[review_round(body)] if isinstance(reviewer, Mapping) else reviewer
        plan = worker[worker_round(body)] if isinstance(worker, Mapping) else worker
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


def run(home: Path, story: Path) -> int:
    return main(["run", str(story), "--home", str(home), "-v"])


def worker_calls(model: ScriptedModel) -> int:
    return sum(1 for r in model.requests if not is_review(r.body))


def review_calls(model: ScriptedModel) -> int:
    return sum(1 for r in model.requests if is_review(r.body))


def subjects(repo: Path) -> list[str]:
    return git(repo, "log", "--format=%s", "main..hero/s1").splitlines()


def tokens(state: dict[str, Any]) -> int:
    return int(state["usage"]["tokens_in"]) + int(state["usage"]["tokens_out"])


def set_prices(home: Path, input_usd_per_mtok: float, output_usd_per_mtok: float = 0) -> None:
    with open(home / "config" / "providers" / "scripted.yaml", "a") as fh:
        fh.write(f"input_usd_per_mtok: {input_usd_per_mtok}\n")
        fh.write(f"output_usd_per_mtok: {output_usd_per_mtok}\n")


def assert_clean(home: Path) -> None:
    """Nothing left uncommitted in the story's worktree."""
    assert git(home / "worktrees" / "s1", "status", "--porcelain") == ""


def status_json(home: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["status", "--json", "--home", str(home)]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


# --------------------------------------------------------------------------- per story


@pytest.mark.slow
def test_story_tokens_stop_the_story_keep_its_work_and_show_in_status(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker = [
        spends(call("bash", command="echo one > one.txt && git add -A && git commit -qm one")),
        spends(call("write_file", path="left.txt", content="left\n")),  # left uncommitted
        spends(text("Done.")),
    ]
    model = scripted(script(worker))
    home = make_home(model, max_story_tokens=1500)
    story = write_story(home, "s1")

    assert run(home, story) == 1  # did not pass (a budget of tokens: no timeout, no 124)

    state = load_state(home)
    reason = "budget exceeded: story tokens 2000 > max_story_tokens 1500"
    assert state["status"] == "budget_exceeded"
    assert state["budget"] == "max_story_tokens"
    assert state["error"] == reason
    assert worker_calls(model) == 2 and review_calls(model) == 0  # none after the trip
    assert tokens(state) == 2000
    assert state["rounds"] == [] and state["phase"] == ""  # the round is run again on resume
    assert f"s1: {reason}; its commits are kept on hero/s1" in capsys.readouterr().err
    # the worker's commit and its uncommitted file, both on the branch
    assert subjects(target_repo) == [RESCUE, "one"]
    assert git(target_repo, "show", "hero/s1:left.txt") == "left\n"
    assert_clean(home)
    assert state["head_sha"] == git(target_repo, "rev-parse", "hero/s1").strip()

    # `hero status`: the spend against the budget, in JSON and in the table
    (row,) = status_json(home, capsys)["stories"]
    assert row["status"] == "budget_exceeded" and row["tokens"] == 2000
    assert row["budget"]["max_story_tokens"] == 1500
    assert row["budget"]["max_round_tokens"] is None
    assert main(["status", "--home", str(home)]) == 0
    table = capsys.readouterr().out
    assert "budgets: per story 1500 tokens" in table
    (line,) = [x for x in table.splitlines() if x.startswith("s1 ")]
    assert line.split()[1] == "budget_exceeded" and "2000/1500" in line.split()
    assert f"    error: {reason}" in table

    # run again as it stands: it stops before its first model call
    assert run(home, story) == 1
    assert worker_calls(model) == 2
    assert load_state(home)["error"] == reason

    # with the budget raised, running it again continues the same branch
    make_home(model, max_story_tokens=100_000)
    assert run(home, story) == 0
    assert load_state(home)["status"] == "passed"
    assert subjects(target_repo)[-2:] == [RESCUE, "one"]
    assert "prev" not in git(target_repo, "branch", "--list", "hero/*")


@pytest.mark.slow
def test_story_cost_from_the_provider_prices_stops_before_the_reviewer(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
) -> None:
    worker = [
        spends(call("bash", command="echo one > one.txt && git add -A && git commit -qm one")),
        spends(text("Done.")),
    ]
    model = scripted(script(worker))
    home = make_home(model, max_story_cost_usd=0.015)
    set_prices(home, input_usd_per_mtok=10)  # 1000 tokens: $0.01 a call
    story = write_story(home, "s1")

    assert run(home, story) == 1

    state = load_state(home)
    assert state["status"] == "budget_exceeded"
    assert state["error"] == "budget exceeded: story cost $0.0200 > max_story_cost_usd 0.015"
    assert worker_calls(model) == 2 and review_calls(model) == 0  # the reviewer is checked too
    assert state["usage"]["cost_usd"] == pytest.approx(0.02)
    assert subjects(target_repo) == ["one"]  # nothing was left to rescue
    assert_clean(home)


@pytest.mark.slow
def test_story_cost_reported_by_the_provider_wins_over_its_prices(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
) -> None:
    worker = [
        spends(call("bash", command="git commit -q --allow-empty -m one"), cost=0.6),
        spends(call("write_file", path="left.txt", content="left\n"), cost=0.6),
        spends(text("Done."), cost=0.6),
    ]
    model = scripted(script(worker))
    home = make_home(model, max_story_cost_usd=1)
    set_prices(home, input_usd_per_mtok=1000)  # priced, it would be $1 a call
    story = write_story(home, "s1")

    assert run(home, story) == 1

    state = load_state(home)
    assert state["error"] == "budget exceeded: story cost $1.2000 > max_story_cost_usd 1"
    assert worker_calls(model) == 2  # priced, the second call would have been refused
    assert state["usage"]["cost_usd"] == pytest.approx(1.2)
    assert subjects(target_repo) == [RESCUE, "one"]
    assert_clean(home)


@pytest.mark.slow
def test_story_wall_time_counts_across_runs_and_retry_waits_for_a_raised_budget(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker = {
        1: [
            call("bash", command="sleep 0.6"),  # round 1 takes at least 0.6 s
            call("bash", command="echo one > one.txt && git add -A && git commit -qm one"),
            text("Done."),
        ],
        2: [text("Done.")],
    }
    model = scripted(script(worker, {1: REJECT, 2: APPROVE}))
    home = make_home(model, max_retries=1)
    story = write_story(home, "s1")
    assert run(home, story) == 1
    assert load_state(home)["status"] == "gave_up"
    assert load_state(home)["rounds"][0]["duration_s"] >= 0.6
    calls_before = len(model.requests)

    # a story wall budget below what its first run spent: the next run stops at once
    make_home(model, max_retries=1, max_story_wall_s=0.5)
    assert run(home, story) == 124  # timed out, as timeout(1) says it

    state = load_state(home)
    assert state["status"] == "budget_exceeded"
    assert state["budget"] == "max_story_wall_s"
    assert re.fullmatch(
        r"budget exceeded: story wall time \d+\.\d s > max_story_wall_s 0\.5", state["error"]
    )
    assert len(model.requests) == calls_before
    assert subjects(target_repo) == ["one"]

    # `hero retry` refuses while the budget is still used up, and says what to raise
    capsys.readouterr()
    assert main(["retry", "s1", "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert "has used up a story budget (story wall time" in err
    assert "Raise max_story_wall_s in config/roles.yaml" in err
    assert load_state(home)["status"] == "budget_exceeded"

    # raised: the retry continues the story on the same branch, its rounds kept
    make_home(model, max_retries=1, max_story_wall_s=600)
    assert main(["retry", "s1", "--home", str(home)]) == 0
    assert load_state(home)["status"] == "queued"
    assert run(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    assert "budget" not in state  # the next run cleared it
    assert [r["round"] for r in state["rounds"]] == [1, 2]
    assert subjects(target_repo) == ["one"]


@pytest.mark.slow
def test_a_round_cut_short_by_the_story_wall_budget_counts_and_retry_waits_for_a_raise(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A slow model: the round never finishes within max_story_wall_s. Its time is on
    record, shown by `hero status`, and keeps `hero retry` refused until the budget is
    raised; the retry then continues, and the time is counted once."""
    worker = [
        call("bash", command="echo one > one.txt && git add -A && git commit -qm one"),
        call("bash", command="true"),
        text("Done."),
    ]
    # every answer takes at least 0.6 s: the third worker call would start past 1 s
    model = scripted(script(worker), latency_s=0.6)
    home = make_home(model, max_retries=2, max_story_wall_s=1)
    story = write_story(home, "s1")

    assert run(home, story) == 124

    state = load_state(home)
    assert state["status"] == "budget_exceeded"
    found = re.fullmatch(
        r"budget exceeded: story wall time (\d+\.\d) s >=? max_story_wall_s 1", state["error"]
    )
    assert found and float(found.group(1)) >= 1.0
    assert state["rounds"] == [] and review_calls(model) == 0
    # the round cut short is on record, and no longer in progress
    assert state["cut_short_s"] >= 1.2
    assert "round_started_at" not in state
    cut_short = state["cut_short_s"]

    # `hero status`: the time against the budget (it was 0s/1s before)
    (row,) = status_json(home, capsys)["stories"]
    assert row["wall_s"] == cut_short
    assert main(["status", "--home", str(home)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("s1 ")]
    assert f"{int(cut_short)}s/1s" in line.split()

    # `hero retry` refuses while the budget is used up, naming it and what to raise
    assert main(["retry", "s1", "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert "story 's1' has used up a story budget (story wall time" in err
    assert "Raise max_story_wall_s in config/roles.yaml" in err
    assert load_state(home)["status"] == "budget_exceeded"

    # raised: accepted, and the run continues the branch; the cut-short time still counts
    make_home(model, max_retries=2, max_story_wall_s=600)
    assert main(["retry", "s1", "--home", str(home)]) == 0
    assert load_state(home)["status"] == "queued"
    assert run(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    assert state["cut_short_s"] == cut_short  # counted once, not again on the resume
    assert [r["round"] for r in state["rounds"]] == [1]
    assert subjects(target_repo) == ["one"]
    (row,) = status_json(home, capsys)["stories"]
    assert row["wall_s"] == pytest.approx(cut_short + state["rounds"][0]["duration_s"])


# --------------------------------------------------------------------------- per round


@pytest.mark.slow
def test_round_tokens_count_each_round_afresh(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker = {
        1: [
            spends(
                call("bash", command="echo one > one.txt && git add -A && git commit -qm one"), 500
            ),
            spends(text("Done."), 500),
        ],
        2: [
            spends(call("write_file", path="left.txt", content="left\n")),
            spends(call("write_file", path="more.txt", content="more\n")),
            spends(text("Done.")),
        ],
    }
    model = scripted(script(worker, {1: spends(REJECT, 100), 2: APPROVE}))
    home = make_home(model, max_round_tokens=1500, max_retries=3)
    story = write_story(home, "s1")

    assert run(home, story) == 1

    state = load_state(home)
    # round 1 spent 1100 and was reviewed; the story's 3100 is no round's budget
    assert state["error"] == "budget exceeded: round 2 tokens 2000 > max_round_tokens 1500"
    assert state["status"] == "budget_exceeded"
    assert tokens(state) == 3100
    assert (worker_calls(model), review_calls(model)) == (4, 1)
    assert [r["round"] for r in state["rounds"]] == [1]
    assert subjects(target_repo) == [RESCUE, "one"]
    assert git(target_repo, "show", "hero/s1:more.txt") == "more\n"
    assert_clean(home)

    # a round budget never refuses a retry: the round runs again from zero
    capsys.readouterr()
    assert main(["retry", "s1", "--home", str(home)]) == 0
    assert load_state(home)["status"] == "queued"


@pytest.mark.slow
def test_round_cost_stops_before_the_reviewer(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
) -> None:
    worker = [
        spends(call("bash", command="git commit -q --allow-empty -m one"), cost=0.6),
        spends(text("Done."), cost=0.6),
    ]
    model = scripted(script(worker))
    home = make_home(model, max_round_cost_usd=1)
    set_prices(home, input_usd_per_mtok=1000)  # a USD budget needs them; the reported cost wins
    story = write_story(home, "s1")

    assert run(home, story) == 1

    state = load_state(home)
    assert state["status"] == "budget_exceeded"
    assert state["error"] == "budget exceeded: round 1 cost $1.2000 > max_round_cost_usd 1"
    assert (worker_calls(model), review_calls(model)) == (2, 0)
    assert subjects(target_repo) == ["one"]


@pytest.mark.slow
def test_round_wall_time_stops_the_worker_between_turns(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
) -> None:
    # each turn takes at least 0.4 s and leaves a file; the worker would go on for ever
    def handler(body: dict[str, Any]) -> Reply:
        n = step_of(body)
        return call("bash", command=f"sleep 0.4; echo {n} > f{n}.txt")

    model = scripted(handler)
    home = make_home(model, max_round_wall_s=1.5, worker_max_turns=60)
    story = write_story(home, "s1")

    assert run(home, story) == 124

    state = load_state(home)
    assert state["status"] == "budget_exceeded"
    assert state["budget"] == "max_round_wall_s"
    found = re.fullmatch(
        r"budget exceeded: round 1 wall time (\d+\.\d) s >=? max_round_wall_s 1\.5",
        state["error"],
    )
    assert found and float(found.group(1)) >= 1.5
    # every call answered was acted on, and its file kept: no call after the trip
    files = [
        f for f in git(target_repo, "ls-tree", "--name-only", "hero/s1").split() if f[0] == "f"
    ]
    assert len(files) == worker_calls(model) < 60
    assert_clean(home)


# --------------------------------------------------------------------------- the parts


def test_reported_cost_is_the_cost_and_prices_are_the_fallback(
    scripted: Callable[..., ScriptedModel], make_home: Callable[..., Path]
) -> None:
    model = scripted(
        [
            Reply(content="a", prompt_tokens=1000, completion_tokens=0, cost=0.25),
            Reply(content="b", prompt_tokens=1000, completion_tokens=0),
            Reply(content="c", prompt_tokens=1000, completion_tokens=0, cost=0),  # free
        ]
    )
    home = make_home(model)
    set_prices(home, input_usd_per_mtok=2)
    client = LlmClient(load_config(home).role("worker"), load_config(home).llm)
    messages = [{"role": "user", "content": "hi"}]

    costs = [client.complete(messages).cost_usd for _ in range(3)]

    assert costs == [0.25, pytest.approx(0.002), 0.0]
    assert client.usage.cost_usd == pytest.approx(0.252)


def test_status_shows_spend_against_every_story_budget(
    scripted: Callable[..., ScriptedModel], make_home: Callable[..., Path]
) -> None:
    home = make_home(
        scripted([]),
        max_story_tokens=50_000,
        max_story_cost_usd=1,
        max_story_wall_s=3600,
        max_round_tokens=10_000,
    )
    save_state(
        home,
        RunState(
            id="s1",
            status="gave_up",
            rounds=[{"round": 1, "duration_s": 100.0}, {"round": 2, "duration_s": 92.0}],
            usage={"tokens_in": 12_000, "tokens_out": 345, "llm_calls": 9, "cost_usd": 0.12},
        ),
    )

    report = collect_status(home)
    text_out = format_status(report)

    (row,) = report["stories"]
    assert row["wall_s"] == 192.0
    assert row["budget"] == {
        "max_story_tokens": 50_000,
        "max_story_cost_usd": 1.0,
        "max_story_wall_s": 3600.0,
        "max_round_tokens": 10_000,
        "max_round_cost_usd": None,
        "max_round_wall_s": None,
    }
    assert "budgets: per story 50k tokens, $1.00, 1h00m; per round 10k tokens" in text_out
    header = next(x for x in text_out.splitlines() if x.startswith("STORY"))
    line = next(x for x in text_out.splitlines() if x.startswith("s1 "))
    assert header.split()[6:9] == ["TOKENS", "COST", "WALL"]
    assert line.split()[6:9] == ["12.3k/50k", "$0.1200/$1.00", "3m12s/1h00m"]


def test_status_without_a_readable_config_shows_no_budgets(tmp_path: Path) -> None:
    save_state(tmp_path, RunState(id="s1", status="gave_up", rounds=[{"round": 1}]))

    report = collect_status(tmp_path)

    assert report["stories"][0]["budget"] is None
    assert "budgets:" not in format_status(report)
    assert "WALL" not in format_status(report)


def test_the_meter_counts_the_round_in_progress_once() -> None:
    now = [1000.0]
    state = RunState(id="s1", rounds=[{"round": 1, "duration_s": 50.0}])
    meter = Meter(Budgets(story_wall_s=100, round_tokens=10), state, clock=lambda: now[0])

    meter.start_round(2, started=1000.0)
    now[0] = 1030.0
    assert meter.story() == Spend(0, 0.0, 80.0)
    meter.check()  # 80 s of 100, 0 tokens of 10

    state.rounds.append(Round(round=2, duration_s=30.0))  # round 2 ends
    assert meter.story().wall_s == 80.0  # not 110: the finished round is not counted twice

    now[0] = 1050.0
    with pytest.raises(BudgetExceeded) as tripped:
        meter.check()
    assert tripped.value.key == "max_story_wall_s"
    assert str(tripped.value) == "budget exceeded: story wall time 100.0 s >= max_story_wall_s 100"
    assert story_over(Budgets(), Spend(10**9, 1e9, 1e9)) is None  # no budgets, no limit


def test_rounds_cut_short_count_for_the_meter_and_the_record_alike() -> None:
    state = RunState(id="s1", rounds=[{"round": 1, "duration_s": 50.0}], cut_short_s=45.0)
    meter = Meter(Budgets(story_wall_s=100), state, clock=lambda: 1000.0)
    assert meter.story().wall_s == 95.0
    meter.start_round(2, started=996.0)
    meter.check()  # 50 + 45 + 4 = 99 s of 100
    meter.start_round(2, started=994.0)
    with pytest.raises(BudgetExceeded, match="story wall time 101.0 s > max_story_wall_s"):
        meter.check()
    # the record: a round left open by a killed run counts up to the record's last save
    state.current_round, state.round_started_at, state.updated_at = 2, 990.0, 994.0
    assert story_spend(state).wall_s == 99.0
    assert story_spend(state, now=1000.0).wall_s == 105.0  # a live record: up to now


def test_a_usd_budget_names_each_model_without_prices_and_the_settings_to_set() -> None:
    def role(name: str, provider: str, model: str, by: str = "", **prices: float) -> RoleConfig:
        p = Provider(name=provider, base_url="http://127.0.0.1:1/v1", default_model=model, **prices)
        return RoleConfig(name, p, model, None, chosen_by=by)

    priced = role("reviewer", "paid", "big", input_usd_per_mtok=3, output_usd_per_mtok=15)
    free = role("reviewer", "local", "qwen", input_usd_per_mtok=0, output_usd_per_mtok=0)
    unpriced_worker = role("worker", "gw", "m", "story field model", input_usd_per_mtok=1)

    # no USD budget, or every model priced (0 is a price): nothing to refuse
    assert unpriced(Budgets(story_tokens=10), {"worker": unpriced_worker}) is None
    both = {"worker": role("worker", "paid", "big", **PRICED), "reviewer": free}
    assert unpriced(Budgets(story_cost_usd=1, round_cost_usd=0.5), both) is None

    found = unpriced(
        Budgets(story_cost_usd=1, round_cost_usd=0.5),
        {"worker": unpriced_worker, "reviewer": priced, "planner": role("planner", "x", "y")},
    )
    assert found is not None  # the planner is no story's role: not counted, not named
    assert found.problem == (
        "max_story_cost_usd and max_round_cost_usd are set, but the worker's model 'm' "
        "(provider 'gw', chosen by story field model) has no output_usd_per_mtok: hero "
        "cannot count the dollars it spends"
    )
    assert found.fix == (
        "set input_usd_per_mtok and output_usd_per_mtok in config/providers/gw.yaml (0 for "
        "a model that costs nothing), or take max_story_cost_usd and max_round_cost_usd out "
        "of config/roles.yaml"
    )


PRICED = {"input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0}


def test_the_meter_tells_its_record_after_every_call_it_counts() -> None:
    """What makes a call's spend safe from a kill: the record saves at once (hero.run.record)."""
    state = RunState(id="s1")
    saved: list[int] = []
    meter = Meter(Budgets(), state, on_count=lambda: saved.append(meter.spent().llm_calls))
    model = meter.wrap(_Answering())
    for _ in range(3):
        model.complete([{"role": "user", "content": "hi"}])
    assert saved == [1, 2, 3]


class _Answering:
    def complete(self, messages: Any, tools: Any = None) -> Completion:
        return Completion("", (), {"role": "assistant", "content": ""}, 10, 1, 0.0, "stop")
