"""Trace events: one kind enum, one writer per kind, the lines as they always were."""

from __future__ import annotations

import json
from pathlib import Path

from hero.llm.client import Completion, ToolCallRequest
from hero.trace import Event, Trace, read_trace
from hero.views import logs

CALL = ToolCallRequest(id="c1", name="bash", arguments='{"command": "ls"}')


def answer(**fields: object) -> Completion:
    base: dict[str, object] = {
        "content": "looking",
        "tool_calls": (CALL,),
        "message": {"role": "assistant", "content": "looking"},
        "tokens_in": 100,
        "tokens_out": 20,
        "http_s": 0.123456,
        "finish_reason": "tool_calls",
    }
    return Completion(**{**base, **fields})  # type: ignore[arg-type]


def test_each_kind_writes_its_fields_in_the_order_traces_have_always_had(
    tmp_path: Path,
) -> None:
    """Replay and `hero logs` read these lines, and old traces must stay readable: the keys
    and their order are the ones hero wrote before the writers were typed."""
    path = tmp_path / "round-1.jsonl"
    with Trace(path) as trace:
        trace.round_start(1, story="s1", run=2, branch="hero/s1", base="abc", started=1.5)
        trace.round_start(1, story="s1", run=3, branch="hero/s1", part=2, base="abc", started=1.5)
        trace.resume_failed("torn")
        trace.message("system", "be good")
        trace.message("user", "restarted", restart=True)
        trace.assistant(1, answer(), estimate=None)
        reasoning = {"role": "assistant", "content": "x", "reasoning_content": "think"}
        trace.assistant(
            2, answer(tokens_cached=60, reasoning="think", message=reasoning), estimate=77
        )
        trace.tool_start(1, CALL)
        trace.tool_result(1, "c1", "bash", "out", is_error=False, duration_s=0.123456)
        trace.tool_result(1, "c2", "ls", "lost", is_error=True, lost="running")
        trace.condense({"turn": 3, "tokens_before": 10, "tokens_after": 5})
        trace.agent_end({"stop_reason": "done", "turns": 2})
        trace.verify({"passed": True, "commands": []})
        trace.review_request("review this")
        trace.review_answer(answer(content='{"verdict": "APPROVED"}'))
        trace.verdict({"verdict": "APPROVED", "summary": "fine"})

    events = read_trace(path)
    keys = [list(e)[2:] for e in events]  # after "t" and "ts"
    assert keys == [
        ["event", "story", "round", "run", "branch", "base", "started"],
        ["event", "story", "round", "run", "branch", "base", "started", "resumed", "part"],
        ["event", "reason"],
        ["event", "role", "content"],
        ["event", "role", "content", "restart"],
        ["event", "turn", "content", "tool_calls", "tokens_in", "tokens_out", "http_s"]
        + ["finish_reason"],
        ["event", "turn", "content", "tool_calls", "tokens_in", "tokens_out", "http_s"]
        + ["finish_reason", "estimate", "tokens_cached", "reasoning", "reasoning_sent"],
        ["event", "turn", "id", "name"],
        ["event", "turn", "id", "name", "is_error", "content", "duration_s"],
        ["event", "turn", "id", "name", "is_error", "content", "lost"],
        ["event", "turn", "tokens_before", "tokens_after"],
        ["event", "stop_reason", "turns"],
        ["event", "passed", "commands"],
        ["event", "content"],
        ["event", "content", "tokens_in", "tokens_out", "http_s"],
        ["event", "verdict", "summary"],
    ]
    assert [e["event"] for e in events] == [
        "round_start",
        "round_start",
        "resume_failed",
        "message",
        "message",
        "assistant",
        "assistant",
        "tool_start",
        "tool_result",
        "tool_result",
        "condense",
        "agent_end",
        "verify",
        "review_request",
        "review_answer",
        "verdict",
    ]
    assert events[5]["tool_calls"] == [
        {"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'}
    ]
    assert events[5]["http_s"] == 0.1235 and events[8]["duration_s"] == 0.1235
    assert '"event": "round_start"' in path.read_text().splitlines()[0]
    assert set(json.loads(path.read_text().splitlines()[1])) >= {"resumed", "part"}


def test_hero_logs_has_a_view_of_every_kind_of_event() -> None:
    """`hero logs` reads the kinds from the one enum: a new kind without its own view is
    caught here, not shown generically by surprise."""
    assert set(logs._FORMATTERS) == set(Event)
    for kind in Event:  # a bare event of each kind: no field is required to show it
        shown = logs.format_event({"event": str(kind), "t": 1.0})
        assert shown or kind == Event.TOOL_START  # hidden: its call's result follows
