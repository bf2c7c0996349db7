"""Tests for `hero logs`: formatting of trace events, --round, unknown ids, following."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import WAIT_S, read_lines, wait_for_line

from hero.cli import main
from hero.state import RunState, save_state
from hero.trace import Trace
from hero.views.logs import WIDTH, follow, format_event

LONG_PROMPT = "\n".join(f"prompt line {i}" for i in range(1, 11))


def trace_path(home: Path, story_id: str, n: int) -> Path:
    return home / "runs" / story_id / f"round-{n}.jsonl"


def save(home: Path, story_id: str = "s1", status: str = "running", **fields: object) -> None:
    save_state(
        home,
        RunState(
            id=story_id,
            status=status,
            title=f"Story {story_id}",
            branch=f"hero/{story_id}",
            **fields,
        ),  # type: ignore[arg-type]
    )


def full_round(trace: Trace, n: int = 1) -> None:
    """Every event kind the pipeline writes, plus one it does not."""
    trace.event("round_start", story="s1", round=n, run=1, branch="hero/s1")
    trace.event("message", role="system", content=LONG_PROMPT)
    trace.event("message", role="user", content="# Story s1\n\nDo the thing.")
    trace.event(
        "assistant",
        turn=1,
        content="I will look around first.",
        tool_calls=[
            {"id": "c1", "name": "bash", "arguments": json.dumps({"command": "ls -la\npwd"})},
            {"id": "c2", "name": "read_file", "arguments": json.dumps({"path": "x" * 300})},
            {"id": "c3", "name": "weird", "arguments": "not json {"},
        ],
        tokens_in=100,
        tokens_out=20,
        http_s=0.5,
    )
    trace.event(
        "tool_result",
        turn=1,
        id="c1",
        name="bash",
        is_error=False,
        content="exit code: 0\n" + "\n".join(f"file{i}" for i in range(20)),
        duration_s=2.5,
    )
    trace.event(
        "tool_result",
        turn=1,
        id="c2",
        name="read_file",
        is_error=True,
        content="error: no such file",
        duration_s=0.001,
    )
    trace.event("assistant", turn=2, content="", tool_calls=[], tokens_in=5, tokens_out=0)
    trace.event(
        "agent_end",
        stop_reason="loop",
        detail="the same call bash(ls) was made 4 times in a row",
        turns=2,
        tool_calls=2,
        wall_s=12.34,
    )
    trace.event(
        "verify",
        passed=False,
        commands=[
            {
                "tier": "lint",
                "command": "ruff check .",
                "exit_code": 0,
                "duration_s": 0.2,
                "timed_out": False,
                "tail": "",
            },
            {
                "tier": "unit",
                "command": "pytest -q",
                "exit_code": 1,
                "duration_s": 3.0,
                "timed_out": False,
                "tail": "collected 3 items\n..F\nFAILED test_x.py::test_y\nAssertionError: 1 != 2\n",
            },
        ],
        skipped_tiers=["integration"],
        log="/home/runs/s1/verify-r1.log",
    )
    trace.event("review_request", content="# Review\n" + LONG_PROMPT)
    trace.event("review_answer", content='{"verdict": "CHANGES_REQUESTED"}', tokens_in=9)
    trace.event(
        "verdict",
        verdict="CHANGES_REQUESTED",
        summary="verification failed: pytest -q",
        ac_check=[{"ac": "sub() works", "satisfied": False}, {"ac": "docs", "satisfied": True}],
        comments=[{"file": "calc.py", "line": 3, "severity": "blocker", "comment": "wrong sign"}],
        short_circuited=True,
        malformed=False,
    )
    trace.event("mystery", flavour="new", size=3)


def write_round(home: Path, n: int = 1, story_id: str = "s1") -> Path:
    path = trace_path(home, story_id, n)
    with Trace(path) as trace:
        full_round(trace, n)
    return path


def logs(home: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["logs", *args, "--home", str(home)])
    out, err = capsys.readouterr()
    return code, out, err


def line_of(out: str, needle: str) -> str:
    return next(line for line in out.splitlines() if needle in line)


# --------------------------------------------------------------------------- formatting


def test_each_event_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, current_round=1)
    write_round(tmp_path)

    code, out, err = logs(tmp_path, capsys, "s1")

    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == 'story s1 "Story s1": running; round 1, 0 finished; branch hero/s1'
    assert lines[1] == "=== round 1 === runs/s1/round-1.jsonl"
    assert "start     round 1 run 1 on hero/s1 at " in lines[2]
    assert lines[2].startswith(" +00:00.")
    # prompts: first lines, and how much was cut
    system = lines.index(line_of(out, "system"))
    assert lines[system].endswith("system    prompt line 1")
    assert lines[system + 1].strip() == "prompt line 2"
    assert lines[system + 3].strip() == "[... 7 more lines, 99 chars]"
    assert line_of(out, " user ").endswith("user      # Story s1")
    assert "Do the thing." in out
    # assistant text, then each tool call shortened
    assert line_of(out, "assistant").endswith("assistant I will look around first.")
    assert line_of(out, " call ").endswith('call      bash(command="ls -la\\npwd")')
    read_call = line_of(out, "read_file(")
    assert read_call.endswith("...") and len(read_call) == WIDTH
    assert line_of(out, "weird(").endswith("weird(not json {)")
    # tool results: first lines, duration when it matters, error marker
    result = lines.index(line_of(out, "result    bash"))
    assert lines[result].endswith("result    bash (2.5s): exit code: 0")
    assert [x.strip() for x in lines[result + 1 : result + 5]] == [
        "file0",
        "file1",
        "file2",
        "[... 17 more lines, 112 chars]",
    ]
    assert line_of(out, "read_file:").endswith("result    [ERROR] read_file: error: no such file")
    assert line_of(out, "(empty answer)")
    worker = lines.index(line_of(out, " worker "))
    assert lines[worker].endswith("worker    loop: 2 turns, 2 tool calls, 12.3s")
    assert lines[worker + 1].strip() == "the same call bash(ls) was made 4 times in a row"
    # checks: each command, the end of a failure's output, what did not run
    verify = lines.index(line_of(out, " verify "))
    assert lines[verify].endswith("verify    FAILED")
    assert [x.strip() for x in lines[verify + 1 : verify + 9]] == [
        "[PASS] lint: ruff check . (exit 0, 0.2s)",
        "[FAIL] unit: pytest -q (exit 1, 3.0s)",
        "[... 1 earlier line(s)]",
        "..F",
        "FAILED test_x.py::test_y",
        "AssertionError: 1 != 2",
        "not run (an earlier tier failed): integration",
        "full output: /home/runs/s1/verify-r1.log",
    ]
    assert line_of(out, " review ").endswith("review    # Review")
    assert line_of(out, " answer ").endswith('answer    {"verdict": "CHANGES_REQUESTED"}')
    verdict = lines.index(line_of(out, " verdict "))
    assert lines[verdict].endswith(
        "verdict   CHANGES_REQUESTED (without the reviewer): verification failed: pytest -q"
    )
    assert lines[verdict + 1].strip() == "- not met: sub() works"
    assert lines[verdict + 2].strip() == "- [blocker] calc.py:3: wrong sign"
    # an unknown kind: shown generically
    assert line_of(out, "mystery").endswith("mystery   flavour=new, size=3")
    assert max(len(line) for line in lines) <= WIDTH


def test_odd_events_never_crash() -> None:
    odd = [
        {},
        {"event": "assistant", "tool_calls": "not a list", "content": 42},
        {"event": "tool_result", "content": None, "is_error": True},
        {"event": "verify", "commands": [1, None, {"tier": "x"}]},
        {"event": "verdict", "summary": ["a", "b"], "comments": "none", "ac_check": [None]},
        {"event": "message", "role": "user", "content": [{"type": "text", "text": "hi"}, 3]},
        {"event": "round_start", "t": "soon", "ts": "later"},
        {"event": "x" * 50, "t": 99999.0, "nested": {"a": [1, 2]}},
        {"event": "round_start", "resumed": "yes", "part": {"k": [1]}},
        {"event": "resume_failed", "reason": None},
        {"event": "message", "restart": True, "content": None},
        {"event": "assistant", "reasoning": 5, "tokens_cached": "7", "finish_reason": "length"},
        {"event": "assistant", "tokens_cached": -1, "tokens_in": "x", "reasoning": [None]},
        {"event": "tool_result", "lost": ["odd"], "name": None},
        {"event": "condense", "elided": "3", "cut": None, "summary": "not a dict"},
        {"event": "condense", "summary": {"first": [1], "content": 3}, "tokens_after": "9"},
        {"event": "agent_end", "condensations": "2", "parts": True},
    ]
    for event in odd:
        lines = format_event(event)
        assert lines and all(isinstance(line, str) for line in lines)
    assert format_event({"event": "tool_start", "id": None, "name": {}}) == []
    assert format_event({"event": "message", "role": "user", "content": [{"text": "hi"}]})[
        0
    ].endswith("user      hi")
    assert format_event({"event": "x", "t": 3725.0})[0] == " +1:02:05 x         (no fields)"


def test_long_prose_is_wrapped_and_long_output_cut() -> None:
    words = " ".join(f"word{i}" for i in range(60))  # one line of about 400 characters

    prose = format_event({"event": "assistant", "t": 1.0, "content": words, "tool_calls": []})
    output = format_event({"event": "tool_result", "name": "bash", "content": words})
    verdict = format_event({"event": "verdict", "verdict": "APPROVED", "summary": words})

    assert all(len(line) <= WIDTH for line in prose + output + verdict)
    assert " ".join(line[20:].strip() for line in prose) == words  # all of it, wrapped
    assert len(output) == 1 and output[0].endswith("...")  # output is cut, not wrapped
    assert verdict[0].endswith(
        "verdict   APPROVED: word0 word1 word2 word3 word4 word5 word6 word7 word8 word9 word10"
    )
    assert " ".join(line[20:].strip() for line in verdict) == f"APPROVED: {words}"


def test_control_characters_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path)
    with Trace(trace_path(tmp_path, "s1", 1)) as trace:
        trace.event(
            "tool_result", name="bash", is_error=False, content="\x1b[31mred\x1b[0m\tdone\rover"
        )

    _, out, _ = logs(tmp_path, capsys, "s1")

    assert "\x1b" not in out and "\r" not in out
    assert "\\x1b[31mred\\x1b[0m    done" in out
    assert line_of(out, "over").strip() == "over"


def test_torn_and_unreadable_lines_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save(tmp_path)
    path = trace_path(tmp_path, "s1", 1)
    with Trace(path) as trace:
        trace.event("round_start", round=1, run=1)
        trace.event("tool_result", name="bash", content="first run")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"t": 1.5, "ts": 1.0, "event": "tool_res')  # a crash mid-write
    with Trace(path) as trace:  # the resumed run ends the torn line first
        trace.event("round_start", round=1, run=2)
    with open(path, "a", encoding="utf-8") as fh:  # as a trace written before it did
        fh.write('{"t": 1.7, "ts": 1.0, "event": "tool_res')
        fh.write('{"t": 1.8, "event": "round_start", "round": 1, "run": 3}\n')
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("garbage that is not json\n")
        fh.write('{"t": 9.0, "event": "agent_end", "stop_reason": "do')  # torn last line

    code, out, _ = logs(tmp_path, capsys, "s1")

    assert code == 0
    assert "first run" in out
    assert "torn trace line skipped" in out
    assert "round 1 run 2" in out  # the record after the torn part is kept
    assert "unreadable trace line skipped (40 chars)" in out  # the line hero ended
    assert "round 1 run 3" in out
    assert "unreadable trace line skipped (24 chars)" in out
    assert "stop_reason" not in out and "worker" not in out  # the torn last line


# --------------------------------------------------------------------------- long rounds


def first_part(trace: Trace) -> None:
    """A round's worker until hero is killed while a tool call runs (turn 2)."""
    trace.event("round_start", round=1, run=1, branch="hero/s1", base="abc", started=1.0)
    trace.event("message", role="system", content="You are a worker.")
    trace.event("message", role="user", content="# Story s1")
    call = {"id": "c1", "name": "bash", "arguments": json.dumps({"command": "pytest"})}
    trace.event("assistant", turn=1, content="", tool_calls=[call], tokens_in=900)
    trace.event("tool_start", turn=1, id="c1", name="bash")
    trace.event("tool_result", turn=1, id="c1", name="bash", is_error=False, content="3 passed")
    calls = [
        {"id": "c2", "name": "bash", "arguments": json.dumps({"command": "make"})},
        {"id": "c3", "name": "read_file", "arguments": json.dumps({"path": "a.py"})},
    ]
    trace.event("assistant", turn=2, content="", tool_calls=calls, tokens_in=950)
    trace.event("tool_start", turn=2, id="c2", name="bash")  # killed while it ran


