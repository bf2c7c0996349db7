"""Budgets that never switch themselves off, through the real pipeline.

`hero run` runs in-process against hero's scripted model over real HTTP, in real git
repositories:

- a USD budget with a model that has no prices refuses the story at its start, before any
  model request, naming the budget, the role, provider and model and the prices to set; the
  same story runs once the provider has prices;
- an endpoint that sends no ``usage`` is counted by hero's estimate, so a token budget trips
  where it would otherwise have let the story through, and every view says the usage is an
  estimate.

(The third rule, a call's spend on record before its tools run, is test_budget_stops's: it
needs a real SIGKILL.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import is_review, load_state, step_of, verdict

from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.llm.usage import Usage
from hero.names import StoryRef
from hero.redact import Redactor
from hero.views.status import collect_status, format_status
from hero.web import data as web_data

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

APPROVE = verdict("APPROVED", "All good.")


def worker_then_approve(worker: Callable[[int], Reply]) -> Callable[[dict[str, Any]], Reply]:
    """The worker's answer by its step; the reviewer approves."""

    def handler(body: dict[str, Any]) -> Reply:
        return APPROVE if is_review(body) else worker(step_of(body))

    return handler


def quick_pass(step: int) -> Reply:
    """One commit, then done."""
    if step == 0:
        return call("bash", command="echo one > one.txt && git add -A && git commit -qm one")
    return text("Done.")


def run(home: Path, story: Path) -> int:
    return main(["run", str(story), "--home", str(home)])


def set_prices(home: Path, provider: str = "scripted", input_usd: float = 2.0) -> None:
    with open(home / "config" / "providers" / f"{provider}.yaml", "a") as fh:
        fh.write(f"input_usd_per_mtok: {input_usd}\noutput_usd_per_mtok: 8\n")


# --------------------------------------------------------------------------- prices


def test_a_usd_budget_on_a_model_without_prices_refuses_the_story_before_any_request(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = scripted(worker_then_approve(quick_pass))
    home = make_home(model, sandbox="none", max_story_cost_usd=0.004)
    story = write_story(home, "s1", verify=["true"])

    assert run(home, story) == 1  # as any story that cannot start: error, exit 1

    assert model.requests == []  # refused before any model call
    state = load_state(home)
    assert state["status"] == "error" and state["rounds"] == []
    assert state["error"] == (
        "max_story_cost_usd is set, but the worker's and the reviewer's model 'scripted-test' "
        "(provider 'scripted') has no input_usd_per_mtok or output_usd_per_mtok: hero cannot "
        "count the dollars it spends. To run, set input_usd_per_mtok and output_usd_per_mtok "
        "in config/providers/scripted.yaml (0 for a model that costs nothing), or take "
        "max_story_cost_usd out of config/roles.yaml"
    )
    assert state["error"] in capsys.readouterr().out  # what `hero run` says at the end

    # priced, the same story runs, and its cost counts against the budget
    set_prices(home)
    assert run(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed" and state["error"] == ""
    assert 0 < state["usage"]["cost_usd"] < 0.004
    assert len(model.requests) == state["usage"]["llm_calls"] == 3


def test_a_model_the_story_chose_without_prices_is_named_with_who_chose_it(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
) -> None:
    model = scripted(worker_then_approve(quick_pass))
    home = make_home(model, sandbox="none", max_round_cost_usd=1)
    set_prices(home)  # the home's own provider has prices
    (home / "config" / "providers" / "free.yaml").write_text(
        f"name: free\nbase_url: {model.base_url}\ndefault_model: other\n"
        "input_usd_per_mtok: 0\n"  # one price of two
    )
    story = write_story(home, "s1", verify=["true"], model={"worker": "free:cheap-model"})

    assert run(home, story) == 1

    assert model.requests == []
    error = load_state(home)["error"]
    assert error.startswith(
        "max_round_cost_usd is set, but the worker's model 'cheap-model' (provider 'free', "
        "chosen by story field model) has no output_usd_per_mtok: "
    )
    assert "reviewer" not in error  # priced: not named
    assert "set input_usd_per_mtok and output_usd_per_mtok in config/providers/free.yaml" in error


# --------------------------------------------------------------------------- no usage


def test_answers_without_usage_are_estimated_and_trip_the_token_budget(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The endpoint sends no usage at all. Counted as free, the story would pass after
    eight turns (as it did in the field); estimated, it stops on its token budget."""

    def worker(step: int) -> Reply:
        answer = call("bash", command=f"echo {step} >> log.txt") if step < 8 else text("Done.")
        return replace(answer, send_usage=False)

    model = scripted(worker_then_approve(worker))
    home = make_home(model, sandbox="none", max_story_tokens=6000)
    set_prices(home, input_usd=1)
    story = write_story(home, "s1", verify=["true"])

    assert run(home, story) == 1

    state = load_state(home)
    assert state["status"] == "budget_exceeded", state["error"]
    assert state["budget"] == "max_story_tokens"
    usage = Usage.from_dict(state["usage"])
    calls = len(model.requests)
    assert 1 < calls < 8 and not any(is_review(r.body) for r in model.requests)
    # every call counted, every one an estimate, and priced like any other
    assert usage.llm_calls == usage.estimated_calls == calls
    assert usage.estimated_tokens == usage.tokens >= 6000
    assert usage.tokens_out > 0 and usage.cost_usd > 0
    assert state["error"] == (
        f"budget exceeded: story tokens {usage.tokens} > max_story_tokens 6000"
    )
    # each request's size, as hero estimates it: the budget counted what was sent
    sent = [len(json.dumps(r.body["messages"])) for r in model.requests]
    assert sent == sorted(sent) and usage.tokens_in > sum(sent) // 4

    # `hero status --json` and the table: the usage is said to be an estimate
    (row,) = collect_status(home)["stories"]
    assert row["llm_calls"] == row["estimated_calls"] == calls
    assert row["estimated_tokens"] == row["tokens"] == usage.tokens
    capsys.readouterr()
    assert main(["status", "--json", "--home", str(home)]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["stories"]
    assert (shown["estimated_calls"], shown["estimated_tokens"]) == (calls, usage.tokens)
    table = format_status(collect_status(home)).splitlines()
    (line,) = [x for x in table if x.startswith("s1 ")]
    assert line.split()[6].startswith("~") and line.split()[6].endswith("/6000")
    assert line.split()[7].startswith("~$")
    below = table[table.index(line) + 1]
    assert below.startswith(f"    estimated: {calls} of {calls} calls came without token counts")

    # the report, the logs, the export, the story's page
    assert main(["report", "--home", str(home), "s1"]) == 0
    report = capsys.readouterr().out
    assert f"| model calls | {calls} ({calls} without token counts) |" in report
    assert f"~{usage.estimated_tokens:,} of them estimated by hero" in report
    assert main(["logs", "s1", "--home", str(home)]) == 0
    logs = capsys.readouterr().out
    assert logs.count("(no token counts in the answer: ~") == calls
    assert main(["export", "--home", str(home)]) == 0
    (exported,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert exported["metadata"]["usage"]["estimated_calls"] == calls
    assert exported["metadata"]["usage"]["estimated_tokens"] == usage.estimated_tokens

    page = web_data.story(web_data.Site(home, None, Redactor(())), StoryRef("", "s1"))
    assert page is not None and page["estimated_calls"] == calls
    assert page["estimated"].startswith(f"estimated: {calls} of {calls} calls")
