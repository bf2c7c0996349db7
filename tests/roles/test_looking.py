"""Tests for hero.roles.looking: a reviewer that reads the repository before its verdict.

A real LlmClient to the scripted model over real HTTP, a real git repository, the real
agent loop and tools."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import git

from hero.agent.tools import READ_ONLY_TOOLS, ToolContext
from hero.agent.tools.toolset import select_tools
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings
from hero.llm.client import LlmClient
from hero.llm.scripted import ScriptedModel, ToolCall, calls, text
from hero.roles.looking import NOT_RUN
from hero.roles.reviewer import APPROVED, CHANGES_REQUESTED, Looking, Verdict, review
from hero.story.format import parse_story_text
from hero.trace import Trace, read_trace

Start = Callable[..., ScriptedModel]
APPROVAL = json.dumps(
    {"verdict": "APPROVED", "summary": "helper already validates", "comments": []}
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "story repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "calc.py").write_text("def sub(a, b):\n    return a - b\n")
    (root / "helpers.py").write_text("def check(x):\n    # OUTSIDE-THE-DIFF-4242\n    return x\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "sub")
    return root


def client_for(model: ScriptedModel) -> LlmClient:
    provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
    return LlmClient(
        RoleConfig("reviewer", provider, "judge", None),
        LlmSettings(timeout_s=10, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.01),
    )


def run_review(
    model: ScriptedModel, tmp_path: Path, looking: Looking | None
) -> tuple[Verdict, list[dict[str, Any]]]:
    story = parse_story_text(
        "---\nid: s1\ntitle: Add sub\n---\n## Goal\nAdd sub.\n", tmp_path / "s1.md"
    )
    with Trace(tmp_path / "trace.jsonl") as trace:
        verdict = review(
            client_for(model),
            story,
            round_no=1,
            branch="hero/s1",
            base_sha="0123456789abcdef",
            verify_summary="- [PASS] verify",
            git_log="abc123 add sub",
            diff_stat=" calc.py | 2 ++",
            diff="+def sub(a, b):\n+    return a - b\n",
            home=None,
            trace=trace,
            looking=looking,
        )
    return verdict, read_trace(tmp_path / "trace.jsonl")


def looking_in(
    repo: Path, patterns: tuple[str, ...] = READ_ONLY_TOOLS, calls_: int = 12
) -> Looking:
    tools = select_tools(patterns, role="reviewer")
    return Looking(tools, ToolContext(root=repo, env={}), calls_)


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


def test_the_reviewer_reads_a_file_outside_the_diff_before_approving(
    scripted: Start, tmp_path: Path, repo: Path
) -> None:
    model = scripted(
        [
            calls(ToolCall("read_file", {"path": "helpers.py"}, id="r1")),
            text(APPROVAL),
        ]
    )
    verdict, events = run_review(model, tmp_path, looking_in(repo))

    assert verdict.verdict == APPROVED and not verdict.malformed
    first, second = (r.body for r in model.requests)
    assert {t["function"]["name"] for t in first["tools"]} == set(READ_ONLY_TOOLS)
    assert "## Looking outside the diff" in first["messages"][1]["content"]
    assert "at most 12 calls" in first["messages"][1]["content"]
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "r1"
    assert "OUTSIDE-THE-DIFF-4242" in tool_message["content"]
    kinds = [e["event"] for e in events]
    assert kinds == [
        "review_request",
        "review_answer",
        "tool_start",
        "tool_result",
        "review_answer",
    ]
    start, result = events[2], events[3]
    assert start["name"] == result["name"] == "read_file"
    assert start["by"] == result["by"] == "reviewer"
    assert "OUTSIDE-THE-DIFF-4242" in result["content"]
    assert events[1]["tool_calls"][0]["name"] == "read_file"


def test_a_reviewer_without_tools_sends_exactly_one_request_as_before(
    scripted: Start, tmp_path: Path, repo: Path
) -> None:
    model = scripted([text(APPROVAL)])
    no_tools = Looking(select_tools([], role="reviewer"), ToolContext(root=repo, env={}))
    verdict, events = run_review(model, tmp_path, no_tools)
    assert verdict.approved
    assert len(model.requests) == 1
    body = model.requests[0].body
    assert "tools" not in body
    assert "Looking outside the diff" not in body["messages"][1]["content"]
    assert [e["event"] for e in events] == ["review_request", "review_answer"]
    # the same request as a review given no Looking at all
    again = scripted([text(APPROVAL)])
    run_review(again, tmp_path / "again", None)
    assert again.requests[0].body["messages"] == body["messages"]


def test_a_reviewer_that_tries_to_write_gets_unknown_tool_and_changes_nothing(
    scripted: Start, tmp_path: Path, repo: Path
) -> None:
    before = snapshot(repo)
    head = git(repo, "rev-parse", "HEAD")
    model = scripted(
        [
            calls(
                ToolCall("write_file", {"path": "calc.py", "content": "broken"}, id="w1"),
                ToolCall("bash", {"command": "rm -f helpers.py; git commit -am x"}, id="b1"),
                ToolCall("edit_file", {"path": "calc.py", "old_string": "a", "new_string": "b"}),
            ),
            text(APPROVAL),
        ]
    )
    verdict, events = run_review(model, tmp_path, looking_in(repo))
    results = [e for e in events if e["event"] == "tool_result"]
    assert [r["is_error"] for r in results] == [True, True, True]
    for r in results:
        assert r["content"].startswith(f"unknown tool '{r['name']}'; available tools: read_file")
    assert verdict.approved  # its verdict stands; it could not write
    assert snapshot(repo) == before
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain") == ""


def test_used_up_tool_calls_ask_for_the_verdict_without_tools(
    scripted: Start, tmp_path: Path, repo: Path
) -> None:
    looking_calls = [
        calls(ToolCall("grep", {"pattern": f"def{n}"}, id=f"g{n}"), ToolCall("ls", {}, id=f"l{n}"))
        for n in range(2)
    ]
    model = scripted([*looking_calls, text(APPROVAL)])
    verdict, events = run_review(model, tmp_path, looking_in(repo, calls_=3))
    assert verdict.approved
    last = model.requests[-1].body
    assert "tools" not in last
    assert "You cannot call tools any more" in last["messages"][-1]["content"]
    answered = [m for m in last["messages"] if m.get("role") == "tool"]
    assert len(answered) == 4  # 2 + 1 run, the fourth answered as not run
    assert answered[-1]["content"] == NOT_RUN
    assert sum(1 for e in events if e["event"] == "tool_result") == 3


def test_a_reviewer_that_ends_without_a_verdict_is_malformed(
    scripted: Start, tmp_path: Path, repo: Path
) -> None:
    model = scripted([calls(ToolCall("ls", {}, id="l1")), text("I looked around; it seems fine.")])
    verdict, _ = run_review(model, tmp_path, looking_in(repo))
    assert verdict.verdict == CHANGES_REQUESTED and verdict.malformed
    assert "not the JSON verdict" in verdict.summary


def test_reviewer_results_are_bounded(scripted: Start, tmp_path: Path, repo: Path) -> None:
    (repo / "big.txt").write_text("".join(f"line {n} " + "y" * 70 + "\n" for n in range(5000)))
    model = scripted([calls(ToolCall("read_file", {"path": "big.txt"}, id="r1")), text(APPROVAL)])
    run_review(model, tmp_path, looking_in(repo))
    result = model.requests[1].body["messages"][-1]["content"]
    assert 1000 < len(result) <= 8000


def test_a_round_whose_reviewer_looked_still_replays_the_workers_conversation(
    scripted: Start, tmp_path: Path, repo: Path
) -> None:
    from hero.agent.replay import replay_round, round_start_fields
    from hero.llm.client import Completion

    path = tmp_path / "trace.jsonl"
    with Trace(path) as trace:  # a worker's round that ended, as the pipeline writes it
        trace.round_start(1, story="s1", run=1, branch="hero/s1", **round_start_fields("b", 1.0))
        trace.message("system", "You are the worker.")
        trace.message("user", "Add sub.")
        answer = Completion(
            content="Done.",
            tool_calls=(),
            tokens_in=10,
            tokens_out=2,
            http_s=0.0,
            message={"role": "assistant", "content": "Done."},
            finish_reason="stop",
        )
        trace.assistant(1, answer, estimate=None)
        trace.agent_end({"stop_reason": "done", "detail": "", "turns": 1, "tool_calls": 0})
    model = scripted(
        [calls(ToolCall("read_file", {"path": "helpers.py"}, id="r1")), text(APPROVAL)]
    )
    run_review(model, tmp_path, looking_in(repo))  # appends the reviewer's events to the trace

    replayed = replay_round(path, base_sha="b", started_at=1.0)
    assert replayed is not None and replayed.done
    assert [m["role"] for m in replayed.messages] == ["system", "user", "assistant"]
    assert replayed.tool_calls == 0


def test_the_reviewer_reads_nothing_outside_the_repository(
    scripted: Start, tmp_path: Path, repo: Path
) -> None:
    secret = tmp_path / "home-secret.txt"
    secret.write_text("SECRET-OUTSIDE-9911\n")
    (repo / "notes.md").symlink_to(secret)  # as a worker may plant one
    model = scripted(
        [
            calls(
                ToolCall("read_file", {"path": "notes.md"}, id="r1"),
                ToolCall("read_file", {"path": str(secret)}, id="r2"),
                ToolCall("grep", {"pattern": "SECRET-OUTSIDE", "path": ".."}, id="g1"),
                ToolCall("git_show", {"rev": f"HEAD:../{secret.name}"}, id="s1"),
            ),
            text(APPROVAL),
        ]
    )
    run_review(model, tmp_path, looking_in(repo))
    results = [m for m in model.requests[1].body["messages"] if m.get("role") == "tool"]
    assert len(results) == 4
    for result in results:
        assert "SECRET-OUTSIDE-9911" not in result["content"]