def test_a_resumed_round(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, current_round=1)
    path = trace_path(tmp_path, "s1", 1)
    with Trace(path) as trace:
        first_part(trace)
    with Trace(path) as trace:  # the next run goes on where the first stopped
        trace.event(
            "round_start", round=1, run=2, branch="hero/s1", base="abc", resumed=True, part=2
        )
        for call_id, name, lost in (("c2", "bash", "running"), ("c3", "read_file", "not_run")):
            trace.event(
                "tool_result", turn=2, id=call_id, name=name, is_error=True, content="[hero: ...]",
                lost=lost,
            )  # fmt: skip
        trace.event("message", role="user", content="hero was restarted.\nCheck it.", restart=True)
        trace.event(
            "agent_end", stop_reason="done", turns=3, tool_calls=2, condensations=0, parts=2
        )

    code, out, _ = logs(tmp_path, capsys, "s1")

    assert code == 0
    assert "resumed   round 1 part 2 run 2 on hero/s1 at " in out
    assert "start     round 1 run 1 on hero/s1 at " in out  # the first part: no part shown
    assert line_of(out, "[LOST]").endswith(
        "result    [LOST] bash: hero stopped while it ran: result unknown, not run again"
    )
    assert line_of(out, "[NOT RUN]").endswith(
        "result    [NOT RUN] read_file: not run: hero stopped before it started"
    )
    restart = out.splitlines().index(line_of(out, "restart"))
    assert out.splitlines()[restart].endswith("restart   hero was restarted.")
    assert out.splitlines()[restart + 1].strip() == "Check it."
    assert line_of(out, " worker ").endswith("worker    done: 3 turns, 2 tool calls, 2 parts")
    # tool_start is not shown: each call and each result on one line, nothing more
    assert [line[10:20].strip() for line in out.splitlines()[2:]] == [
        *("start", "system", "user", "call", "result", "call", "call"),
        *("resumed", "result", "result", "restart", "", "worker"),
    ]


