"""Tests for hero.agent.loop.run_agent: a real LlmClient to the scripted model, real tools."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hero.agent.loop import AgentResult, run_agent
from hero.agent.tools import TOOL_NAMES, ToolContext
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings, WorkerLimits
from hero.llm.client import LlmClient
from hero.llm.scripted import Reply, ScriptedModel, ToolCall, call, calls, text
from hero.runner import child_env
from hero.trace import Trace, read_trace

Start = Callable[..., ScriptedModel]


def client_for(model: ScriptedModel) -> LlmClient:
    provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
    return LlmClient(
        RoleConfig("worker", provider, "scripted-worker", None),
        LlmSettings(timeout_s=10, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.01),
    )


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "wt"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    (root / "sub").mkdir()
    return ToolContext(root=root, env=child_env(), bash_timeout_s=30)


def start_messages() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a worker."},
        {"role": "user", "content": "Do the task."},
    ]


def run(
    model: ScriptedModel,
    ctx: ToolContext,
    tmp_path: Path,
    limits: WorkerLimits | None = None,
    messages: list[dict[str, Any]] | None = None,
    **kwargs: Any,
) -> tuple[AgentResult, list[dict[str, Any]], list[dict[str, Any]]]:
    messages = start_messages() if messages is None else messages
    trace_path = tmp_path / "trace.jsonl"
    with Trace(trace_path) as trace:
        result = run_agent(
            client_for(model), messages, ctx, limits or WorkerLimits(), trace, **kwargs
        )
    return result, messages, read_trace(trace_path)


def always(reply: Reply) -> Callable[[dict], Reply]:
    return lambda body: reply


# ------------------------------------------------------------------------- ending


@pytest.mark.slow
def test_ends_on_reply_without_tool_calls(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted(
        [
            Reply(
                tool_calls=(ToolCall("write_file", {"path": "a.txt", "content": "hi\n"}, id="w1"),),
                prompt_tokens=10,
                completion_tokens=4,
            ),
            Reply(content="all done", prompt_tokens=20, completion_tokens=3),
        ]
    )
    result, messages, _ = run(model, ctx, tmp_path)

    assert result.stop_reason == "done"
    assert not result.guardrail
    assert result.final_message == "all done"
    assert (result.turns, result.tool_calls) == (2, 1)
    assert (result.tokens_in, result.tokens_out) == (30, 7)
    assert (ctx.root / "a.txt").read_text() == "hi\n"
    assert model.remaining == 0
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[-1] == {"role": "assistant", "content": "all done"}


def test_first_reply_without_tools_ends_at_once(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted([text("nothing to do")])
    result, messages, _ = run(model, ctx, tmp_path)
    assert result.stop_reason == "done"
    assert (result.turns, result.tool_calls) == (1, 0)
    assert len(messages) == 3
    body = model.requests[0].body
    assert {t["function"]["name"] for t in body["tools"]} == set(TOOL_NAMES)


def test_tool_results_are_tool_messages_with_matching_ids(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted(
        [
            calls(
                ToolCall("read_file", {"path": "hello.txt"}, id="r1"),
                ToolCall("ls", {}, id="l2"),
                ToolCall("nope", {}, id="n3"),
            ),
            text("done"),
        ]
    )
    result, messages, _ = run(model, ctx, tmp_path)

    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["r1", "l2", "n3"]
    assert "hello" in tool_messages[0]["content"]
    assert "hello.txt" in tool_messages[1]["content"]
    assert "unknown tool 'nope'" in tool_messages[2]["content"]
    assert result.tool_calls == 3
    # The whole history, tool results included, went back to the model.
    sent = model.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert [m.get("tool_call_id") for m in sent[3:]] == ["r1", "l2", "n3"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["r1", "l2", "n3"]


# ------------------------------------------------------------------------- guardrails


def test_max_turns(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    def handler(body: dict) -> Reply:
        n = len(body["messages"])
        return call("read_file", path="hello.txt", offset=n)  # a new call each turn

    model = scripted(handler)
    result, _, _ = run(model, ctx, tmp_path, WorkerLimits(max_turns=3))

    assert result.stop_reason == "max_turns"
    assert result.guardrail
    assert "3" in result.detail
    assert result.turns == 3
    assert result.tool_calls == 3
    assert len(model.requests) == 3


def test_max_tool_calls(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    model = scripted(
        [
            calls(
                ToolCall("write_file", {"path": "1.txt", "content": "1"}, id="a"),
                ToolCall("write_file", {"path": "2.txt", "content": "2"}, id="b"),
                ToolCall("write_file", {"path": "3.txt", "content": "3"}, id="c"),
            ),
            text("never asked"),
        ]
    )
    result, messages, _ = run(model, ctx, tmp_path, WorkerLimits(max_tool_calls=2))

    assert result.stop_reason == "max_tool_calls"
    assert "2" in result.detail
    assert result.tool_calls == 2
    assert (ctx.root / "2.txt").exists()
    assert not (ctx.root / "3.txt").exists()
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["a", "b"]
    assert len(model.requests) == 1


def test_max_tool_calls_across_turns(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    def handler(body: dict) -> Reply:
        return call("read_file", path="hello.txt", offset=len(body["messages"]))

    model = scripted(handler)
    result, _, _ = run(model, ctx, tmp_path, WorkerLimits(max_tool_calls=2))
    assert result.stop_reason == "max_tool_calls"
    assert result.tool_calls == 2
    assert result.turns == 3


def test_zero_wall_time_stops_before_the_first_call(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted([text("never asked")])
    result, messages, events = run(model, ctx, tmp_path, WorkerLimits(max_wall_s=0))

    assert result.stop_reason == "max_wall_time"
    assert result.guardrail
    assert result.turns == 0
    assert model.requests == []
    assert len(messages) == 2
    assert events[-1]["event"] == "agent_end"
    assert events[-1]["stop_reason"] == "max_wall_time"


def test_same_call_repeated_is_a_loop(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    model = scripted(always(call("ls", path=".")))
    result, messages, _ = run(model, ctx, tmp_path, WorkerLimits(loop_repeats=3, max_turns=10))

    assert result.stop_reason == "loop"
    assert result.guardrail
    assert "ls" in result.detail and "3 times" in result.detail
    assert result.turns == 3
    assert result.tool_calls == 2  # the third identical call is not run
    assert len(model.requests) == 3


def test_same_arguments_in_another_key_order_are_the_same_call(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    def handler(body: dict) -> Reply:
        if len(body["messages"]) % 4 == 2:
            args = '{"path": "hello.txt", "limit": 5}'
        else:
            args = '{ "limit":5,"path":"hello.txt" }'
        return Reply(tool_calls=(ToolCall("read_file", args),))

    model = scripted(handler)
    result, _, _ = run(model, ctx, tmp_path, WorkerLimits(loop_repeats=2, max_turns=10))
    assert result.stop_reason == "loop"
    assert result.turns == 2


def test_same_tool_with_different_arguments_is_not_a_loop(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    def handler(body: dict) -> Reply:
        return call("ls", path="." if len(body["messages"]) % 4 == 2 else "sub")

    model = scripted(handler)
    result, _, events = run(model, ctx, tmp_path, WorkerLimits(loop_repeats=2, max_turns=5))

    assert result.stop_reason == "max_turns"
    assert result.turns == 5
    assert result.tool_calls == 5
    assert not any(e["is_error"] for e in events if e["event"] == "tool_result")


def test_repeats_count_within_one_reply(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    same = ToolCall("ls", {"path": "."})
    model = scripted([calls(same, same, same), text("never asked")])
    result, _, _ = run(model, ctx, tmp_path, WorkerLimits(loop_repeats=3))
    assert result.stop_reason == "loop"
    assert result.tool_calls == 2


# ------------------------------------------------------------------------- trace and timing


def test_trace_events(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    model = scripted(
        [
            Reply(tool_calls=(ToolCall("bash", {"command": "echo traced"}, id="b1"),)),
            text("finished"),
        ]
    )
    result, _, events = run(model, ctx, tmp_path)

    kinds = [e["event"] for e in events]
    assert kinds == [
        "message",
        "message",
        "assistant",
        "tool_start",
        "tool_result",
        "assistant",
        "agent_end",
    ]
    assert [e["role"] for e in events[:2]] == ["system", "user"]
    first = events[2]
    assert first["turn"] == 1
    assert first["tool_calls"][0]["id"] == "b1"
    assert first["tool_calls"][0]["name"] == "bash"
    assert json.loads(first["tool_calls"][0]["arguments"]) == {"command": "echo traced"}
    assert (events[3]["id"], events[3]["name"]) == ("b1", "bash")  # tool_start
    tool = events[4]
    assert (tool["id"], tool["name"], tool["is_error"]) == ("b1", "bash", False)
    assert "traced" in tool["content"]
    assert events[5]["content"] == "finished"
    end = events[6]
    assert end["stop_reason"] == "done"
    assert (end["turns"], end["tool_calls"]) == (2, 1)
    assert all("t" in e and "ts" in e for e in events)
    assert result.final_message == "finished"


def test_command_and_llm_time_accumulate(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    model = scripted(
        [
            call("bash", command="true"),
            call("bash", command="echo second"),
            text("done"),
        ]
    )
    seen: list[tuple[int, int]] = []
    result, _, _ = run(model, ctx, tmp_path, on_turn=lambda r: seen.append((r.turns, r.tool_calls)))

    assert result.stop_reason == "done"
    assert result.command_s > 0
    assert result.llm_s > 0
    assert result.wall_s > 0
    assert seen == [(1, 1), (2, 2)]


def test_non_bash_tools_add_no_command_time(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted([call("ls"), text("done")])
    result, _, _ = run(model, ctx, tmp_path)
    assert result.command_s == 0.0
    assert result.llm_s > 0


def test_trace_without_path_writes_nothing(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted([call("ls"), text("done")])
    result = run_agent(client_for(model), start_messages(), ctx, WorkerLimits(), Trace(None))
    assert result.stop_reason == "done"
    assert not (tmp_path / "trace.jsonl").exists()


# ------------------------------------------------------------------------- output limit


def test_a_reply_cut_by_the_output_limit_is_no_final_answer(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted(
        [
            Reply(content="Here is the first half of my pla", finish_reason="length"),
            Reply(
                tool_calls=(ToolCall("write_file", {"path": "a.txt", "content": "hi\n"}, id="w1"),),
            ),
            Reply(content="all done"),
        ]
    )
    result, messages, events = run(model, ctx, tmp_path)

    assert result.stop_reason == "done" and result.final_message == "all done"
    assert (ctx.root / "a.txt").read_text() == "hi\n"
    # the model was told, in the very next request, that its reply was cut
    second = model.requests[1].body["messages"]
    assert second[-2] == {"role": "assistant", "content": "Here is the first half of my pla"}
    assert second[-1]["role"] == "user" and "cut off" in second[-1]["content"]
    assert "smaller steps" in second[-1]["content"]
    finish = [e["finish_reason"] for e in events if e["event"] == "assistant"]
    assert finish == ["length", "tool_calls", "stop"]


def test_replies_cut_again_and_again_stop_the_round_with_the_reason(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted(always(Reply(content="too long", finish_reason="length")))
    result, _, _ = run(model, ctx, tmp_path)

    assert result.stop_reason == "output_limit" and result.guardrail
    assert "3 replies in a row were cut off" in result.detail
    assert len(model.requests) == 3
