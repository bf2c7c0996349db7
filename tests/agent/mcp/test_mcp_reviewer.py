"""MCP servers as the reviewer's tools, end to end: `hero run` in-process against the scripted
model over real HTTP, a real git repository, and the test MCP server (written with the SDK's
server side) as a real subprocess, started for the review only when the reviewer's tools
name it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import COMMIT, SUB_IMPL, VERIFY_SUB, is_review, step_of, verdict, wait_dead
from mcp_support import add_servers, stdio, with_server

from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.trace import read_trace

HERO_SEVEN = "[bash, read_file, write_file, edit_file, grep, find, ls]"


def set_tools(home: Path, role: str, tools: str) -> None:
    """``tools`` (a YAML list) as ``role``'s in the home's config/roles.yaml."""
    roles = home / "config" / "roles.yaml"
    block = f"{role}:\n  provider: scripted\n"
    text_ = roles.read_text()
    assert block in text_
    roles.write_text(text_.replace(block, f"{block}  tools: {tools}\n"))


def script(review: list[Reply], starts: Path, seen: list[list[str]]) -> Callable[..., Reply]:
    """The worker adds calc.sub; the reviewer answers ``review`` step by step (noting the
    server's starts so far at each of its requests in ``seen``)."""
    worker = [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command=COMMIT.format(msg="add-sub")),
        text("Added calc.sub."),
    ]

    def answer(body: dict[str, Any]) -> Reply:
        if is_review(body):
            seen.append(starts.read_text().split() if starts.exists() else [])
            return review[min(step_of(body), len(review) - 1)]
        return worker[min(step_of(body), len(worker) - 1)]

    return answer


@pytest.mark.slow
def test_a_reviewer_given_a_servers_tool_calls_it_and_the_server_runs_for_the_review_only(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    starts = tmp_path / "server starts.txt"
    with_server(target_repo)
    seen: list[list[str]] = []
    model = scripted(script([call("t__echo", text="looked"), verdict()], starts, seen))
    home = make_home(model, sandbox="none")  # the start log lies outside the sandbox
    set_tools(home, "worker", HERO_SEVEN)  # the worker names no server: starts none
    set_tools(home, "reviewer", "[read_file, t.echo]")
    add_servers(home, {"t": stdio(env={"MCP_STARTS": str(starts)})})
    story = write_story(home, "s1", verify=VERIFY_SUB)

    code = main(["run", str(story), "--home", str(home)])

    assert code == 0
    reviews = [r.body for r in model.requests if is_review(r.body)]
    assert len(reviews) == 2
    # its toolset: the read-only tool and the one server tool named, no other of the server's
    names = [t["function"]["name"] for t in reviews[0]["tools"]]
    assert names == ["read_file", "t__echo"]
    results = [m for m in reviews[1]["messages"] if m.get("role") == "tool"]
    assert [m["content"] for m in results] == ["echo: looked"]
    # the server started once, for the review (running at its first request), and is gone
    (pid,) = starts.read_text().split()
    assert seen[0] == [pid]
    assert wait_dead(int(pid))
    # the trace: the reviewer's servers, its call and the result
    trace = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    (servers,) = [e for e in trace if e["event"] == "mcp"]
    assert servers["by"] == "reviewer" and servers["servers"][0]["name"] == "t"
    assert "t__echo" in [t["function"]["name"] for t in servers["tools"]]
    started = [e for e in trace if e["event"] == "tool_start" and e.get("by") == "reviewer"]
    assert [e["name"] for e in started] == ["t__echo"]
    (ended,) = [e for e in trace if e["event"] == "tool_result" and e["name"] == "t__echo"]
    assert ended["content"] == "echo: looked" and ended["is_error"] is False
    assert ended["by"] == "reviewer"
    # hero logs says whose servers they were
    assert main(["logs", "s1", "--home", str(home)]) == 0
    shown = capsys.readouterr().out
    assert "for the reviewer: t: " in shown


@pytest.mark.slow
def test_a_reviewer_with_the_default_tools_starts_no_server(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
) -> None:
    starts = tmp_path / "server starts.txt"
    with_server(target_repo)
    seen: list[list[str]] = []
    model = scripted(script([call("read_file", path="calc/__init__.py"), verdict()], starts, seen))
    home = make_home(model, sandbox="none")
    add_servers(home, {"t": stdio(env={"MCP_STARTS": str(starts)})})
    story = write_story(home, "s1", verify=VERIFY_SUB)

    code = main(["run", str(story), "--home", str(home)])

    assert code == 0
    reviews = [r.body for r in model.requests if is_review(r.body)]
    assert len(reviews) == 2
    names = {t["function"]["name"] for t in reviews[0]["tools"]}
    assert names == {"read_file", "ls", "grep", "find", "git_log", "git_show"}
    # the worker's default started the server once, for its turn; the review started none
    (pid,) = starts.read_text().split()
    assert wait_dead(int(pid))
    trace = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    assert [e.get("by") for e in trace if e["event"] == "mcp"] == [None]


@pytest.mark.slow
def test_a_reviewers_server_that_does_not_start_leaves_the_review_its_other_tools(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
) -> None:
    seen: list[list[str]] = []
    review = [call("read_file", path="calc/__init__.py"), verdict()]
    model = scripted(script(review, tmp_path / "none.txt", seen))
    home = make_home(model, sandbox="none")
    set_tools(home, "worker", HERO_SEVEN)
    set_tools(home, "reviewer", "[read_file, t.*]")
    add_servers(home, {"t": stdio(command=["/no such/server"], start_timeout_s=5)})
    story = write_story(home, "s1", verify=VERIFY_SUB)

    code = main(["run", str(story), "--home", str(home)])

    assert code == 0
    reviews = [r.body for r in model.requests if is_review(r.body)]
    assert [t["function"]["name"] for t in reviews[0]["tools"]] == ["read_file"]
    trace = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    (servers,) = [e for e in trace if e["event"] == "mcp"]
    assert servers["by"] == "reviewer" and servers["servers"][0]["problem"]