def test_a_round_that_could_not_be_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save(tmp_path, current_round=1)
    with Trace(trace_path(tmp_path, "s1", 1)) as trace:
        trace.event("round_start", round=1, run=2, branch="hero/s1")
        trace.event("resume_failed", reason="line 7 of round-1.jsonl is torn or not JSON")

    _, out, _ = logs(tmp_path, capsys, "s1")

    failed = out.splitlines().index(line_of(out, " resume "))
    assert [line[10:].rstrip() for line in out.splitlines()[failed : failed + 2]] == [
        "resume    the trace could not be replayed (line 7 of round-1.jsonl is torn or not JSON):",
        "          the round starts over",
    ]


def test_a_condensation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, current_round=1)
    summary = "\n".join(
        [
            "[summary by hero of turns 1-50, written to fit the context window]",
            "",
            "Files changed: calc.py, test_calc.py.",
            "Commands run: pytest -q (2 failed, then all passed).",
            "Open to-dos: docs for sub().",
            "Tried: a rewrite of add(), reverted.",
            "Known: the lint tier wants ruff format.",
        ]
    )
    with Trace(trace_path(tmp_path, "s1", 1)) as trace:
        trace.event("round_start", round=1, run=1)
        trace.event(
            "condense",
            turn=57,
            tokens_before=21300,
            tokens_after=9800,
            elided=[{"id": f"c{i}", "note": "[elided by hero ...]"} for i in range(12)],
            summary={
                "first": 1, "last": 50, "content": summary, "tokens_in": 9000,
                "tokens_out": 400, "at": 2, "count": 150,
            },
            cut=[],
        )  # fmt: skip
        trace.event(
            "condense", turn=90, tokens_before=30000, tokens_after=12000, summary=None,
            elided=[{"id": "c99", "note": "x"}], cut=[{"id": "c100", "content": "y"}],
        )  # fmt: skip
        trace.event(
            "condense", turn=190, tokens_before=121300, tokens_after=19800, cut=[{}, {}],
            elided=[{}] * 120, summary={"first": 51, "last": 180, "content": "Short."},
        )  # fmt: skip
        trace.event(
            "agent_end", stop_reason="done", turns=195, tool_calls=220, condensations=3, parts=1
        )

    _, out, _ = logs(tmp_path, capsys, "s1")

    lines = out.splitlines()
    first = lines.index(line_of(out, "condensed at turn 57"))
    assert [line[10:].rstrip() for line in lines[first : first + 5]] == [
        "condensed at turn 57: 12 results elided, turns 1-50 summarized; ~21,300 -> ~9,800 tokens",
        "          Files changed: calc.py, test_calc.py.",
        "          Commands run: pytest -q (2 failed, then all passed).",
        "          Open to-dos: docs for sub().",
        "          [... 2 more lines, 77 chars]",  # the summary's head line is not repeated
    ]
    assert line_of(out, "at turn 90").endswith(
        "condensed at turn 90: 1 result elided, 1 result cut; ~30,000 -> ~12,000 tokens"
    )
    last = lines.index(line_of(out, "at turn 190"))
    assert [line[10:].rstrip() for line in lines[last : last + 3]] == [
        "condensed at turn 190: 120 results elided, turns 51-180 summarized, 2 results cut",
        "          ~121,300 -> ~19,800 tokens",  # on its own line, not cut
        "          Short.",
    ]
    assert line_of(out, " worker ").endswith(
        "worker    done: 195 turns, 220 tool calls, 3 condensations"
    )
    assert max(len(line) for line in lines) <= WIDTH


