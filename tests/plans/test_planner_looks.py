"""The planner that looks (issue 35): `hero plan` end to end against the scripted model over
real HTTP, a real home and a real git repository; its read-only, bounded tool loop
(hero.roles.looking) before the plan answer."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import git

from hero.cli import main
from hero.config.scaffold import init_home
from hero.llm.scripted import ScriptedModel, ToolCall, calls, text
from hero.roles.looking import PLAN_NOT_RUN

SECRET_NOTE = "PLANNER-READ-THIS-7313"
STORY = {
    "id": "sub",
    "title": "Add subtraction",
    "priority": "normal",
    "verify": {"unit": ["python -m unittest discover -s tests -t ."]},
    "scope": ["calc/**", "tests/**"],
    "depends_on": [],
    "body": "## Goal\nAdd sub.\n\n## Acceptance Criteria\n- [ ] sub(3, 1) == 2\n",
}
PLAN = json.dumps({"plan": "calc", "stories": [STORY]})


@pytest.fixture
def repo(target_repo: Path) -> Path:
    (target_repo / "NOTES.md").write_text(f"Subtraction must round. {SECRET_NOTE}\n")
    git(target_repo, "add", "NOTES.md")
    git(target_repo, "commit", "-q", "-m", "notes")
    return target_repo


def make_home(tmp_path: Path, repo: Path, model: ScriptedModel, extra: str = "") -> Path:
    home = tmp_path / "home"
    init_home(home, target_repo=str(repo))
    (home / "config" / "providers" / "scripted.yaml").write_text(
        f"name: scripted\nbase_url: {model.base_url}\ndefault_model: planner-test\n"
    )
    (home / "config" / "roles.yaml").write_text(
        f"target_repo: {json.dumps(str(repo))}\n"
        "llm_max_attempts: 1\nllm_backoff_base_s: 0.01\nllm_backoff_max_s: 0.01\n"
        f"planner:\n  provider: scripted\n{extra}"
    )
    return home


def plan(home: Path, tmp_path: Path) -> int:
    path = tmp_path / "Calc Plan.md"
    path.write_text("# Calculator\n\nAdd subtraction.\n")
    return main(["plan", str(path), "--home", str(home)])


def status(repo: Path) -> str:
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=repo, capture_output=True, text=True
    )
    return out.stdout


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def test_the_planner_reads_a_file_then_plans_and_the_plan_is_written(
    scripted: Callable[..., ScriptedModel], tmp_path: Path, repo: Path
) -> None:
    model = scripted([calls(ToolCall("read_file", {"path": "NOTES.md"}, id="r1")), text(PLAN)])
    home = make_home(tmp_path, repo, model)

    assert plan(home, tmp_path) == 0

    assert len(model.requests) == 2
    first, second = (r.body for r in model.requests)
    names = sorted(t["function"]["name"] for t in first["tools"])
    assert names == ["find", "git_log", "git_show", "grep", "ls", "read_file"]
    task = first["messages"][1]["content"]
    assert "## Looking at the repository" in task and "at most 12 calls" in task
    assert any(SECRET_NOTE in c for c in tool_results(second))  # its content reached it
    folder = home / "inbox" / "calc"
    assert (folder / "sub.md").is_file() and (folder / "_manifest.yaml").is_file()


def test_a_planner_without_tools_sends_one_request_as_before(
    scripted: Callable[..., ScriptedModel], tmp_path: Path, repo: Path
) -> None:
    model = scripted([text(PLAN)])
    home = make_home(tmp_path, repo, model, "  tools: []\n")

    assert plan(home, tmp_path) == 0

    assert len(model.requests) == 1
    body = model.requests[0].body
    assert "tools" not in body
    assert "Looking at the repository" not in body["messages"][1]["content"]
    assert (home / "inbox" / "calc" / "sub.md").is_file()


def test_a_planner_that_writes_or_runs_gets_unknown_tool_and_the_repo_is_unchanged(
    scripted: Callable[..., ScriptedModel], tmp_path: Path, repo: Path
) -> None:
    before = status(repo)
    head = git(repo, "rev-parse", "HEAD")
    model = scripted(
        [
            calls(
                ToolCall("write_file", {"path": "calc/x.py", "content": "x = 1\n"}, id="w1"),
                ToolCall("bash", {"command": "touch pwned"}, id="b1"),
                ToolCall("edit_file", {"path": "NOTES.md", "old": "must", "new": "x"}, id="e1"),
            ),
            text(PLAN),
        ]
    )
    home = make_home(tmp_path, repo, model)

    assert plan(home, tmp_path) == 0

    results = tool_results(model.requests[1].body)
    assert len(results) == 3 and all(r.startswith("unknown tool '") for r in results)
    assert status(repo) == before and git(repo, "rev-parse", "HEAD") == head
    assert not (repo / "pwned").exists() and not (repo / "calc" / "x.py").exists()
    assert (repo / "NOTES.md").read_text().startswith("Subtraction must round.")


def test_the_call_limit_ends_the_loop_and_asks_for_the_plan(
    scripted: Callable[..., ScriptedModel], tmp_path: Path, repo: Path
) -> None:
    def handler(body: dict[str, Any]) -> Any:
        if "tools" not in body:
            return text(PLAN)
        n = len(tool_results(body))
        return calls(
            ToolCall("read_file", {"path": "NOTES.md"}, id=f"a{n}"),
            ToolCall("ls", {"path": "."}, id=f"b{n}"),
        )

    model = scripted(handler)
    home = make_home(tmp_path, repo, model, "planner_max_tool_calls: 3\n")
    text_ = (home / "config" / "roles.yaml").read_text()
    assert "planner_max_tool_calls: 3" in text_

    assert plan(home, tmp_path) == 0

    last = model.requests[-1].body
    assert "tools" not in last
    assert "You cannot call tools any more" in last["messages"][-1]["content"]
    assert PLAN_NOT_RUN in tool_results(last)  # the call the limit stopped is answered
    ran = [r for r in tool_results(last) if r != PLAN_NOT_RUN]
    assert len(ran) == 3
    assert (home / "inbox" / "calc" / "sub.md").is_file()


def test_the_planner_reads_nothing_outside_the_target_repository(
    scripted: Callable[..., ScriptedModel], tmp_path: Path, repo: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("OUTSIDE-SECRET-99\n")
    model = scripted(
        [
            calls(
                ToolCall("read_file", {"path": str(outside)}, id="o1"),
                ToolCall("read_file", {"path": "../outside.txt"}, id="o2"),
                ToolCall("read_file", {"path": ".git/config"}, id="o3"),
            ),
            text(PLAN),
        ]
    )
    home = make_home(tmp_path, repo, model)

    assert plan(home, tmp_path) == 0

    results = tool_results(model.requests[1].body)
    assert len(results) == 3
    assert not any("OUTSIDE-SECRET-99" in r for r in results)


def test_the_planner_reads_the_base_not_the_users_working_tree_or_git_config(
    scripted: Callable[..., ScriptedModel], tmp_path: Path, repo: Path
) -> None:
    """The planner's tools read a checkout of the base made for the look: an untracked
    ``.env``, an uncommitted edit and a credential in the user's ``.git/config`` stay out of
    the model's reach, and the checkout is gone after the plan."""
    (repo / ".env").write_text("TOKEN=UNTRACKED-ENV-4411\n")
    (repo / "NOTES.md").write_text("UNCOMMITTED-EDIT-5522\n")
    git(repo, "config", "remote.origin.url", "https://user:GITCONFIG-CRED-6633@example.com/r.git")
    model = scripted(
        [
            calls(
                ToolCall("read_file", {"path": ".env"}, id="e1"),
                ToolCall("read_file", {"path": "NOTES.md"}, id="e2"),
                ToolCall("read_file", {"path": ".git/config"}, id="e3"),
                ToolCall("grep", {"pattern": "CRED|UNTRACKED|UNCOMMITTED"}, id="e4"),
            ),
            text(PLAN),
        ]
    )
    home = make_home(tmp_path, repo, model)

    assert plan(home, tmp_path) == 0

    results = tool_results(model.requests[1].body)
    assert len(results) == 4
    joined = "\n".join(results)
    for leaked in ("UNTRACKED-ENV-4411", "UNCOMMITTED-EDIT-5522", "GITCONFIG-CRED-6633"):
        assert leaked not in joined
    assert SECRET_NOTE in results[1]  # the committed NOTES.md, as at the base
    # the user's working tree is as they left it
    assert (repo / "NOTES.md").read_text() == "UNCOMMITTED-EDIT-5522\n"
    assert (repo / ".env").exists()
