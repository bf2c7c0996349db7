"""Tools per role, end to end: `hero run` on a story against the scripted model over real
HTTP, real git repositories and files; config/roles.yaml's ``tools`` and a story's
``tools:`` narrowing them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import VERIFY_SUB, is_review, step_of, task_text
from run_support import APPROVE, good_worker, review_requests, run_hero, worker_requests

from hero.agent.tools import READ_ONLY_TOOLS, TOOL_NAMES
from hero.config.loader import load_config
from hero.config.schema import ConfigError
from hero.llm.models import story_config
from hero.llm.scripted import Reply, ToolCall, calls
from hero.story.format import parse_story
from hero.story.record import StoryError
from hero.trace import read_trace

NOTE = "NOTE-OUTSIDE-THE-DIFF-5150"


def with_roles(home: Path, extra: str) -> None:
    """config/roles.yaml of ``home`` with ``extra`` lines added to its role blocks."""
    path = home / "config" / "roles.yaml"
    text = path.read_text()
    for role, lines in json.loads(extra).items():
        block = f"{role}:\n  provider: scripted\n"
        assert block in text
        text = text.replace(block, block + "".join(f"  {line}\n" for line in lines))
    path.write_text(text)


def looking_handler(worker: list[Any]) -> Any:
    """The worker plays ``worker``; the reviewer first reads NOTES.md (not in the diff) when
    it has tools, then approves."""

    def handler(body: dict[str, Any]) -> Any:
        if is_review(body):
            if step_of(body) == 0 and "tools" in body:
                return calls(ToolCall("read_file", {"path": "NOTES.md"}, id="look1"))
            return APPROVE
        return worker[min(step_of(body), len(worker) - 1)]

    return handler


@pytest.mark.slow
def test_the_reviewer_reads_a_file_outside_the_diff_before_approving(
    scripted: Any, make_home: Any, write_story: Any, target_repo: Path
) -> None:
    (target_repo / "NOTES.md").write_text(f"Subtraction is planned. {NOTE}\n")
    git(target_repo, "add", "NOTES.md")
    git(target_repo, "commit", "-q", "-m", "notes")
    model = scripted(looking_handler(good_worker()))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0

    state = json.loads((home / "runs" / "state" / "s1.json").read_text())
    assert state["status"] == "passed"
    assert state["rounds"][0]["review"]["verdict"] == "APPROVED"
    diff = git(target_repo, "diff", "--name-only", f"{state['base_sha']}..hero/s1")
    assert "NOTES.md" not in diff  # the file it read is outside the diff
    first, second = review_requests(model)
    assert {t["function"]["name"] for t in first["tools"]} == set(READ_ONLY_TOOLS)
    assert NOTE not in task_text(first)
    looked = second["messages"][-1]
    assert looked["role"] == "tool" and looked["tool_call_id"] == "look1"
    assert NOTE in looked["content"]
    # the worker kept exactly its seven
    assert {t["function"]["name"] for t in worker_requests(model)[0]["tools"]} == set(TOOL_NAMES)
    events = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    mine = [e for e in events if e.get("by") == "reviewer"]
    assert [e["event"] for e in mine] == ["tool_start", "tool_result"]
    assert mine[1]["name"] == "read_file" and NOTE in mine[1]["content"]
    kinds = [e["event"] for e in events]
    assert (
        kinds.index("verify")
        < kinds.index("review_request")
        < kinds.index("tool_start", kinds.index("review_request"))
    )
    # its two calls count in the round's usage
    assert state["usage"]["llm_calls"] == 3 + 2


def test_a_reviewer_with_no_tools_sends_exactly_one_request(
    scripted: Any, make_home: Any, write_story: Any
) -> None:
    model = scripted(looking_handler(good_worker()))
    home = make_home(model)
    with_roles(home, '{"reviewer": ["tools: []"]}')
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    reviews = review_requests(model)
    assert len(reviews) == 1
    assert "tools" not in reviews[0]
    assert "Looking outside the diff" not in task_text(reviews[0])


def test_story_narrowing_works_and_cannot_widen(
    scripted: Any, make_home: Any, write_story: Any
) -> None:
    model = scripted([])
    home = make_home(model)
    narrowed = write_story(
        home, "s1", tools={"worker": ["read_file", "write_file", "bash"], "reviewer": ["grep"]}
    )
    config = story_config(load_config(home), parse_story(narrowed))
    assert config.role("worker").tools == ("read_file", "write_file", "bash")
    assert config.role("reviewer").tools == ("grep",)

    widening = write_story(home, "s2", tools={"worker": ["git_log"]})
    with pytest.raises(StoryError) as caught:
        story_config(load_config(home), parse_story(widening))
    assert caught.value.field == "tools.worker"
    assert "'git_log' is not among the worker's tools" in str(caught.value)
    assert caught.value.exit_code == 2
    # a reviewer's tools: [] in roles.yaml leaves a story nothing to narrow to
    with_roles(home, '{"reviewer": ["tools: []"]}')
    looking = write_story(home, "s3", tools={"reviewer": ["read_file"]})
    with pytest.raises(StoryError, match="'read_file' is not among the reviewer's tools"):
        story_config(load_config(home), parse_story(looking))
    # and `hero run` refuses it before anything runs: exit 2
    assert run_hero(home, looking) == 2
    assert not (home / "runs" / "state" / "s3.json").exists()


def test_story_tools_field_shape_is_checked(
    make_home: Any, write_story: Any, scripted: Any
) -> None:
    home = make_home(scripted([]))
    for bad, field in (
        ({"planner": ["read_file"]}, "tools"),
        ({"worker": "read_file"}, "tools.worker"),
        (["read_file"], "tools"),
    ):
        path = write_story(home, "s1", tools=bad)
        with pytest.raises(StoryError) as caught:
            parse_story(path)
        assert caught.value.field == field


def test_unknown_tool_in_roles_yaml_exits_2_naming_role_and_nearest(
    scripted: Any, make_home: Any, write_story: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    model = scripted([])
    home = make_home(model)
    with_roles(home, '{"reviewer": ["tools: [read_file, git_shwo]"]}')
    with pytest.raises(ConfigError) as caught:
        load_config(home)
    assert caught.value.key == "reviewer.tools"
    assert "unknown tool 'git_shwo' (did you mean 'git_show'?)" in str(caught.value)

    story = write_story(home, "s1")
    assert run_hero(home, story) == 2
    err = capsys.readouterr().err
    assert "reviewer.tools" in err and "did you mean 'git_show'" in err
    assert model.requests == []


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ('{"reviewer": ["tools: [bash]"]}', "'bash' changes the repository"),
        ('{"worker": ["tools: [docs.search]"]}', "names the MCP server 'docs', which is not"),
        ('{"worker": ["tools: read_file"]}', "expected a list of tool names"),
    ],
)
def test_bad_tools_in_roles_yaml(scripted: Any, make_home: Any, lines: str, says: str) -> None:
    home = make_home(scripted([]))
    with_roles(home, lines)
    with pytest.raises(ConfigError, match=says):
        load_config(home)


@pytest.mark.slow
def test_a_worker_limited_to_reading_gets_unknown_tool_for_writes(
    scripted: Any, make_home: Any, write_story: Any, target_repo: Path
) -> None:
    worker = [
        calls(ToolCall("write_file", {"path": "calc/__init__.py", "content": "x = 1\n"}, id="w1")),
        Reply(content="I could not write."),
    ]
    model = scripted(looking_handler(worker))
    home = make_home(model)
    story = write_story(
        home, "s1", verify=VERIFY_SUB, max_retries=1, tools={"worker": ["read_file", "ls"]}
    )
    assert run_hero(home, story) == 1
    first, second = worker_requests(model)[:2]
    assert {t["function"]["name"] for t in first["tools"]} == {"read_file", "ls"}
    assert second["messages"][-1]["content"].startswith("unknown tool 'write_file'")
    assert (home / "worktrees" / "s1" / "calc" / "__init__.py").read_text().startswith("def add")