def test_reasoning_a_cut_reply_and_cached_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save(tmp_path, current_round=1)
    thoughts = "\n".join(f"thought {i}" for i in range(1, 8))
    with Trace(trace_path(tmp_path, "s1", 1)) as trace:
        trace.event("round_start", round=1, run=1)
        trace.event(
            "assistant", turn=1, content="Here is the start of", tool_calls=[],
            tokens_in=5000, tokens_cached=4096, reasoning=thoughts, finish_reason="length",
        )  # fmt: skip
        trace.event(
            "assistant", turn=2, content="", tool_calls=[], finish_reason="length"
        )  # nothing but the cut
        trace.event("assistant", turn=3, content="Done.", tool_calls=[], finish_reason="stop")

    _, out, _ = logs(tmp_path, capsys, "s1")

    lines = out.splitlines()
    turn1 = lines.index(line_of(out, "reasoning"))
    assert [line[10:].rstrip() for line in lines[turn1 : turn1 + 7]] == [
        "reasoning thought 1",
        "          thought 2",
        "          thought 3",
        "          [... 4 more lines, 40 chars]",
        "assistant Here is the start of",
        "          (reply cut off by the model's output limit: finish_reason length)",
        "          (4,096 of 5,000 input tokens read from the prompt cache)",
    ]
    assert lines[turn1 + 7].endswith(
        "assistant (reply cut off by the model's output limit: finish_reason length)"
    )
    assert lines[turn1 + 8].endswith("assistant Done.")
    assert out.count("cut off") == 2 and out.count("prompt cache") == 1


