"""MCP servers as the worker's tools, end to end: `hero run` in-process against the scripted
model over real HTTP, a real git repository, and a test MCP server written with the SDK's
server side run as a real subprocess (inside bubblewrap where it works)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import (
    COMMIT,
    SUB_IMPL,
    VERIFY_SUB,
    is_review,
    step_of,
    verdict,
    wait_dead,
    worker_round,
)
from mcp_support import add_servers, http_server, stdio, with_server

from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.run.events import schema
from hero.sandbox.bwrap import bwrap_problem
from hero.trace import read_trace

VALIDATOR = jsonschema.Draft202012Validator(schema())
SECRET = "mcp-secret-4Fq9Zr2Lx7Wm1Kp8Tn3Bv"  # not a real token


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on this machine's loopback that accepts connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def bwrap_works() -> bool:
    """Whether the sandbox works here (the sandbox's own assertions are skipped without)."""
    path = shutil.which("bwrap")
    return path is not None and bwrap_problem(path) is None


def script(worker: list[Reply]) -> Callable[[dict[str, Any]], Reply]:
    plan = [
        *worker,
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command=COMMIT.format(msg="add-sub")),
        text("Added calc.sub."),
    ]

    def answer(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict()
        assert worker_round(body) == 1
        return plan[min(step_of(body), len(plan) - 1)]

    return answer


def tool_messages(model: ScriptedModel) -> list[str]:
    """The tool results of the worker's last request, in order."""
    last = [r for r in model.requests if not is_review(r.body)][-1]
    return [str(m["content"]) for m in last.body["messages"] if m.get("role") == "tool"]


@pytest.mark.slow
def test_the_worker_calls_a_servers_tool_in_the_sandbox_and_the_result_reaches_the_model(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    listening: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user_home = tmp_path / "user home"
    user_home.mkdir()
    (user_home / "notes.txt").write_text("a note of the user's\n")
    monkeypatch.setenv("HOME", str(user_home))
    with_server(target_repo)
    worker = [
        call("t__echo", text="hi"),
        call("t__read_path", path=str(user_home / "notes.txt")),
        call("t__connect", port=listening),
        call("t__getenv", name="TEST_TOKEN"),
        call("t__echo", text=[1, 2]),  # the server refuses it: a tool error
    ]
    model = scripted(script(worker))
    sandboxed = bwrap_works()
    home = make_home(model, sandbox="bwrap" if sandboxed else "none")
    add_servers(home, {"t": stdio()}, {"t": {"env": {"TEST_TOKEN": SECRET}}})
    story = write_story(home, "s1", verify=VERIFY_SUB)

    code = main(["run", str(story), "--home", str(home), "--events"])

    assert code == 0
    requests = [r.body for r in model.requests if not is_review(r.body)]
    names = [t["function"]["name"] for t in requests[0]["tools"]]
    assert {"bash", "t__echo", "t__read_path", "t__hang"} <= set(names)
    results = tool_messages(model)
    assert results[0] == "echo: hi"
    if sandboxed:  # the home is not there, the loopback is the sandbox's own
        assert results[1] == "cannot read: FileNotFoundError"
        assert results[2].startswith("cannot connect")
    assert results[3] == "TEST_TOKEN=[redacted]"  # the secret reaches the server, never the model
    assert "error" in results[4].lower()
    # the trace: the servers and their tools, each call and its result
    trace = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    (servers,) = [e for e in trace if e["event"] == "mcp"]
    assert servers["servers"][0]["name"] == "t" and "t__echo" in servers["servers"][0]["tools"]
    starts = [e["name"] for e in trace if e["event"] == "tool_start"]
    assert starts[:5] == ["t__echo", "t__read_path", "t__connect", "t__getenv", "t__echo"]
    ended = [e for e in trace if e["event"] == "tool_result" and e["name"] == "t__echo"]
    assert ended[0]["content"] == "echo: hi" and ended[0]["is_error"] is False
    # the events, each valid against the stream's schema
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for event in events:
        assert not list(VALIDATOR.iter_errors(event)), event
    (listed,) = [e for e in events if e["type"] == "mcp"]
    assert listed["servers"][0]["tools"] == servers["servers"][0]["tools"]
    called = [e["name"] for e in events if e["type"] == "tool_call"]
    assert called[:2] == ["t__echo", "t__read_path"]
    # hero export: the round's line holds the server's tools it called
    out = tmp_path / "export.jsonl"
    assert main(["export", "--home", str(home), "-o", str(out)]) == 0
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    exported = [t["function"]["name"] for t in line["tools"]]
    assert "t__echo" in exported and "bash" in exported
    for where in (home / "runs", home / "runs" / "state"):
        for path in where.glob("*"):
            if path.is_file():
                assert SECRET not in path.read_text(errors="replace"), path
    assert SECRET not in json.dumps([r.body for r in model.requests])


@pytest.mark.slow
def test_a_hang_an_exit_and_a_huge_answer_are_tool_errors_and_the_round_goes_on(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with_server(target_repo)
    worker = [
        call("hangs__hang"),
        call("dies__die"),
        call("huge__big", megabytes=10),
        call("hangs__echo", text="again"),  # stopped after its hang
        call("fine__echo", text="still here"),
    ]
    model = scripted(script(worker))
    home = make_home(model, sandbox="auto")
    add_servers(
        home,
        {
            "hangs": stdio(call_timeout_s=2),
            "dies": stdio(),
            "huge": stdio(),
            "fine": stdio(),
            "broken": {"command": ["/nonexistent/mcp-server"]},
        },
    )
    story = write_story(home, "s1", verify=VERIFY_SUB)

    code = main(["run", str(story), "--home", str(home), "--events"])

    assert code == 0  # the round went on to its end, and the story passed
    hang, die, big, again, fine = tool_messages(model)[:5]
    assert "no answer in 2 s" in hang and "hangs was stopped" in hang
    assert "dies__die" in die and "was stopped" in die
    assert "larger than" in big and len(big) < 1000
    assert "is gone" in again
    assert fine == "echo: still here"
    trace = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    results = [e for e in trace if e["event"] == "tool_result"]
    assert [e["is_error"] for e in results[:5]] == [True, True, True, True, False]
    (servers,) = [e for e in trace if e["event"] == "mcp"]
    broken = [s for s in servers["servers"] if s["name"] == "broken"]
    assert broken and "problem" in broken[0]
    names = [t["function"]["name"] for t in model.requests[0].body["tools"]]
    assert not any(n.startswith("broken__") for n in names)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (listed,) = [e for e in events if e["type"] == "mcp"]
    assert [s for s in listed["servers"] if s["name"] == "broken"] == broken
    assert not list(VALIDATOR.iter_errors(listed))


def pids_with(token: str) -> list[int]:
    """The processes whose command line holds ``token``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_server_does_not_outlive_hero_killed_mid_call(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    sandbox: str,
) -> None:
    if sandbox == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap does not work here")
    with_server(target_repo)
    token = f"--hero-test-{uuid.uuid4().hex}"
    model = scripted(script([call("t__hang")]))
    home = make_home(model, sandbox=sandbox)
    add_servers(home, {"t": stdio(command=[sys.executable, "mcp_test_server.py", token])})
    story = write_story(home, "s1", verify=VERIFY_SUB)
    hero = subprocess.Popen(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        started = home / "worktrees" / "s1" / "hang.started"
        deadline = time.monotonic() + 120  # a "did not start" bound, not a speed check
        while not started.exists():  # the server is in the call
            assert hero.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        running = pids_with(token)
        assert running

        os.kill(hero.pid, signal.SIGKILL)
        hero.wait()

        if sandbox == "none":  # no bwrap to take it with hero: the next run ends it
            started.unlink()
            assert main(["run", str(story), "--home", str(home)]) == 0
        assert all(wait_dead(pid, 30) for pid in running)
        assert pids_with(token) == []
    finally:
        if hero.poll() is None:
            hero.kill()
            hero.wait()
        for pid in pids_with(token):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_an_http_servers_tool_is_called_and_its_header_secret_is_never_shown(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
) -> None:
    model = scripted(
        script([call("web__echo", text="hello"), call("web__header", name="x-test-token")])
    )
    home = make_home(model, sandbox="auto")
    story = write_story(home, "s1", verify=VERIFY_SUB)

    with http_server(tmp_path) as url:
        add_servers(home, {"web": {"url": url}}, {"web": {"headers": {"X-Test-Token": SECRET}}})
        code = main(["run", str(story), "--home", str(home)])

    assert code == 0
    echoed, header = tool_messages(model)[:2]
    assert echoed == "echo: hello"
    assert header == "x-test-token: [redacted]"  # it reached the server, not the model
    trace = (home / "runs" / "s1" / "round-1.jsonl").read_text()
    assert '"web__header"' in trace and SECRET not in trace
    assert SECRET not in json.dumps([r.body for r in model.requests])


@pytest.mark.slow
def test_a_workers_tools_setting_picks_a_servers_tools(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
) -> None:
    with_server(target_repo)
    model = scripted(script([call("t__echo", text="picked"), call("t__read_path", path="x")]))
    home = make_home(model, sandbox="auto")
    roles = home / "config" / "roles.yaml"
    roles.write_text(
        roles.read_text().replace(
            "worker:\n  provider: scripted\n",
            "worker:\n  provider: scripted\n  tools: [write_file, bash, t.echo]\n",
        )
    )
    add_servers(home, {"t": stdio()})
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert main(["run", str(story), "--home", str(home)]) == 0

    first = [r.body for r in model.requests if not is_review(r.body)][0]
    assert [t["function"]["name"] for t in first["tools"]] == ["bash", "write_file", "t__echo"]
    picked, left_out = tool_messages(model)[:2]
    assert picked == "echo: picked"
    assert "unknown tool" in left_out and "t__read_path" in left_out
