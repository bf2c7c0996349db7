"""Tests for hero.roles.reviewer: reading the reviewer's JSON verdict, feedback text, review()."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import git

from hero.config.project import DEFAULT_BUILD_OUTPUT
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings
from hero.llm.client import LlmClient
from hero.llm.scripted import ScriptedModel, text
from hero.roles.reviewer import (
    APPROVED,
    CHANGES_REQUESTED,
    Verdict,
    parse_verdict,
    review,
    review_commits,
    short_circuit,
)
from hero.story.format import parse_story_text
from hero.trace import Trace, read_trace

APPROVAL = {
    "verdict": "APPROVED",
    "summary": "Adds sub() with a test.",
    "ac_check": [{"ac": "calc.sub(5, 3) == 2", "satisfied": True, "commit": "abc123"}],
    "comments": [
        {"file": "calc/__init__.py", "line": 3, "severity": "nit", "comment": "docstring"}
    ],
}


def test_plain_json_approval() -> None:
    verdict = parse_verdict(json.dumps(APPROVAL))
    assert verdict.verdict == APPROVED
    assert verdict.approved
    assert verdict.summary == "Adds sub() with a test."
    assert verdict.ac_check == APPROVAL["ac_check"]
    assert verdict.comments[0]["severity"] == "nit"
    assert not verdict.malformed
    assert not verdict.short_circuited


def test_fenced_json_block() -> None:
    answer = "Here is my verdict:\n\n```json\n" + json.dumps(APPROVAL, indent=2) + "\n```\n"
    verdict = parse_verdict(answer)
    assert verdict.approved
    assert verdict.summary == APPROVAL["summary"]


def test_fence_without_language_tag() -> None:
    answer = "```\n" + json.dumps({"verdict": "CHANGES_REQUESTED", "summary": "no"}) + "\n```"
    verdict = parse_verdict(answer)
    assert verdict.verdict == CHANGES_REQUESTED
    assert not verdict.malformed


def test_prose_around_json() -> None:
    answer = (
        "I read the diff {carefully}. My answer: "
        + json.dumps({"verdict": "CHANGES_REQUESTED", "summary": "tests missing"})
        + " Hope that helps."
    )
    verdict = parse_verdict(answer)
    assert verdict.verdict == CHANGES_REQUESTED
    assert verdict.summary == "tests missing"
    assert not verdict.malformed


def test_lowercase_verdict_with_space_is_normalised() -> None:
    verdict = parse_verdict('{"verdict": "changes requested", "summary": "x"}')
    assert verdict.verdict == CHANGES_REQUESTED
    assert not verdict.malformed


def test_garbage_is_malformed_changes_requested() -> None:
    verdict = parse_verdict("Looks good to me, ship it!")
    assert verdict.verdict == CHANGES_REQUESTED
    assert verdict.malformed
    assert not verdict.approved
    assert "Looks good to me" in verdict.summary


def test_empty_answer_is_malformed() -> None:
    verdict = parse_verdict("")
    assert verdict.verdict == CHANGES_REQUESTED
    assert verdict.malformed


def test_json_without_verdict_key_is_malformed() -> None:
    verdict = parse_verdict('{"summary": "all fine", "approved": true}')
    assert verdict.verdict == CHANGES_REQUESTED
    assert verdict.malformed


def test_invalid_verdict_value() -> None:
    verdict = parse_verdict('{"verdict": "LGTM", "summary": "nice"}')
    assert verdict.verdict == CHANGES_REQUESTED
    assert verdict.malformed
    assert "LGTM" in verdict.summary
    assert "nice" in verdict.summary


def test_approved_with_blocker_counts_as_changes_requested() -> None:
    data = dict(
        APPROVAL,
        comments=[{"file": "a.py", "line": 1, "severity": "BLOCKER", "comment": "SQL injection"}],
    )
    verdict = parse_verdict(json.dumps(data))
    assert verdict.verdict == CHANGES_REQUESTED
    assert not verdict.approved
    assert not verdict.malformed
    assert "blocker" in verdict.summary
    assert verdict.comments[0]["severity"] == "blocker"


def test_approved_with_unsatisfied_criterion_counts_as_changes_requested() -> None:
    data = dict(
        APPROVAL,
        ac_check=[
            {"ac": "first", "satisfied": True},
            {"ac": "second", "satisfied": False},
        ],
        comments=[],
    )
    verdict = parse_verdict(json.dumps(data))
    assert verdict.verdict == CHANGES_REQUESTED
    assert "unmet acceptance criterion" in verdict.summary


def test_satisfied_given_as_strings() -> None:
    data = dict(
        APPROVAL,
        ac_check=[{"ac": "a", "satisfied": "true"}, {"ac": "b", "satisfied": "Yes"}],
    )
    verdict = parse_verdict(json.dumps(data))
    assert verdict.approved
    assert all(a["satisfied"] is True for a in verdict.ac_check)

    data["ac_check"] = [{"ac": "a", "satisfied": "false"}]
    verdict = parse_verdict(json.dumps(data))
    assert verdict.verdict == CHANGES_REQUESTED
    assert verdict.ac_check[0]["satisfied"] is False


def test_unknown_severity_becomes_nit_and_bad_entries_are_dropped() -> None:
    data = {
        "verdict": "APPROVED",
        "summary": "ok",
        "ac_check": ["not a dict", {"ac": "x", "satisfied": True}],
        "comments": [{"comment": "style", "severity": "major"}, 42],
    }
    verdict = parse_verdict(json.dumps(data))
    assert verdict.approved
    assert verdict.ac_check == [{"ac": "x", "satisfied": True}]
    assert verdict.comments == [{"comment": "style", "severity": "nit"}]


def test_feedback_lists_unmet_criteria_and_comments_with_locations() -> None:
    verdict = Verdict(
        CHANGES_REQUESTED,
        "Not there yet.",
        ac_check=[
            {"ac": "sub works", "satisfied": True},
            {"ac": "handles negatives", "satisfied": False},
        ],
        comments=[
            {"file": "calc/__init__.py", "line": 7, "severity": "blocker", "comment": "wrong sign"},
            {"file": "README.md", "severity": "nit", "comment": "mention sub"},
            {"severity": "nit", "comment": "general remark"},
        ],
    )
    feedback = verdict.feedback()
    assert feedback.startswith("**CHANGES_REQUESTED**: Not there yet.")
    assert "Acceptance criteria not yet met:" in feedback
    assert "- handles negatives" in feedback
    assert "sub works" not in feedback
    assert "- [blocker] calc/__init__.py:7: wrong sign" in feedback
    assert "- [nit] README.md: mention sub" in feedback
    assert "- [nit] general remark" in feedback


def test_feedback_of_clean_approval_is_one_line() -> None:
    verdict = parse_verdict(json.dumps(dict(APPROVAL, comments=[])))
    assert verdict.feedback() == f"**APPROVED**: {APPROVAL['summary']}"


def test_short_circuit() -> None:
    verdict = short_circuit("verification failed: pytest -q")
    assert verdict.verdict == CHANGES_REQUESTED
    assert verdict.short_circuited
    assert not verdict.approved
    assert not verdict.malformed
    assert verdict.summary == "verification failed: pytest -q"
    assert verdict.to_dict()["short_circuited"] is True
    assert "verification failed: pytest -q" in verdict.feedback()


def test_review_sends_story_and_diff_and_parses_answer(
    scripted: Callable[..., ScriptedModel], tmp_path: Path
) -> None:
    model = scripted([text("```json\n" + json.dumps(APPROVAL) + "\n```")])
    provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
    client = LlmClient(
        RoleConfig("reviewer", provider, "judge", None),
        LlmSettings(timeout_s=10, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.01),
    )
    story = parse_story_text(
        "---\nid: s1\ntitle: Add sub\n---\n## Goal\nAdd sub.\n\n"
        "## Acceptance Criteria\n- calc.sub(5, 3) == 2\n",
        tmp_path / "s1.md",
    )
    with Trace(tmp_path / "trace.jsonl") as trace:
        verdict = review(
            client,
            story,
            round_no=2,
            branch="hero/s1",
            base_sha="0123456789abcdef",
            verify_summary="- [PASS] verify: `pytest` exit 0",
            git_log="abc123 add sub",
            diff_stat=" calc/__init__.py | 2 ++",
            diff="+def sub(a, b):\n+    return a - b\n",
            home=None,
            trace=trace,
        )
    assert verdict.approved
    sent = model.requests[0].body
    assert "tools" not in sent
    task = sent["messages"][1]["content"]
    assert "Add sub." in task
    assert "def sub(a, b)" in task
    assert "hero/s1" in task
    assert "[PASS] verify" in task
    kinds = [e["event"] for e in read_trace(tmp_path / "trace.jsonl")]
    assert kinds == ["review_request", "review_answer"]


# ------------------------------------------------------------------------- build output


def committed_build_output(repo: Path) -> tuple[str, str]:
    """(base, tip): on ``repo``'s branch hero/s1, the worker's own commit of a .pyc beside
    its code."""
    base = git(repo, "rev-parse", "main").strip()
    git(repo, "checkout", "-q", "-b", "hero/s1")
    (repo / "calc" / "__pycache__").mkdir()
    (repo / "calc" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\xa7\r\r\n\0\0\0\0")
    (repo / "calc" / "new.py").write_text("def sub(a, b):\n    return a - b\n")
    git(repo, "add", "-f", "-A")  # past the repository's .gitignore, as a worker may
    git(repo, "commit", "-q", "-m", "add sub, and the bytecode")
    return base, git(repo, "rev-parse", "HEAD").strip()


def review_task(
    model: ScriptedModel, tmp_path: Path, repo: Path, base: str, tip: str, **kw: Any
) -> str:
    """The task the reviewer is sent for ``base..tip`` of ``repo``."""
    provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
    client = LlmClient(
        RoleConfig("reviewer", provider, "judge", None),
        LlmSettings(timeout_s=10, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.01),
    )
    story = parse_story_text("---\nid: s1\ntitle: Add sub\n---\nAdd sub.\n", tmp_path / "s1.md")
    with Trace(tmp_path / "trace.jsonl") as trace:
        review_commits(
            client,
            story,
            repo=repo,
            base_sha=base,
            tip=tip,
            round_no=1,
            branch="hero/s1",
            verify_summary="- [PASS] tests",
            trace=trace,
            **{"home": None, **kw},
        )
    return str(model.requests[-1].body["messages"][1]["content"])


def test_the_reviewer_is_told_of_build_output_the_branch_commits(
    scripted: Callable[..., ScriptedModel], tmp_path: Path, target_repo: Path
) -> None:
    model = scripted([text(json.dumps(APPROVAL))] * 2)
    base, tip = committed_build_output(target_repo)

    task = review_task(model, tmp_path, target_repo, base, tip, build_output=DEFAULT_BUILD_OUTPUT)

    line = (
        "Build or cache output committed on this branch (1 file(s) matching hero's "
        "build_output setting): calc/__pycache__/x.cpython-311.pyc. A build, a test run or "
        "an install makes such files; check that each belongs in the repository."
    )
    # under the files changed, before the diff (which names the binary file too)
    files, _, diff = task.partition("## Diff against the base")
    assert f"\n\n{line}\n\n" in files and "## Files changed" in files
    assert "calc/__pycache__/x.cpython-311.pyc" in diff
    # without the list, no such line: the task is as it was before the line existed
    plain = review_task(model, tmp_path, target_repo, base, tip)
    assert "Build or cache output" not in plain
    assert plain == task.replace(f"\n{line}\n", "")


def test_an_override_without_the_placeholder_gets_the_line_at_its_end(
    scripted: Callable[..., ScriptedModel], tmp_path: Path, target_repo: Path
) -> None:
    model = scripted([text(json.dumps(APPROVAL))])
    base, tip = committed_build_output(target_repo)
    home = tmp_path / "home"
    (home / "prompts").mkdir(parents=True)
    (home / "prompts" / "reviewer_task.md").write_text(
        "{{id}} {{title}} {{body}} {{scope}} {{round}} {{verify_summary}} {{branch}} "
        "{{git_log}} {{diff_stat}} {{base_sha}} {{diff}}\nEND OF OVERRIDE"
    )
    task = review_task(
        model, tmp_path, target_repo, base, tip, home=home, build_output=DEFAULT_BUILD_OUTPUT
    )
    assert task.split("END OF OVERRIDE")[1].startswith(
        "\nBuild or cache output committed on this branch (1 file(s)"
    )