# --------------------------------------------------------------------------- selection


def test_rounds_and_round_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, status="gave_up", current_round=2)
    write_round(tmp_path, 1)
    write_round(tmp_path, 2)
    (tmp_path / "runs" / "s1" / "verify-r1.log").write_text("log, not a trace")

    _, out, _ = logs(tmp_path, capsys, "s1")
    assert [x for x in out.splitlines() if x.startswith("===")] == [
        "=== round 1 === runs/s1/round-1.jsonl",
        "=== round 2 === runs/s1/round-2.jsonl",
    ]
    assert "\n\n=== round 2" in out  # a blank line between rounds

    code, out, _ = logs(tmp_path, capsys, "s1", "--round", "2")
    assert code == 0
    assert [x for x in out.splitlines() if x.startswith("===")] == [
        "=== round 2 === runs/s1/round-2.jsonl"
    ]
    assert "round 2 run 1" in out and "round 1 run 1" not in out

    code, out, err = logs(tmp_path, capsys, "s1", "--round", "5")
    assert code == 2 and out == ""
    assert err == "hero: story 's1' has no round 5 (rounds: 1, 2)\n"

    code, out, err = logs(tmp_path, capsys, "s1", "--round", "0")
    assert code == 2 and out == ""
    assert "expected a round number >= 1" in err


