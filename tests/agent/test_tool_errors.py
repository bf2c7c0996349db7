"""The consecutive-tool-error guardrail: a worker calling its tools wrongly N times in a row
stops its round with a reason naming ``worker_max_tool_errors``; a call that is not an error
(a bash command exiting non-zero included) resets the count; a resumed round goes on
counting from its trace.

Real parts: the real client over HTTP to the scripted model on loopback, real tools on a
real directory, a real trace file replayed as a restart replays it.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hero.agent.loop import GUARDRAILS, AgentResult, run_agent
from hero.agent.replay import replay_round, round_start_fields
from hero.agent.tools import ToolContext
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings, WorkerLimits
from hero.llm.client import LlmClient
from hero.llm.scripted import Reply, ScriptedModel, ToolCall, call, calls, text
from hero.runner import child_env
from hero.trace import Trace, read_trace

Start = Callable[..., ScriptedModel]
BASE = "0" * 40
STARTED = 1234.5


def client_for(model: ScriptedModel) -> LlmClient:
    provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
    return LlmClient(
        RoleConfig("worker", provider, "scripted-worker", None),
        LlmSettings(timeout_s=30, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.01),
    )


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "wt"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    return ToolContext(root=root, env=child_env(), bash_timeout_s=60)


def run(
    model: ScriptedModel,
    ctx: ToolContext,
    trace_path: Path,
    limits: WorkerLimits,
    **kwargs: Any,
) -> tuple[AgentResult, list[dict[str, Any]]]:
    messages = [
        {"role": "system", "content": "You are a worker."},
        {"role": "user", "content": "Do the task."},
    ]
    with Trace(trace_path) as trace:
        if "resume" not in kwargs:
            trace.round_start(1, story="s", run=1, branch="b", **round_start_fields(BASE, STARTED))
        result = run_agent(client_for(model), messages, ctx, limits, trace, **kwargs)
    return result, messages


def missing(n: int) -> Reply:
    """A call the tool refuses (no such file), different each time: no loop."""
    return call("read_file", path=f"missing-{n}.txt")


def test_errors_in_a_row_stop_the_round_naming_the_setting(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    model = scripted([missing(n) for n in range(10)])
    result, messages = run(model, ctx, tmp_path / "t.jsonl", WorkerLimits(max_tool_errors=3))

    assert "tool_errors" in GUARDRAILS and result.guardrail
    assert result.stop_reason == "tool_errors"
    assert "worker_max_tool_errors 3" in result.detail
    assert "3 tool calls in a row were errors" in result.detail
    # stopped before the next model call: three answers asked for, three calls run
    assert len(model.requests) == 3 and result.tool_calls == 3
    assert [m["role"] for m in messages].count("tool") == 3
    end = read_trace(tmp_path / "t.jsonl")[-1]
    assert end["event"] == "agent_end" and end["stop_reason"] == "tool_errors"


def test_every_kind_of_wrong_call_counts(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    wrong = [
        call("no_such_tool", x=1),  # an unknown tool
        Reply(tool_calls=(ToolCall("read_file", "{not json"),)),  # arguments not JSON
        call("read_file", file="hello.txt"),  # arguments that do not fit the schema
        call("read_file", path="../outside.txt"),  # a path outside the worktree
        call("edit_file", path="hello.txt", old_string="absent", new_string="x"),
    ]
    model = scripted([*wrong, text("unreachable")])
    result, messages = run(model, ctx, tmp_path / "t.jsonl", WorkerLimits(max_tool_errors=5))

    assert result.stop_reason == "tool_errors", [m["content"] for m in messages[-5:]]
    assert result.tool_calls == 5 and len(model.requests) == 5


def test_a_call_that_works_resets_the_count(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    script = [missing(1), missing(2), call("read_file", path="hello.txt"), missing(3)]
    model = scripted([*script, missing(4), text("done")])
    result, _ = run(model, ctx, tmp_path / "t.jsonl", WorkerLimits(max_tool_errors=3))

    assert result.stop_reason == "done" and result.final_message == "done"


def test_a_command_that_exits_non_zero_is_no_tool_error(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    failing = [call("bash", command=f"echo try {n}; exit 1") for n in range(4)]
    model = scripted([*failing, text("done")])
    result, messages = run(model, ctx, tmp_path / "t.jsonl", WorkerLimits(max_tool_errors=2))

    assert result.stop_reason == "done"
    assert all("exit code: 1" in m["content"] for m in messages if m["role"] == "tool")


def test_errors_within_one_reply_stop_before_the_next_call(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    many = calls(*(ToolCall("read_file", {"path": f"gone-{n}.txt"}) for n in range(5)))
    model = scripted([many, text("unreachable")])
    result, _ = run(model, ctx, tmp_path / "t.jsonl", WorkerLimits(max_tool_errors=2))

    assert result.stop_reason == "tool_errors"
    assert result.tool_calls == 2 and len(model.requests) == 1


def test_zero_is_no_limit(scripted: Start, ctx: ToolContext, tmp_path: Path) -> None:
    model = scripted([*(missing(n) for n in range(12)), text("done")])
    result, _ = run(model, ctx, tmp_path / "t.jsonl", WorkerLimits(max_tool_errors=0))

    assert result.stop_reason == "done" and result.tool_calls == 12


def test_a_resumed_round_goes_on_counting_from_its_trace(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    """A round stopped (as by a kill) after two errors in a row: its trace says so, and
    the resumed round stops at the third, not the fifth."""
    trace_path = tmp_path / "t.jsonl"
    first = scripted([call("read_file", path="hello.txt"), missing(1), missing(2)])
    run(first, ctx, trace_path, WorkerLimits(max_turns=3, max_tool_errors=3))
    # the kill: the round's agent_end never made it to the trace
    lines = trace_path.read_text().splitlines()
    assert json.loads(lines[-1])["event"] == "agent_end"
    trace_path.write_text("\n".join(lines[:-1]) + "\n")
    replayed = replay_round(trace_path, base_sha=BASE, started_at=STARTED)
    assert replayed is not None and not replayed.done
    assert replayed.tool_errors == 2

    second = scripted([missing(3), missing(4), text("unreachable")])
    with Trace(trace_path) as trace:
        trace.round_start(
            1, story="s", run=2, branch="b", part=2, **round_start_fields(BASE, STARTED)
        )
        result = run_agent(
            client_for(second),
            replayed.messages,
            ctx,
            WorkerLimits(max_tool_errors=3),
            trace,
            resume=replayed,
        )
    assert result.stop_reason == "tool_errors"
    assert len(second.requests) == 1


def test_answers_for_lost_calls_neither_count_nor_reset(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    """hero's own answer for a call lost in a restart is marked an error in the trace, but
    the worker did not make it wrongly: it leaves the count as it was."""
    trace_path = tmp_path / "t.jsonl"
    first = scripted([missing(1), call("read_file", path="hello.txt")])
    run(first, ctx, trace_path, WorkerLimits(max_turns=2))
    events = read_trace(trace_path)
    # the kill: during the second call, its result and the end never written
    kept = [e for e in events if e["event"] not in ("agent_end",)]
    last_result = max(i for i, e in enumerate(kept) if e["event"] == "tool_result")
    del kept[last_result]
    trace_path.write_text("".join(json.dumps(e) + "\n" for e in kept))
    replayed = replay_round(trace_path, base_sha=BASE, started_at=STARTED)
    assert replayed is not None and [c.started for c in replayed.lost] == [True]
    assert replayed.tool_errors == 1

    second = scripted([missing(2), text("unreachable")])
    with Trace(trace_path) as trace:
        trace.round_start(
            1, story="s", run=2, branch="b", part=2, **round_start_fields(BASE, STARTED)
        )
        result = run_agent(
            client_for(second),
            replayed.messages,
            ctx,
            WorkerLimits(max_tool_errors=2),
            trace,
            resume=replayed,
        )
    assert result.stop_reason == "tool_errors"
    assert len(second.requests) == 1
    # and the trace, replayed again, says the same
    again = replay_round(trace_path, base_sha=BASE, started_at=STARTED)
    assert again is not None and again.tool_errors == 2


def test_arguments_nested_past_any_parser_are_a_tool_error_not_a_crash(
    scripted: Start, ctx: ToolContext, tmp_path: Path
) -> None:
    """What the model writes is hostile: arguments nested deeper than Python's JSON parser
    goes fail that call (and go back as ``{}``), they do not end the round."""
    deep = "[" * 200_000
    hostile = [Reply(tool_calls=(ToolCall("read_file", deep + str(n)),)) for n in range(2)]
    model = scripted([*hostile, text("done")])
    result, messages = run(model, ctx, tmp_path / "t.jsonl", WorkerLimits(max_tool_errors=2))

    assert result.stop_reason == "tool_errors", result.detail
    assert all("not valid JSON" in m["content"] for m in messages if m["role"] == "tool")
    assert model.requests[-1].body["messages"][-2]["tool_calls"][0]["function"]["arguments"] == "{}"
    # and `hero logs` shows the round's trace, those arguments too
    from hero.views.logs import format_line

    shown = [
        out for line in (tmp_path / "t.jsonl").read_text().splitlines() for out in format_line(line)
    ]
    assert any("read_file" in out for out in shown)


@pytest.mark.slow
def test_kill_9_mid_round_and_the_count_goes_on_in_the_next_run(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """Two wrong calls, then hero is killed (-9) while a command runs: the run after it
    resumes the round with the count at two (the lost call neither counts nor resets),
    so the third wrong call stops it."""
    from helpers import Hero, is_review, long_command, step_of, verdict
    from helpers import load_state as load_record

    plan = [missing(1), missing(2), call("bash", command=long_command("stop.pid")), missing(3)]

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "Fine.")
        return plan[step_of(body)] if step_of(body) < len(plan) else text("Done.")

    model = scripted(handler)
    home = make_home(model, sandbox="none", worker_max_tool_errors=3, max_retries=1)
    story = write_story(home, "s1", verify=["true"])
    first = Hero(home, story, tmp_path, "first")
    try:
        sleeper = first.wait_for_file(home / "worktrees" / "s1" / "stop.pid")
        first.proc.kill()
        assert first.proc.wait(timeout=60) == -9
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
            first.proc.wait()
    try:
        os.kill(sleeper, signal.SIGKILL)
    except ProcessLookupError:
        pass

    again = Hero(home, story, tmp_path, "again")
    assert again.wait() == 1, again.output()
    record = load_record(home)
    assert record["status"] == "gave_up"
    (round1,) = record["rounds"]
    assert round1["worker"]["stop_reason"] == "tool_errors", again.output()
    assert "3 tool calls in a row" in round1["worker"]["detail"]
    # the run after the kill asked once (the third wrong call), and no more
    asked = [step_of(r.body) for r in model.requests if not is_review(r.body)]
    assert asked == [0, 1, 2, 3]
