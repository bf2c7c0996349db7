"""`hero export`: real stories run against hero's scripted model, exported, loaded back and
sent, line by line, to a chat endpoint that refuses any invalid request.

Everything is real: `hero run` (in-process, or a child process killed with SIGKILL), git
repositories, the `openai` client over loopback HTTP to hero's scripted server, whose
``validating`` handler answers 400 to a request a strict endpoint would refuse.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest
from export_support import (
    CHECK_SUB,
    PY,
    SECRET,
    Start,
    run,
    two_story_home,
)
from helpers import Hero, alive, is_review, long_command, step_of, verdict, wait_dead

from hero.agent.replay import LOST_RUNNING
from hero.agent.tools import TOOL_NAMES
from hero.agent.window import ELIDED
from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, call, chat_problem, text, validating

COMMIT = "echo x > x.txt && git add -A && git commit -q -m x"


def export(home: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["export", "--home", str(home), *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def send_all(lines: list[dict[str, Any]]) -> None:
    """Each line's messages and tools as a real chat request to a strict endpoint."""
    with ScriptedModel(validating(text("ok"))) as endpoint:
        client = openai.OpenAI(base_url=endpoint.base_url, api_key="x", max_retries=0)
        for line in lines:
            answer = client.chat.completions.create(
                model="m", messages=line["messages"], tools=line["tools"]
            )
            assert answer.choices[0].message.content == "ok"
        assert len(endpoint.requests) == len(lines)


@pytest.fixture
def ran(scripted: Start, make_home, write_story) -> Path:
    return two_story_home(scripted, make_home, write_story)


# --------------------------------------------------------------------------- the format


