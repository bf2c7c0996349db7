"""A provider's refusal of one story's content ends that story, never the provider: the
real ``openai`` client over real HTTP to the scripted model answering in each provider's
words and shapes (hero.llm.refusals), and `hero watch` (a real child process) running the
provider's other stories on, before and after a restart, with its breaker closed.

What concerns every request (a key, a quota, a suspended account, a 5xx) still opens or
stops the breaker, as tests/llm/test_outage.py shows for the rest.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import MESSAGES, is_review, make_client, story_of
from watch_support import Policy, Procs, wait_for

from hero.llm.breaker import CLOSED, breakers_path, read_breakers
from hero.llm.client import (
    ContentFiltered,
    ContentRefused,
    LlmError,
    ModelOutage,
    ModelRefused,
    ModelUnavailable,
)
from hero.llm.scripted import REFUSALS, HttpError, Raw, ScriptedModel, refusal

Start = Callable[..., ScriptedModel]
ALL_DONE_S = 300.0


def answer(message: dict[str, Any], finish: str | None) -> Raw:
    return Raw({"choices": [{"index": 0, "message": message, "finish_reason": finish}]})


#: Answers of 200 that carry no answer, only a refusal of the content.
WITHHELD = {
    "azure-finish-content-filter": answer({"role": "assistant", "content": None}, "content_filter"),
    "gateway-finish-refusal": answer({"role": "assistant", "content": ""}, "refusal"),
    "openai-refusal-text": answer(
        {"role": "assistant", "content": None, "refusal": "I can't help with that."}, "stop"
    ),
}


# --------------------------------------------------------------------------- the client


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_each_providers_refusal_is_its_storys_end(scripted: Start, name: str) -> None:
    model = scripted([refusal(name), refusal(name)])
    with pytest.raises(ContentRefused) as caught:
        make_client(model.base_url, max_attempts=3).complete(MESSAGES)
    exc = caught.value
    assert not isinstance(exc, ModelOutage)  # the breaker never hears of it
    assert exc.provider == "scripted"
    assert "provider 'scripted' refused this story's content" in str(exc)
    assert len(model.requests) == 1  # asking again sends what was refused again


@pytest.mark.parametrize("name", sorted(WITHHELD))
def test_an_answer_withheld_as_a_refusal_is_its_storys_end(scripted: Start, name: str) -> None:
    model = scripted([WITHHELD[name]])
    with pytest.raises(ContentFiltered, match="refused this story's content") as caught:
        make_client(model.base_url).complete(MESSAGES)
    assert not isinstance(caught.value, ModelOutage)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (401, "Incorrect API key provided"),
        (403, "Your account was suspended for violating our usage policies."),
        (403, "Project does not have access to model scripted-test"),
        (400, "Unsupported parameter: 'max_tokens'"),
    ],
)
def test_what_refuses_every_request_still_stops_the_provider(
    scripted: Start, status: int, message: str
) -> None:
    model = scripted([HttpError(status, message)])
    with pytest.raises(ModelRefused):
        make_client(model.base_url).complete(MESSAGES)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_quota_or_a_server_error_is_still_an_outage(scripted: Start, status: int) -> None:
    body = {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    model = scripted([Raw(body, status=status)] * 2)
    with pytest.raises(ModelUnavailable):
        make_client(model.base_url, max_attempts=2).complete(MESSAGES)


def test_a_refusal_that_echoes_an_account_word_on_a_400_is_still_the_storys(
    scripted: Start,
) -> None:
    """The account words weigh on a 403 only: a 400 from moderation that quotes the
    prompt ("delete my account") is the story's."""
    body = {
        "error": {
            "message": "Invalid prompt: 'delete my account' was flagged by moderation.",
            "code": "invalid_prompt",
        }
    }
    model = scripted([Raw(body, status=400)])
    with pytest.raises(LlmError) as caught:
        make_client(model.base_url).complete(MESSAGES)
    assert isinstance(caught.value, ContentRefused)


# --------------------------------------------------------------------------- hero watch


def record(home: Path, sid: str) -> dict[str, Any] | None:
    try:
        return json.loads((home / "runs" / "state" / f"{sid}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def status_of(home: Path, sid: str) -> str:
    state = record(home, sid)
    return str(state["status"]) if state else ""


@pytest.mark.slow
def test_refused_stories_end_and_the_providers_other_stories_run_on_across_a_restart(
    scripted: Start, make_home: Callable[..., Path], write_story: Callable[..., Path], procs: Procs
) -> None:
    """Each refusal, in each provider's words, ends its own story in ``error`` with the
    reason; the stories beside and after them on the same provider pass; the breaker
    never opens; a restarted `hero watch` runs the new story, not a refused one again."""
    refused = {f"r-{name}": refusal(name) for name in sorted(REFUSALS)}
    refused |= {f"w-{name}": raw for name, raw in WITHHELD.items()}
    policy = Policy()

    def handler(body: dict[str, Any]) -> Any:
        sid = story_of(body)
        if sid in refused and not is_review(body):
            return refused[sid]
        return policy(body)

    model = scripted(handler)
    home = make_home(model, llm_max_attempts=3, max_parallel=2)
    fine = ["ok-1", "ok-2"]
    for sid in [*refused, *fine]:
        write_story(home, sid, verify=[f"test -f {sid}-r1.txt"])
    daemon = procs.start(home)

    def settled(ids: list[str]) -> bool:
        return all(status_of(home, sid) in ("passed", "error") for sid in ids)

    assert wait_for(lambda: settled([*refused, *fine]), ALL_DONE_S), daemon.output()
    for sid in fine:
        assert status_of(home, sid) == "passed", daemon.output()
    for sid in refused:
        state = record(home, sid)
        assert state is not None and state["status"] == "error", (sid, state)
        assert "provider 'scripted' refused this story's content" in state["error"], state
        assert "outage" not in state
        sent = [r for r in model.requests if story_of(r.body) == sid]
        assert len(sent) == 1, sid  # never retried
    breaker = read_breakers(breakers_path(home)).get("scripted")
    assert breaker is None or breaker.state == CLOSED
    assert not daemon.events("provider stopped") and not daemon.events("provider unavailable")

    # restarted with one more story: it runs; no refused story runs again
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.wait_exit()
    seen = len(model.requests)
    write_story(home, "ok-3", verify=["test -f ok-3-r1.txt"])
    again = procs.start(home, name="watch-2")
    assert wait_for(lambda: status_of(home, "ok-3") == "passed", ALL_DONE_S), again.output()
    again.wait_event("finished", count=1)
    assert [e["story"] for e in again.events("started")] == ["ok-3"]
    assert {story_of(r.body) for r in model.requests[seen:]} == {"ok-3"}
    for sid in refused:
        assert status_of(home, sid) == "error"
