"""Tests for hero.agent.tools.toolset (a role's tools, hero's and external ones) and
hero.agent.tools.gitread (git_log, git_show): real git repositories, the real agent loop
against the scripted model over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import git

from hero.agent.loop import run_agent
from hero.agent.tools import HERO_TOOLS, READ_ONLY_TOOLS, TOOL_NAMES, ToolContext
from hero.agent.tools.context import ToolOutcome
from hero.agent.tools.external import ExternalTool
from hero.agent.tools.toolset import Toolset, select_tools
from hero.config.providers import Provider, RoleConfig
from hero.config.schema import ConfigError
from hero.config.sections import LlmSettings, WorkerLimits
from hero.config.tools import HERO_TOOLS as DECLARED
from hero.llm.client import LlmClient
from hero.llm.scripted import ScriptedModel, ToolCall, calls, text
from hero.runner import child_env
from hero.trace import Trace, read_trace


def external(server: str, tool: str, seen: list[str | None], answer: str = "ok") -> ExternalTool:
    def call(raw: str | None) -> ToolOutcome:
        seen.append(raw)
        return ToolOutcome(f"{server}.{tool}: {answer}", is_error=False)

    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    return ExternalTool(server, tool, f"{tool} of {server}", schema, call)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo with space"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("first\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first commit")
    (root / "a.txt").write_text("second\n")
    (root / "b.txt").write_text("bee\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "second commit")
    return root


def ctx_for(root: Path) -> ToolContext:
    return ToolContext(root=root, env=child_env(), bash_timeout_s=30)


# ----------------------------------------------------------------------- the names


def test_config_and_agent_name_the_same_tools_and_the_worker_keeps_its_seven() -> None:
    assert HERO_TOOLS == DECLARED
    assert TOOL_NAMES == ("bash", "read_file", "write_file", "edit_file", "grep", "find", "ls")
    assert set(READ_ONLY_TOOLS) == {"read_file", "ls", "grep", "find", "git_log", "git_show"}
    assert Toolset().names() == TOOL_NAMES  # the loop's default: the worker's seven


def test_select_hero_tools_and_external_patterns() -> None:
    seen: list[str | None] = []
    offered = [
        external("docs", "search", seen),
        external("docs", "fetch", seen),
        external("jira", "issue", seen),
    ]
    tools = select_tools(["grep", "read_file", "docs.*", "jira.issue"], offered)
    assert tools.hero == ("read_file", "grep")  # hero's order
    assert tools.names() == ("read_file", "grep", "docs__search", "docs__fetch", "jira__issue")
    schemas = tools.schemas()
    assert [s["function"]["name"] for s in schemas] == list(tools.names())
    assert schemas[2]["function"]["parameters"]["required"] == ["q"]
    only_one = select_tools(["docs.fetch"], offered)
    assert only_one.names() == ("docs__fetch",) and not only_one.notes


def test_unknown_names_are_config_errors_naming_role_and_nearest() -> None:
    with pytest.raises(ConfigError) as caught:
        select_tools(["read_fiel"], role="reviewer")
    message = str(caught.value)
    assert "reviewer.tools" in message and "'read_file'" in message and "did you mean" in message
    assert caught.value.exit_code == 2
    with pytest.raises(ConfigError, match="'dcos.search' names the MCP server 'dcos'.*'docs'"):
        select_tools(["dcos.search"], [], servers=["docs"])
    with pytest.raises(ConfigError, match="no tool pattern"):
        select_tools(["docs."], [], servers=["docs"])
    # a looking role never gets a tool that writes or runs a command
    for writer in ("write_file", "edit_file", "bash"):
        with pytest.raises(ConfigError, match=f"'{writer}' changes the repository"):
            select_tools([writer], role="reviewer")


def test_a_tool_the_server_no_longer_offers_is_a_note() -> None:
    seen: list[str | None] = []
    tools = select_tools(["docs.gone", "docs.*"], [external("docs", "search", seen)])
    assert tools.names() == ("docs__search",)
    assert tools.notes == ("worker: docs.gone is not offered by the server 'docs' (now); left out",)
    # a configured server that offers nothing now: nothing selected, no crash
    assert not select_tools(["docs.*"], [], servers=["docs"])


def test_execute_runs_only_the_set_and_bounds_external_results(tmp_path: Path) -> None:
    seen: list[str | None] = []
    big = ExternalTool(
        "docs", "big", "", {"type": "object"}, lambda raw: ToolOutcome("x" * 100_000, False)
    )

    def boom(raw: str | None) -> ToolOutcome:
        raise RuntimeError("server went away")

    broken = ExternalTool("docs", "broken", "", {"type": "object"}, boom)
    tools = select_tools(["read_file", "docs.*"], [external("docs", "search", seen), big, broken])
    ctx = ToolContext(root=tmp_path, env={}, max_result_chars=1000)
    (tmp_path / "f.txt").write_text("hi\n")
    (tmp_path / "keep.txt").write_text("keep\n")

    assert tools.execute(ctx, "docs__search", '{"q": "x"}').content == "docs.search: ok"
    assert seen == ['{"q": "x"}']
    assert "hi" in tools.execute(ctx, "read_file", '{"path": "f.txt"}').content
    cut = tools.execute(ctx, "docs__big", "{}")
    assert len(cut.content) <= 1000 and not cut.is_error
    failed = tools.execute(ctx, "docs__broken", "{}")
    assert failed.is_error and "server went away" in failed.content
    for name in ("write_file", "bash", "docs.search", "other__x"):
        refused = tools.execute(
            ctx, name, '{"path": "keep.txt", "content": "gone", "command": "rm *"}'
        )
        assert refused.is_error and refused.content.startswith(f"unknown tool '{name}'")
        assert (
            "available tools: read_file, docs__search, docs__big, docs__broken" in refused.content
        )
    assert (tmp_path / "keep.txt").read_text() == "keep\n"


# ----------------------------------------------------------------------- in the loop


def client_for(model: ScriptedModel) -> LlmClient:
    provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
    return LlmClient(
        RoleConfig("worker", provider, "scripted-worker", None),
        LlmSettings(timeout_s=10, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.01),
    )


def test_external_tools_reach_the_worker_request_and_their_calls_reach_call(
    scripted: Any, tmp_path: Path
) -> None:
    seen: list[str | None] = []
    model = scripted(
        [
            calls(ToolCall("docs__search", {"q": "retry policy"}, id="d1")),
            text("done"),
        ]
    )
    offered = [external("docs", "search", seen, answer="RESULT-7731")]
    tools = select_tools((*TOOL_NAMES, "docs.*"), offered)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a worker."},
        {"role": "user", "content": "Do it."},
    ]
    with Trace(tmp_path / "t.jsonl") as trace:
        result = run_agent(
            client_for(model), messages, ctx_for(tmp_path), WorkerLimits(), trace, tools=tools
        )
    assert result.stop_reason == "done" and result.tool_calls == 1
    first = model.requests[0].body
    names = [t["function"]["name"] for t in first["tools"]]
    assert names == [*TOOL_NAMES, "docs__search"]
    assert json.loads(seen[0] or "") == {"q": "retry policy"}
    second = model.requests[1].body
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "d1",
        "content": "docs.search: RESULT-7731",
    }
    events = read_trace(tmp_path / "t.jsonl")
    assert [e["name"] for e in events if e["event"] == "tool_result"] == ["docs__search"]


# ----------------------------------------------------------------------- git_log / git_show


def test_git_log_and_git_show_read_the_history(repo: Path) -> None:
    tools = select_tools(READ_ONLY_TOOLS)
    ctx = ctx_for(repo)
    log = tools.execute(ctx, "git_log", "{}")
    assert not log.is_error
    assert log.content.index("second commit") < log.content.index("first commit")
    only_b = tools.execute(ctx, "git_log", '{"path": "b.txt"}').content
    assert "second commit" in only_b and "first commit" not in only_b
    one = tools.execute(ctx, "git_log", '{"max_count": 1}').content
    assert "second commit" in one and "first commit" not in one
    shown = tools.execute(ctx, "git_show", '{"rev": "HEAD"}')
    assert not shown.is_error and "-first" in shown.content and "+second" in shown.content
    limited = tools.execute(ctx, "git_show", '{"rev": "HEAD", "path": "b.txt"}').content
    assert "+bee" in limited and "+second" not in limited
    old = tools.execute(ctx, "git_show", '{"rev": "HEAD~1:a.txt"}')
    assert old.content == "first\n"


@pytest.mark.parametrize(
    "rev",
    [
        "--output=/tmp/pwned",
        "-p",
        "HEAD\nmain",
        "x" * 300,
        "",
        "refs/heads/does-not-exist",
    ],
)
def test_git_show_refuses_hostile_revisions(repo: Path, tmp_path: Path, rev: str) -> None:
    out = select_tools(READ_ONLY_TOOLS).execute(ctx_for(repo), "git_show", json.dumps({"rev": rev}))
    assert out.is_error and out.content.startswith("tool 'git_show'")
    assert len(out.content) < 2500
    assert not Path("/tmp/pwned").exists() or rev != "--output=/tmp/pwned"


def test_a_worker_made_ref_named_like_an_option_is_only_a_revision(repo: Path) -> None:
    # a ref the worker wrote is hostile input: a name git could read as an option is
    # passed after --end-of-options, a revision and nothing more
    git(repo, "update-ref", "refs/heads/x--output=evil", "HEAD")
    out = select_tools(READ_ONLY_TOOLS).execute(
        ctx_for(repo), "git_show", '{"rev": "x--output=evil"}'
    )
    assert not out.is_error and "second commit" in out.content
    assert not (repo / "evil").exists()
    bad = select_tools(READ_ONLY_TOOLS).execute(ctx_for(repo), "git_log", '{"max_count": 100000}')
    assert bad.is_error and "max_count" in bad.content
    absolute = select_tools(READ_ONLY_TOOLS).execute(ctx_for(repo), "git_log", '{"path": "/etc"}')
    assert absolute.is_error and "absolute" in absolute.content


def test_git_show_of_a_huge_commit_is_bounded(repo: Path) -> None:
    lines = "".join(
        f"line {n} of a very large generated file, padded out a little\n" for n in range(60_000)
    )
    (repo / "huge.txt").write_text(lines)
    git(repo, "add", "huge.txt")
    git(repo, "commit", "-q", "-m", "huge")
    ctx = ToolContext(root=repo, env={}, max_result_chars=8000)
    out = select_tools(READ_ONLY_TOOLS).execute(ctx, "git_show", '{"rev": "HEAD"}')
    assert not out.is_error
    assert len(out.content) <= 8000
    assert "huge" in out.content


def test_git_tools_run_no_program_the_repository_config_names(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "prog.sh"
    script.write_text(f"#!/bin/sh\ntouch '{marker}'\ncat\n")
    script.chmod(0o755)
    (repo / ".gitattributes").write_text("*.txt diff=evil\n")
    git(repo, "config", "diff.evil.textconv", str(script))
    git(repo, "config", "diff.external", str(script))
    git(repo, "config", "core.pager", str(script))
    git(repo, "config", "log.showSignature", "true")
    git(repo, "config", "gpg.program", str(script))
    tools = select_tools(READ_ONLY_TOOLS)
    assert not tools.execute(ctx_for(repo), "git_show", '{"rev": "HEAD"}').is_error
    assert not tools.execute(ctx_for(repo), "git_log", "{}").is_error
    assert not marker.exists()


def test_role_defaults_and_narrowing_of_server_patterns() -> None:
    from hero.config.tools import default_patterns, narrow

    assert default_patterns("worker", ["docs", "jira"]) == (*TOOL_NAMES, "docs.*", "jira.*")
    assert default_patterns("reviewer", ["docs"]) == READ_ONLY_TOOLS
    assert default_patterns("planner") == READ_ONLY_TOOLS
    has = (*TOOL_NAMES, "docs.*", "jira.issue")
    assert narrow("worker", has, ["read_file", "docs.search", "docs.*", "jira.issue"]) == ""
    assert "'jira.*' is not among the worker's tools" in narrow("worker", has, ["jira.*"])
    assert "'git_show' is not among" in narrow("worker", has, ["git_show"])
    assert narrow("reviewer", (), []) == ""