@pytest.mark.slow
def test_every_round_exports_as_a_valid_chat_request(
    ran: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export.jsonl"
    assert main(["export", "--home", str(ran), "-o", str(out)]) == 0
    assert "3 round(s) of 2 story(ies) written" in capsys.readouterr().err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["metadata"]["story"], x["metadata"]["round"]) for x in lines] == [
        ("s1", 1),
        ("s1", 2),
        ("s2", 1),
    ]
    for line in lines:
        assert set(line) == {"messages", "tools", "metadata"}
        assert chat_problem(line) is None
        assert {t["function"]["name"] for t in line["tools"]} == set(TOOL_NAMES)
        roles = [m["role"] for m in line["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
        calls = [m for m in line["messages"] if m.get("tool_calls")]
        answers = [m["tool_call_id"] for m in line["messages"] if m["role"] == "tool"]
        assert [c["tool_calls"][0]["id"] for c in calls] == answers
    send_all(lines)

    first, second, other = (x["metadata"] for x in lines)
    assert first["verify"] == {"passed": False, "checks": 1, "failed": [CHECK_SUB]}
    assert first["verdict"] != "APPROVED" and first["status"] == "passed"
    assert second["verify"] == {"passed": True, "checks": 1, "failed": []}
    assert second["verdict"] == "APPROVED" and second["verdict_summary"].startswith("Fine |")
    assert other["status"] == "gave_up" and other["verify"]["passed"] is False
    for meta in (first, second, other):
        assert meta["turns"] == 3 and meta["tool_calls"] == 2
        assert meta["complete"] is True and meta["stop_reason"] == "done"
        assert meta["model"] == "scripted-test" and meta["history"] == "full"
        assert meta["models"]["worker"]["model"] == "scripted-test"  # from the run record
        assert meta["condensed"] is None and meta["closed_calls"] == []
        assert meta["usage"]["llm_calls"] == 3 and meta["usage"]["tokens_in"] > 0
        assert meta["unreadable_lines"] == 0
    # the round-2 task carries round 1's feedback, as the model saw it
    assert "## Feedback on round 1" in lines[1]["messages"][1]["content"]


@pytest.mark.slow
def test_status_filter_and_ids(ran: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def stories(*args: str) -> list[str]:
        return [x["metadata"]["story"] for x in export(ran, capsys, *args)]

    assert stories("--status", "passed") == ["s1", "s1"]
    assert stories("--status", "gave_up") == ["s2"]
    assert stories("--status", "passed", "--status", "gave_up") == ["s1", "s1", "s2"]
    assert stories("--status", "error") == []
    assert main(["export", "--home", str(ran), "--status", "error"]) == 0
    assert capsys.readouterr() == ("", "hero: no round to export\n")
    assert stories("s2") == ["s2"]
    assert stories("s2", "s1") == ["s2", "s1", "s1"]
    assert stories("s1", "--status", "gave_up") == []

    assert main(["export", "--home", str(ran), "nope"]) == 2
    assert "no story 'nope'" in capsys.readouterr().err
    assert main(["export", "--home", str(ran), "../etc"]) == 2
    assert "expected a story id" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # argparse: an unknown status
        main(["export", "--home", str(ran), "--status", "won"])
    assert exit_info.value.code == 2


@pytest.mark.slow
def test_a_key_added_to_the_config_later_is_not_exported(
    ran: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = (ran / "runs" / "s1" / "round-1.jsonl").read_text()
    assert SECRET in trace  # not a secret hero knew when it wrote the trace
    provider = ran / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + "api_key_env: EXPORT_TEST_KEY\n")
    monkeypatch.setenv("EXPORT_TEST_KEY", SECRET)
    lines = export(ran, capsys)
    dumped = json.dumps(lines)
    assert len(lines) == 3 and SECRET not in dumped
    assert "key was [redacted]" in lines[0]["messages"][-1]["content"]
    send_all(lines)


# --------------------------------------------------------------------------- condensed


@pytest.mark.slow
def test_a_condensed_round_is_marked(
    scripted: Start, make_home, write_story, capsys: pytest.CaptureFixture[str]
) -> None:
    """A small window: the worker's big outputs are elided, and the export says where."""
    plan = [call("bash", command=f"{PY} -c \"print('output {k} ' * 2000)\"") for k in range(8)]
    plan += [call("bash", command=COMMIT), text("Done.")]

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "Fine.")
        if "tools" not in body:  # a summary request
            return text("SUMMARY: printed a lot.")
        return plan[min(step_of(body), len(plan) - 1)]

    model = scripted(handler)
    home = make_home(model, sandbox="none", output_reserve_default=1024, context_keep_turns=2)
    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + "context_window: 24000\n")
    assert run(home, write_story(home, "s1", verify=["true"], max_retries=1)) == 0

    full = export(home, capsys)
    seen = export(home, capsys, "--history", "seen")
    assert len(full) == len(seen) == 1
    f, s = full[0], seen[0]
    assert f["metadata"]["condensed"]["times"] >= 1
    assert f["metadata"]["condensed"]["elided"] == []  # the full history: nothing elided
    assert not any(str(m["content"]).startswith(ELIDED) for m in f["messages"])
    marked = s["metadata"]["condensed"]
    assert (
        s["metadata"]["history"] == "seen"
        and marked["times"] == f["metadata"]["condensed"]["times"]
    )
    assert marked["elided"] or marked["summaries"]
    for i in marked["elided"]:
        assert s["messages"][i]["role"] == "tool"
        assert s["messages"][i]["content"].startswith(ELIDED)
    for i in marked["summaries"]:
        assert s["messages"][i]["content"].startswith("[summary by hero")
    unmarked = [
        i
        for i, m in enumerate(s["messages"])
        if str(m["content"]).startswith(ELIDED) and i not in marked["elided"]
    ]
    assert unmarked == []
    send_all([f, s])


# --------------------------------------------------------------------------- cut short


@pytest.mark.slow
def test_a_round_killed_mid_call_exports_its_call_closed_then_resumed_whole(
    scripted: Start,
    make_home,
    write_story,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = [
        call("bash", command="echo one"),
        call("bash", command=long_command("child.pid")),
        call("bash", command=COMMIT),
        text("Done."),
    ]

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "Fine.")
        return plan[min(step_of(body), len(plan) - 1)]

    model = scripted(handler)
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["true"])
    trace = home / "runs" / "s1" / "round-1.jsonl"
    hero = Hero(home, story, tmp_path, "killed")
    child = 0
    try:
        child = hero.wait_for_file(home / "worktrees" / "s1" / "child.pid")
        hero.proc.send_signal(signal.SIGKILL)
        hero.proc.wait(timeout=60)
    finally:
        if hero.proc.poll() is None:
            hero.proc.kill()
            hero.proc.wait()
        if child and alive(child):
            os.kill(child, signal.SIGKILL)
            wait_dead(child)
    # a torn last line too, as a crash mid-write leaves it
    whole = trace.read_text()
    trace.write_text(whole + '{"t": 1.0, "event": "tool_res')

    (line,) = export(home, capsys)
    meta = line["metadata"]
    assert meta["status"] == "running" and meta["verify"] is None and meta["verdict"] is None
    assert meta["complete"] is False and meta["unreadable_lines"] == 1
    (closed,) = meta["closed_calls"]
    assert closed["name"] == "bash" and closed["was_running"] is True
    last = line["messages"][-1]
    assert last == {"role": "tool", "tool_call_id": closed["id"], "content": LOST_RUNNING}
    assert [m["role"] for m in line["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    send_all([line])
    capsys.readouterr()
    assert main(["report", "--home", str(home), "s1"]) == 0
    shown = capsys.readouterr().out
    assert "No round has finished yet." in shown
    assert "Round 1 has no record yet: it is in progress, or was cut short (running)" in shown

    # run again: the round goes on where it stopped, and exports as one conversation
    trace.write_text(whole)  # (a torn line would make the resume start the round over)
    assert run(home, story) == 0
    (line,) = export(home, capsys)
    meta = line["metadata"]
    assert meta["status"] == "passed" and meta["verify"]["passed"] is True
    assert meta["complete"] is True and meta["parts"] == 2 and meta["closed_calls"] == []
    roles = [m["role"] for m in line["messages"]]
    turns = ["assistant", "tool"]
    assert roles == ["system", "user", *turns, *turns, "user", *turns, "assistant"]
    assert line["messages"][5]["content"] == LOST_RUNNING  # as hero told the model
    assert line["messages"][6]["content"].startswith("hero was restarted")
    send_all([line])


# --------------------------------------------------------------------------- hostile traces


@pytest.mark.slow
def test_odd_traces_are_left_out_with_a_note(ran: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = ran / "runs"
    # s1: round 1 is not JSON at all, round 2 answers a call nobody made
    (runs / "s1" / "round-1.jsonl").write_text("not json\n\x00\x01\n")
    events = (runs / "s1" / "round-2.jsonl").read_text().splitlines()
    forged = {"event": "tool_result", "id": "forged", "name": "bash", "content": "x"}
    (runs / "s1" / "round-2.jsonl").write_text("\n".join([*events[:3], json.dumps(forged)]) + "\n")
    # s2: its run directory swapped for a link to s1's elsewhere
    outside = ran.parent / "elsewhere"
    (runs / "s2").rename(outside)
    (runs / "s2").symlink_to(outside)
    capsys.readouterr()
    assert main(["export", "--home", str(ran)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "s1 round 1 left out: its trace holds no conversation" in err
    assert "s1 round 2 left out: " in err and "forged" in err
    assert "s2 left out: its run directory is a symlink" in err

    # an unreadable run record: left out of an export of all, an error when named
    (runs / "state" / "s3.json").write_text("{not json")
    assert main(["export", "--home", str(ran)]) == 0
    assert "s3 left out: " in capsys.readouterr().err
    assert main(["export", "--home", str(ran), "s3"]) == 2
    assert "unreadable state" in capsys.readouterr().err

    # a trace that is a FIFO is not read (nor waited on)
    fifo = runs / "s1" / "round-3.jsonl"
    os.mkfifo(fifo)
    (runs / "s1" / "round-4.jsonl").symlink_to(outside / "round-1.jsonl")
    assert main(["export", "--home", str(ran), "s1"]) == 0
    err = capsys.readouterr().err
    assert "s1 round 3 left out: " in err and "FIFO" in err
    assert "s1 round 4 left out: its trace is a symlink" in err


@pytest.mark.slow
def test_an_unloadable_config_stops_the_export(
    ran: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (ran / "config" / "roles.yaml").write_text("target_repo: [not, a, path\n")
    assert main(["export", "--home", str(ran)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "roles.yaml" in err


@pytest.mark.slow
def test_a_subprocess_export_pipes_to_head(ran: Path) -> None:
    """`hero export | head -1`: the reader leaving early ends hero quietly."""
    proc = subprocess.run(
        f"{PY} -m hero export --home {ran} | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout == '{"messages'
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_an_over_large_trace_is_not_read(
    ran: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    size = (ran / "runs" / "s2" / "round-1.jsonl").stat().st_size
    monkeypatch.setattr("hero.views.export.MAX_TRACE_BYTES", size - 1)
    capsys.readouterr()
    assert main(["export", "--home", str(ran), "s2"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "s2 round 1 left out: too large" in err


@pytest.mark.slow
def test_a_plan_story_exports_under_its_key(ran: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A story of plan p1 keeps its record and traces under plans/p1/."""
    state = json.loads((ran / "runs" / "state" / "s2.json").read_text())
    state["plan"] = "p1"
    target = ran / "runs" / "state" / "plans" / "p1" / "s2.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(state))
    (ran / "runs" / "plans" / "p1").mkdir(parents=True)
    (ran / "runs" / "s2").rename(ran / "runs" / "plans" / "p1" / "s2")
    (ran / "runs" / "state" / "s2.json").unlink()

    every = export(ran, capsys)
    assert [x["metadata"]["story"] for x in every] == ["s1", "s1", "p1/s2"]
    (line,) = export(ran, capsys, "p1/s2")
    assert line["metadata"]["plan"] == "p1" and line["metadata"]["id"] == "s2"
    assert main(["export", "--home", str(ran), "s2"]) == 2  # no loose s2 any more
    assert "no story 's2'" in capsys.readouterr().err


# --------------------------------------------------------------------------- the validator


def _turn(*ids: str) -> list[dict[str, Any]]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "ls", "arguments": "{}"}} for i in ids
    ]
    return [{"role": "assistant", "content": "", "tool_calls": calls}] + [
        {"role": "tool", "tool_call_id": i, "content": "x"} for i in ids
    ]


HEAD = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([], "non-empty list"),
        ([{"role": "wizard", "content": "x"}], "unknown role"),
        ([{"role": "user", "content": "x", "weight": 1}], "unknown keys"),
        ([{"role": "user", "content": None}], "text content"),
        ([*HEAD, {"role": "tool", "tool_call_id": "a", "content": "x"}], "no pending call"),
        ([*HEAD, *_turn("a")[:1]], "without a result at the end"),
        ([*HEAD, *_turn("a")[:1], {"role": "user", "content": "u"}], "without a result"),
        ([*HEAD, *_turn("a", "a")], "twice"),
        ([*HEAD, *_turn("a"), {"role": "tool", "tool_call_id": "a", "content": "x"}], "no pending"),
        ([*HEAD, {"role": "assistant", "content": None}], "neither content nor tool calls"),
        (
            [*HEAD, {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}]}],
            "exactly id, type and function",
        ),
    ],
)
def test_the_chat_validator_refuses(messages: list[dict[str, Any]], problem: str) -> None:
    found = chat_problem({"messages": messages})
    assert found is not None and problem in found


def test_the_chat_validator_accepts() -> None:
    body = {
        "messages": [*HEAD, *_turn("a", "b"), *_turn("a"), {"role": "assistant", "content": "ok"}]
    }
    assert chat_problem(body) is None
    assert (
        chat_problem({**body, "tools": [{"type": "function", "function": {"name": "ls"}}]}) is None
    )
    assert "tools[0]" in str(chat_problem({**body, "tools": [{"type": "function"}]}))