def test_unknown_id_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path)
    for story_id in ("nope", "../s1", "s1/../s1"):
        code, out, err = logs(tmp_path, capsys, story_id)
        assert code == 2 and out == ""
        assert f"no story '{story_id}'" in err
    code, _, err = logs(tmp_path, capsys, "nope", "-f")
    assert code == 2 and "no story 'nope'" in err


def test_story_without_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save(tmp_path, status="error", error="git error: no such ref")

    code, out, _ = logs(tmp_path, capsys, "s1")

    assert code == 0
    assert out.splitlines() == [
        'story s1 "Story s1": error; branch hero/s1',
        "error: git error: no such ref",
        "(no rounds yet)",
    ]


# --------------------------------------------------------------------------- follow


class Sink:
    """A text stream another thread can read while follow() writes to it."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        with self._lock:
            return "".join(self._parts)


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def start_follow(home: Path, sink: Sink, **kwargs: object) -> tuple[threading.Thread, list]:
    result: list = []
    thread = threading.Thread(
        target=lambda: result.append(follow(home, "s1", sink, poll_s=0.01, **kwargs)),  # type: ignore[arg-type]
        daemon=True,
    )
    thread.start()
    return thread, result


def test_follow_picks_up_new_lines_and_rounds_until_terminal(tmp_path: Path) -> None:
    save(tmp_path, current_round=1)
    sink = Sink()
    with Trace(trace_path(tmp_path, "s1", 1)) as trace:
        trace.event("round_start", round=1, run=1)
        thread, result = start_follow(tmp_path, sink)
        wait_until(lambda: "round 1 run 1" in sink.text(), "the existing event")

        trace.event("tool_result", name="bash", content="appended after the start")
        wait_until(lambda: "appended after the start" in sink.text(), "an appended line")

        # a line written in two pieces is shown once it is whole, not before
        path = trace_path(tmp_path, "s1", 1)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write('{"t": 2.0, "event": "agent_end", "stop_reason": "done", ')
            fh.flush()
            time.sleep(0.1)
            assert "unreadable" not in sink.text() and "torn" not in sink.text()
            fh.write('"turns": 7, "tool_calls": 3}\n')
        wait_until(lambda: "done: 7 turns, 3 tool calls" in sink.text(), "the completed line")

    with Trace(trace_path(tmp_path, "s1", 2)) as trace:
        trace.event("round_start", round=2, run=1)
        wait_until(lambda: "=== round 2 ===" in sink.text(), "the new round file")
        assert thread.is_alive()  # the story is still running
        trace.event("verdict", verdict="APPROVED", summary="all good")
    save(tmp_path, status="passed", current_round=2)

    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert result == ["passed"]
    out = sink.text()
    assert "verdict   APPROVED: all good" in out
    assert out.endswith("--- s1: passed\n")
    assert out.count("appended after the start") == 1
    assert out.index("=== round 1 ===") < out.index("done: 7 turns") < out.index("=== round 2")


def test_follow_a_finished_story_prints_all_and_returns(tmp_path: Path) -> None:
    save(tmp_path, status="gave_up", current_round=1)
    write_round(tmp_path)
    sink = Sink()

    assert follow(tmp_path, "s1", sink, poll_s=0.01) == "gave_up"

    assert "mystery" in sink.text()
    assert sink.text().endswith("--- s1: gave_up\n")


def test_follow_one_round_ends_when_the_next_begins(tmp_path: Path) -> None:
    save(tmp_path, current_round=1)
    write_round(tmp_path, 1)
    sink = Sink()
    thread, result = start_follow(tmp_path, sink, round_no=1)
    wait_until(lambda: "mystery" in sink.text(), "round 1")
    assert thread.is_alive()

    write_round(tmp_path, 2)

    thread.join(WAIT_S)
    assert result == ["running"]
    assert "=== round 2" not in sink.text()


def test_follow_stops_on_request_and_notes_an_interrupted_story(tmp_path: Path) -> None:
    save(tmp_path, status="interrupted", current_round=1)
    write_round(tmp_path)
    sink = Sink()
    stop = threading.Event()
    thread, result = start_follow(tmp_path, sink, stop=stop)
    wait_until(lambda: "waiting for a run to resume it" in sink.text(), "the note")

    stop.set()

    thread.join(WAIT_S)
    assert result == [None]
    assert "--- s1:" not in sink.text()


def test_follow_shows_nothing_for_a_tool_start(tmp_path: Path) -> None:
    save(tmp_path, current_round=1)
    sink = Sink()
    with Trace(trace_path(tmp_path, "s1", 1)) as trace:
        trace.event("tool_start", turn=1, id="c1", name="bash")  # the round's first line
        thread, result = start_follow(tmp_path, sink)
        wait_until(lambda: "=== round 1 ===" in sink.text(), "the round's header")
        trace.event("tool_result", turn=1, id="c1", name="bash", content="live output")
        wait_until(lambda: "live output" in sink.text(), "the result")
    save(tmp_path, status="passed", current_round=1)

    thread.join(WAIT_S)
    assert result == ["passed"]
    assert sink.text().splitlines()[1:] == [
        "=== round 1 === runs/s1/round-1.jsonl",
        line_of(sink.text(), "live output"),
        "--- s1: passed",
    ]


# --------------------------------------------------------------------------- a real process


def spawn_follow(home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "hero", "logs", "s1", "-f", "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
def test_follow_in_a_real_process(tmp_path: Path) -> None:
    save(tmp_path, current_round=1)
    with Trace(trace_path(tmp_path, "s1", 1)) as trace:
        trace.event("round_start", round=1, run=1)
        proc = spawn_follow(tmp_path)
        try:
            lines, seen = read_lines(proc), []
            wait_for_line(lines, "round 1 run 1", seen)
            trace.event("assistant", content="live text", tool_calls=[])
            wait_for_line(lines, "live text", seen)
            trace.event("verdict", verdict="CHANGES_REQUESTED", summary="more please")
        except BaseException:
            proc.kill()
            raise
    try:
        with Trace(trace_path(tmp_path, "s1", 2)) as trace:
            trace.event("round_start", round=2, run=1)
            wait_for_line(lines, "=== round 2 ===", seen)
            trace.event("verdict", verdict="APPROVED", summary="done now")
        save(tmp_path, status="passed", current_round=2)
        assert proc.wait(WAIT_S) == 0
    finally:
        proc.kill()
    assert proc.stderr is not None
    assert proc.stderr.read() == ""
    while not lines.empty():
        seen.append(lines.get())
    out = "".join(seen)
    assert "CHANGES_REQUESTED: more please" in out
    assert "APPROVED: done now" in out
    assert out.endswith("--- s1: passed\n")


def test_ctrl_c_ends_a_follow_quietly_with_130(tmp_path: Path) -> None:
    save(tmp_path, current_round=1)
    write_round(tmp_path)
    proc = spawn_follow(tmp_path)
    try:
        lines, seen = read_lines(proc), []
        wait_for_line(lines, "mystery", seen)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT_S) == 130
    finally:
        proc.kill()
    assert proc.stderr is not None
    assert proc.stderr.read() == ""


def test_a_reader_that_leaves_early_is_no_error(tmp_path: Path) -> None:
    save(tmp_path, status="passed")
    with Trace(trace_path(tmp_path, "s1", 1)) as trace:
        for i in range(3000):  # far more than a pipe buffer holds
            trace.event("tool_result", name="bash", content=f"line {i}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hero", "logs", "s1", "--home", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"story s1")
        proc.stdout.close()  # like `hero logs s1 | head -1`
        assert proc.wait(WAIT_S) == 0
    finally:
        proc.kill()
    assert proc.stderr is not None and proc.stderr.read() == b""
