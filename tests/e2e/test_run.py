"""End to end: `hero run` in-process against hero's scripted model over real HTTP.

Everything is real: the `openai` client, git repositories and worktrees in tmp_path, shell
commands run by the worker's tools and by the verifier. The scripted model plays both the
worker and the reviewer; a handler tells them apart by the system prompt.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import (
    PY,
    SUB_AC,
    VERIFY_SUB,
    is_review,
    review_round,
    step_of,
    task_text,
    verdict,
    worker_round,
)
from run_support import (
    APPROVE,
    COMMIT,
    SUB_IMPL,
    Answer,
    good_worker,
    policy,
    review_requests,
    run_hero,
    worker_requests,
)

from hero.agent.tools import READ_ONLY_TOOLS, TOOL_NAMES
from hero.cli import main
from hero.llm.scripted import (
    Drop,
    HttpError,
    Reply,
    ToolCall,
    call,
    calls,
    text,
)
from hero.trace import read_trace

# --------------------------------------------------------------------------- helpers


def load_state(home: Path, story_id: str = "s1") -> dict[str, Any]:
    return json.loads((home / "runs" / "state" / f"{story_id}.json").read_text())


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


def tool_messages(body: Mapping[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m.get("role") == "tool"]


# --------------------------------------------------------------------------- 1. one round


@pytest.mark.slow
def test_pass_in_one_round(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (target_repo / "AGENTS.md").write_text("Always answer in haiku. RULE-MARKER-7731\n")
    git(target_repo, "add", "AGENTS.md")
    git(target_repo, "commit", "-q", "-m", "agents rules")
    main_sha = git(target_repo, "rev-parse", "main").strip()

    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    worker = [
        Reply(
            tool_calls=(ToolCall("write_file", {"path": "calc/__init__.py", "content": SUB_IMPL}),),
            **usage,
        ),
        Reply(tool_calls=(ToolCall("bash", {"command": COMMIT.format(msg="add-sub")}),), **usage),
        Reply(content="Added calc.sub.", **usage),
    ]
    review = Reply(content=verdict(ac=SUB_AC).content, prompt_tokens=50, completion_tokens=5)
    model = scripted(policy(worker, review))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story, "--json") == 0
    out = json.loads(capsys.readouterr().out)

    state = load_state(home)
    assert state["status"] == "passed"
    assert state["base_sha"] == main_sha
    branch_sha = git(target_repo, "rev-parse", "hero/s1").strip()
    assert state["head_sha"] == branch_sha != main_sha
    assert state["branch"] == "hero/s1"
    assert state["runs"] == 1 and state["error"] == ""
    assert len(state["rounds"]) == 1
    r1 = state["rounds"][0]
    assert r1["round"] == 1
    assert r1["worker"]["turns"] == 3
    assert r1["worker"]["tool_calls"] == 2
    assert r1["worker"]["tokens_in"] == 300 and r1["worker"]["tokens_out"] == 30
    assert r1["worker"]["stop_reason"] == "done"
    assert r1["verify"]["passed"] is True
    assert [c["command"] for c in r1["verify"]["commands"]] == VERIFY_SUB
    assert all(c["exit_code"] == 0 for c in r1["verify"]["commands"])
    assert r1["review"] == {
        "verdict": "APPROVED",
        "summary": "Reviewed.",
        "short_circuited": False,
        "malformed": False,
        "ac_check": [{"ac": "`calc.sub(5, 3) == 2`", "satisfied": True, "commit": ""}],
        "comments": [],
    }
    assert state["usage"]["tokens_in"] == 350
    assert state["usage"]["tokens_out"] == 35
    assert state["usage"]["llm_calls"] == 4

    # --json output
    assert out["id"] == "s1" and out["status"] == "passed" and out["rounds"] == 1
    assert out["branch"] == "hero/s1" and out["head_sha"] == branch_sha
    assert out["usage"] == state["usage"]
    assert isinstance(out["duration"], float) and out["duration"] > 0  # seconds
    assert out["verdicts"] == ["APPROVED"] and out["error"] is None

    # the branch holds the worker's commit, authored by hero's fallback identity
    log = git(target_repo, "log", "--format=%s|%an <%ae>|%cn", f"{main_sha}..hero/s1").splitlines()
    assert log == ["add-sub|hero <hero@localhost>|hero"]
    assert git(target_repo, "show", "hero/s1:calc/__init__.py") == SUB_IMPL
    assert git(target_repo, "rev-parse", "main").strip() == main_sha  # main untouched

    # the story moved to done/
    assert not story.exists()
    done = home / "done" / "s1.md"
    assert done.is_file() and state["story_path"] == str(done) and out["story"] == str(done)
    assert "Reviewer Feedback" not in done.read_text()

    # traces and the verify log
    events = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    kinds = [e["event"] for e in events]
    for kind in (
        "round_start",
        "assistant",
        "tool_result",
        "agent_end",
        "verify",
        "review_request",
        "review_answer",
        "verdict",
    ):
        assert kind in kinds, kind
    assert kinds.index("agent_end") < kinds.index("verify") < kinds.index("review_request")
    vlog = (home / "runs" / "s1" / "verify-r1.log").read_text()
    assert vlog.count("=== exit 0") == 2 and r1["verify"]["log"].endswith("verify-r1.log")

    # what the model was asked
    w = worker_requests(model)
    assert len(w) == 3 and len(review_requests(model)) == 1
    first = w[0]
    assert (
        {t["function"]["name"] for t in first["tools"]}
        == set(TOOL_NAMES)
        == {"bash", "read_file", "write_file", "edit_file", "grep", "find", "ls"}
    )
    assert first["model"] == "scripted-test"
    assert "RULE-MARKER-7731" in task_text(first)
    assert "Add a `sub(a, b)` function to calc." in task_text(first)
    assert "-m unittest -q" in task_text(first)
    assert "## Feedback on round" not in task_text(first)
    assert tool_messages(w[1])[0].startswith("updated calc/__init__.py")
    assert "+def sub(a, b):" in tool_messages(w[1])[0]
    assert tool_messages(w[2])[1].startswith("exit code: 0")
    rv = review_requests(model)[0]
    assert {t["function"]["name"] for t in rv["tools"]} == set(READ_ONLY_TOOLS)  # it may look
    assert "+def sub(a, b):" in task_text(rv) and "add-sub" in task_text(rv)
    assert "[PASS]" in task_text(rv)


# --------------------------------------------------------------------------- 2. feedback


@pytest.mark.slow
def test_pass_after_reviewer_feedback(scripted, make_home, write_story, target_repo: Path) -> None:
    blocker = {
        "file": "tests/test_calc.py",
        "line": None,
        "severity": "blocker",
        "comment": "FEEDBACK-TOKEN-42: add a unit test for sub",
    }
    test_file = (
        "import unittest\n\nfrom calc import add, sub\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n"
    )
    worker = {
        1: good_worker("add-sub"),
        2: [
            call("write_file", path="tests/test_calc.py", content=test_file),
            call("bash", command=COMMIT.format(msg="test-sub")),
            text("Added the test."),
        ],
    }
    reviewer = {
        1: verdict("CHANGES_REQUESTED", "Tests are missing.", comments=[blocker], ac=SUB_AC),
        2: verdict("APPROVED", "Now tested.", ac=SUB_AC),
    }
    model = scripted(policy(worker, reviewer))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    assert [r["round"] for r in state["rounds"]] == [1, 2]
    assert [r["review"]["verdict"] for r in state["rounds"]] == ["CHANGES_REQUESTED", "APPROVED"]
    assert "FEEDBACK-TOKEN-42" in state["rounds"][0]["feedback"]

    round2 = [b for b in worker_requests(model) if worker_round(b) == 2]
    assert round2, "round 2 never asked the worker"
    task2 = task_text(round2[0])
    assert "## Feedback on round 1" in task2
    assert "FEEDBACK-TOKEN-42: add a unit test for sub" in task2
    assert "Tests are missing." in task2
    assert "This is round 2 of at most 3." in task2
    for b in worker_requests(model):
        if worker_round(b) == 1:
            assert "FEEDBACK-TOKEN-42" not in task_text(b)

    done = (home / "done" / "s1.md").read_text()
    assert done.count("## Reviewer Feedback (auto)") == 1
    assert done.count("### Round 1") == 1
    assert "### Round 2" not in done
    assert "FEEDBACK-TOKEN-42" in done
    assert done.startswith("---\nid: s1\n")  # the user's text is kept, feedback appended

    log = git(target_repo, "log", "--format=%s", "main..hero/s1").split()
    assert log == ["test-sub", "add-sub"]
    # round 2's reviewer saw the whole branch since the base, both commits
    rv2 = [b for b in review_requests(model) if review_round(b) == 2][0]
    assert "test-sub" in task_text(rv2) and "add-sub" in task_text(rv2)


# --------------------------------------------------------------------------- 3. give up


@pytest.mark.slow
def test_give_up_after_max_retries(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = scripted(policy(good_worker(), verdict("CHANGES_REQUESTED", "NOPE-SUMMARY", ac=SUB_AC)))
    home = make_home(model, max_retries=5)
    story = write_story(home, "s1", verify=VERIFY_SUB, max_retries=2)  # story overrides config

    assert run_hero(home, story, "--json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "gave_up" and out["rounds"] == 2

    state = load_state(home)
    assert state["status"] == "gave_up"
    assert [r["round"] for r in state["rounds"]] == [1, 2]
    assert state["finished_at"] is not None
    assert len(review_requests(model)) == 2
    assert {worker_round(b) for b in worker_requests(model)} == {1, 2}

    assert story.is_file() and not (home / "done" / "s1.md").exists()
    content = story.read_text()
    assert content.count("## Reviewer Feedback (auto)") == 1
    assert content.count("### Round 1") == 1 and content.count("### Round 2") == 1
    assert content.count("NOPE-SUMMARY") == 2
    assert content.index("### Round 1") < content.index("### Round 2")
    assert "hero/s1" in branches(target_repo)


# --------------------------------------------------------------------------- 4. red verifier


@pytest.mark.slow
def test_red_verifier_short_circuits_and_fails_fast(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    noisy = f"{PY} -c \"import sys; [print(f'out-{{i}}') for i in range(3000)]; sys.exit(3)\""
    tiers = {
        "unit": [noisy, "echo SECOND-IN-TIER-RAN"],
        "slow": ["echo SLOW-TIER-RAN; touch slow-ran"],
    }
    model = scripted(policy(good_worker(), verdict(ac=SUB_AC)))
    home = make_home(model)
    story = write_story(home, "s1", verify=tiers, max_retries=2)

    assert run_hero(home, story) == 1
    state = load_state(home)
    assert state["status"] == "gave_up"
    assert review_requests(model) == []  # the reviewer was never asked

    r1 = state["rounds"][0]
    assert r1["review"]["short_circuited"] is True
    assert r1["review"]["verdict"] == "CHANGES_REQUESTED"
    assert "verification failed" in r1["review"]["summary"]
    v = r1["verify"]
    assert v["passed"] is False
    assert [(c["tier"], c["command"], c["exit_code"]) for c in v["commands"]] == [
        ("unit", noisy, 3),
        ("unit", "echo SECOND-IN-TIER-RAN", 0),
    ]
    assert v["skipped_tiers"] == ["slow"]
    assert len(v["commands"][0]["tail"]) <= 2000 and "out-2999" in v["commands"][0]["tail"]

    log = (home / "runs" / "s1" / "verify-r1.log").read_text()
    assert "out-0\n" in log and "out-1500\n" in log and "out-2999\n" in log  # full output
    assert "SECOND-IN-TIER-RAN" in log
    assert "SLOW-TIER-RAN" not in log and "tier slow: skipped" in log
    assert not (home / "worktrees" / "s1" / "slow-ran").exists()

    # round 2's worker is told what failed
    task2 = task_text([b for b in worker_requests(model) if worker_round(b) == 2][0])
    assert "Verifier failures" in task2 and "exited 3" in task2 and "out-2999" in task2
    events = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    assert "review_request" not in [e["event"] for e in events]


# --------------------------------------------------------------------------- 5. guardrails


@pytest.mark.slow
@pytest.mark.parametrize(
    ("knobs", "plan", "reason", "turns", "tools", "detail"),
    [
        (
            {"worker_max_turns": 2},
            [
                call("bash", command="echo one > one.txt"),
                call("bash", command="echo two"),
                call("bash", command="echo three"),
            ],
            "max_turns",
            2,
            2,
            "turn cap reached (2 model calls)",
        ),
        (
            {},
            [call("read_file", path="calc/__init__.py")],
            "loop",
            4,
            3,
            "4 times in a row",
        ),
        (
            {"worker_max_tool_calls": 3},
            [calls(*(ToolCall("bash", {"command": f"echo {i}"}) for i in range(5)))],
            "max_tool_calls",
            1,
            3,
            "tool-call cap reached (3 calls)",
        ),
    ],
    ids=["max_turns", "loop", "max_tool_calls"],
)
def test_guardrail_stops_the_worker(
    scripted,
    make_home,
    write_story,
    target_repo: Path,
    knobs: dict,
    plan: list[Answer],
    reason: str,
    turns: int,
    tools: int,
    detail: str,
) -> None:
    model = scripted(policy(plan, verdict(ac=SUB_AC)))
    home = make_home(model, baseline=False, **knobs)  # no check runs before round 1 either
    story = write_story(home, "s1", verify=["touch verify-ran"], max_retries=1)

    assert run_hero(home, story) == 1
    state = load_state(home)
    assert state["status"] == "gave_up"
    r1 = state["rounds"][0]
    assert r1["worker"]["stop_reason"] == reason
    assert r1["worker"]["turns"] == turns
    assert r1["worker"]["tool_calls"] == tools
    assert detail in r1["worker"]["detail"]
    assert r1["review"]["short_circuited"] is True
    assert "the worker was stopped" in r1["review"]["summary"] and detail in r1["review"]["summary"]
    assert r1["verify"]["passed"] is False and r1["verify"]["commands"] == []
    assert review_requests(model) == []
    assert len(worker_requests(model)) == turns
    assert not (home / "runs" / "s1" / "verify-r1.log").exists()
    assert not (home / "worktrees" / "s1" / "verify-ran").exists()
    events = read_trace(home / "runs" / "s1" / "round-1.jsonl")
    end = [e for e in events if e["event"] == "agent_end"]
    assert end and end[0]["stop_reason"] == reason
    assert sum(1 for e in events if e["event"] == "tool_result") == tools
    if reason == "max_turns":  # work done before the stop is kept on the branch
        assert git(target_repo, "show", "hero/s1:one.txt") == "one\n"


# --------------------------------------------------------------------------- 6. model errors


@pytest.mark.slow
@pytest.mark.parametrize(
    ("first", "note"),
    [
        (HttpError(429, "slow down", {"Retry-After": "1"}), "HTTP 429; retry 1 in 1.0 s"),
        (HttpError(500, "boom"), "HTTP 500; retry 1"),
        (Drop(), "connection failed"),
    ],
    ids=["429-retry-after", "500", "dropped-connection"],
)
def test_transient_model_error_is_retried(
    scripted,
    make_home,
    write_story,
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
    first: Answer,
    note: str,
) -> None:
    script = [first, *good_worker(), verdict(ac=SUB_AC)]
    model = scripted(script)
    home = make_home(model)  # backoff at most 0.05 s: a longer wait can only be Retry-After
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story, "-v") == 0
    err = capsys.readouterr().err
    assert note in err
    assert model.remaining == 0 and len(model.requests) == len(script)
    state = load_state(home)
    assert state["status"] == "passed"
    assert state["usage"]["llm_calls"] == len(script) - 1  # failed attempt not counted
    assert state["rounds"][0]["worker"]["turns"] == 3
    # the retry repeats the same request
    assert model.requests[0].body["messages"] == model.requests[1].body["messages"]
    if isinstance(first, HttpError) and "Retry-After" in first.headers:
        # Retry-After (1 s) was honoured, not the 0.01 s backoff
        gap = model.requests[1].received_at - model.requests[0].received_at
        assert gap >= 0.9


def test_non_retryable_model_error_pauses_at_once(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A request the endpoint refuses refuses every story alike: not this story's error.
    It is left resumable, exit 2 (the user fixes the provider), naming provider and cause."""
    model = scripted([HttpError(400, "BAD-REQUEST-DETAIL")])
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    assert run_hero(home, story) == 2
    assert "model provider 'scripted' refuses hero's requests (HTTP 400)" in (
        capsys.readouterr().err
    )
    state = load_state(home)
    assert state["status"] == "interrupted" and state["error"] == ""
    outage = state["outage"]
    assert (outage["provider"], outage["kind"], outage["reason"]) == (
        "scripted",
        "permanent",
        "HTTP 400",
    )
    assert "BAD-REQUEST-DETAIL" in outage["error"]
    assert len(model.requests) == 1
    assert state["rounds"] == []


@pytest.mark.slow
def test_retries_exhausted_then_resume(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failing = {"on": True, "served": 0}
    inner = policy(
        {
            1: good_worker("round-1"),
            2: [call("bash", command="echo fixed > fixed.txt"), text("ok")],
        },
        {1: verdict("CHANGES_REQUESTED", "ROUND1-FEEDBACK", ac=SUB_AC), 2: verdict(ac=SUB_AC)},
    )

    def handler(body: dict) -> Answer:
        if failing["on"] and not is_review(body) and worker_round(body) == 2:
            failing["served"] += 1
            return HttpError(503, "overloaded")
        return inner(body)

    model = scripted(handler)
    home = make_home(model)  # llm_max_attempts: 3
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story, "--json") == 75  # EX_TEMPFAIL: try again later
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "interrupted" and out["error"] is None
    assert "gave up after 3 attempts" in out["outage"]["error"]
    state = load_state(home)
    assert state["status"] == "interrupted"  # paused on the provider, not in error
    assert state["outage"]["kind"] == "transient" and state["outage"]["reason"] == "HTTP 503"
    assert [r["round"] for r in state["rounds"]] == [1]
    assert failing["served"] == 3
    calls_before = state["usage"]["llm_calls"]
    assert calls_before == 4  # 3 worker turns + 1 review in round 1
    round1_sha = git(target_repo, "rev-parse", "hero/s1").strip()
    assert story.read_text().count("### Round 1") == 1

    failing["on"] = False
    n_before = len(model.requests)
    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed" and state["error"] == ""
    assert "outage" not in state  # the pause is over
    assert [r["round"] for r in state["rounds"]] == [1, 2]
    assert state["runs"] == 2
    assert state["usage"]["llm_calls"] == calls_before + 3  # usage carried over
    # only round 2 ran again, with round 1's feedback
    rerun = [r.body for r in model.requests[n_before:]]
    assert all(is_review(b) or worker_round(b) == 2 for b in rerun)
    assert "ROUND1-FEEDBACK" in task_text([b for b in rerun if not is_review(b)][0])
    subprocess.run(
        ["git", "merge-base", "--is-ancestor", round1_sha, "hero/s1"], cwd=target_repo, check=True
    )
    assert "fixed.txt" in git(target_repo, "ls-tree", "--name-only", "hero/s1")
    done = (home / "done" / "s1.md").read_text()
    assert done.count("### Round 1") == 1 and "### Round 2" not in done


# --------------------------------------------------------------------------- 7. bad tool calls


@pytest.mark.slow
def test_malformed_arguments_and_unknown_tool(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    raw = '{"path": "calc/oops.py", "content": "unterminated'
    worker = [
        Reply(tool_calls=(ToolCall("write_file", raw),)),
        Reply(tool_calls=(ToolCall("frobnicate", {"x": 1}),)),
        Reply(tool_calls=(ToolCall("write_file", ["not", "an", "object"]),)),  # type: ignore[arg-type]
        *good_worker(),
    ]
    model = scripted(policy(worker, verdict(ac=SUB_AC)))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    assert load_state(home)["status"] == "passed"
    w = worker_requests(model)
    # the malformed call is sent back with {} for its arguments (vLLM and llama.cpp's
    # server parse them: malformed, they refuse every later request), followed by a clear
    # tool error that quotes what the model sent
    assistant = [m for m in w[1]["messages"] if m["role"] == "assistant"][0]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    bad_json = tool_messages(w[1])[-1]
    assert "tool 'write_file'" in bad_json and "not valid JSON" in bad_json
    assert f"received {len(raw)} characters: {raw!r}" in bad_json
    assert "expected a JSON object" in bad_json and "path" in bad_json and "content" in bad_json
    unknown = tool_messages(w[2])[-1]
    assert unknown == (
        "unknown tool 'frobnicate'; available tools: "
        "bash, read_file, write_file, edit_file, grep, find, ls"
    )
    not_object = tool_messages(w[3])[-1]
    assert "tool 'write_file'" in not_object and "must be a JSON object" in not_object
    errors = [
        e
        for e in read_trace(home / "runs" / "s1" / "round-1.jsonl")
        if e["event"] == "tool_result" and e["is_error"]
    ]
    assert [e["name"] for e in errors] == ["write_file", "frobnicate", "write_file"]
    assert "calc/oops.py" not in git(target_repo, "ls-tree", "-r", "--name-only", "hero/s1")


# --------------------------------------------------------------------------- 8. path escapes


@pytest.mark.slow
def test_path_escapes_are_refused(
    scripted, make_home, write_story, target_repo: Path, tmp_path: Path
) -> None:
    outside_abs = tmp_path / "abs-outside.txt"
    worker = [
        call("read_file", path="../../etc/passwd"),
        call("read_file", path="../SECRET-NEIGHBOUR.txt"),
        call("write_file", path="../outside.txt", content="escaped"),
        call("write_file", path=str(outside_abs), content="escaped"),
        call("bash", command="ln -s ../SECRET-NEIGHBOUR.txt link.txt"),
        call("read_file", path="link.txt"),
        call("edit_file", path="link.txt", old_string="TOP", new_string="X"),
        call("write_file", path=".git/hooks/pre-commit", content="#!/bin/sh\n"),
        call("bash", command="rm link.txt"),
        *good_worker(),
    ]
    model = scripted(policy(worker, verdict(ac=SUB_AC)))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    secret = home / "worktrees" / "SECRET-NEIGHBOUR.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("TOP-SECRET-CONTENT\n")
    home_before = sorted(p for p in home.rglob("*") if "worktrees/s1" not in p.as_posix())

    assert run_hero(home, story) == 0
    results = tool_messages(worker_requests(model)[-1])
    assert "path '../../etc/passwd' is outside the worktree" in results[0]
    assert "path '../SECRET-NEIGHBOUR.txt' is outside the worktree" in results[1]
    assert "path '../outside.txt' is outside the worktree" in results[2]
    assert "is outside the worktree" in results[3]
    assert "outside the worktree" in results[5] and "outside the worktree" in results[6]
    assert ".git" in results[7] and "not allowed" in results[7]
    assert not any("TOP-SECRET-CONTENT" in r or "root:" in r for r in results)

    assert not (home / "worktrees" / "outside.txt").exists()
    assert not outside_abs.exists()
    assert secret.read_text() == "TOP-SECRET-CONTENT\n"
    # nothing new outside the worktree but hero's own records
    home_after = sorted(p for p in home.rglob("*") if "worktrees/s1" not in p.as_posix())
    new = {p.relative_to(home).as_posix() for p in set(home_after) - set(home_before)}
    assert all(p.split("/")[0] in ("runs", "done", "memory", "envs") for p in new), new
    assert not (target_repo / ".git" / "worktrees" / "s1" / "hooks").exists()


# --------------------------------------------------------------------------- 9. rescue commit


@pytest.mark.slow
def test_rescue_commit_of_uncommitted_work(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    worker = [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("write_file", path="notes/new_file.txt", content="left uncommitted\n"),
        text("Done, but I forgot to commit."),
    ]
    model = scripted(policy(worker, verdict(ac=SUB_AC)))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    log = git(target_repo, "log", "--format=%s|%an", "main..hero/s1").splitlines()
    assert log == ["hero: commit work left uncommitted in round 1 (s1)|hero"]
    assert git(target_repo, "show", "hero/s1:notes/new_file.txt") == "left uncommitted\n"
    assert git(target_repo, "show", "hero/s1:calc/__init__.py") == SUB_IMPL
    assert state["head_sha"] == git(target_repo, "rev-parse", "hero/s1").strip()
    assert state["rounds"][0]["head_sha"] == state["head_sha"]
    assert git(home / "worktrees" / "s1", "status", "--porcelain") == ""
    # the reviewer saw the rescued work
    rv = task_text(review_requests(model)[0])
    assert "notes/new_file.txt" in rv and "+left uncommitted" in rv


# --------------------------------------------------------------------------- 10. key hidden


@pytest.mark.slow
@pytest.mark.parametrize("source", ["api_key_env", "config.local.yaml"])
def test_worker_bash_does_not_see_the_provider_key(
    scripted,
    make_home,
    write_story,
    target_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
) -> None:
    secret = "sk-e2e-secret-9f8e7d6c5b4a"
    monkeypatch.setenv("SOME_OTHER_COPY", secret)  # the same value under another name
    monkeypatch.setenv("HARMLESS_E2E_VAR", "visible-value")
    worker = [call("bash", command="env; echo ENV-DONE"), *good_worker()]
    model = scripted(policy(worker, APPROVE))
    # the user passes these names on: the harmless one is seen, the key's copy is not
    home = make_home(model, pass_env=["HARMLESS_E2E_VAR", "SOME_OTHER_COPY", "TEST_HERO_KEY"])
    if source == "api_key_env":
        monkeypatch.setenv("TEST_HERO_KEY", secret)
        provider = home / "config" / "providers" / "scripted.yaml"
        provider.write_text(provider.read_text() + "api_key_env: TEST_HERO_KEY\n")
    else:
        (home / "config.local.yaml").write_text(f"keys:\n  scripted: {secret}\n")
    # the verifier's commands do not see it either (a tail of the key, not the key itself)
    story = write_story(home, "s1", verify=[*VERIFY_SUB, "! env | grep -q 9f8e7d6c5b4a"])

    assert run_hero(home, story) == 0
    # the key was used to call the model ...
    assert all(r.headers.get("authorization") == f"Bearer {secret}" for r in model.requests)
    # ... but the worker's shell never saw it
    env_out = tool_messages(worker_requests(model)[1])[0]
    assert env_out.startswith("exit code: 0") and "ENV-DONE" in env_out
    assert "HARMLESS_E2E_VAR=visible-value" in env_out  # env really was printed
    assert secret not in env_out
    assert "TEST_HERO_KEY" not in env_out and "SOME_OTHER_COPY" not in env_out
    for body in (r.body for r in model.requests):
        assert secret not in json.dumps(body)
    for path in (home / "runs").rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


# --------------------------------------------------------------------------- 11. reviewer


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer", "malformed", "words"),
    [
        (text("Looks good to me, ship it!"), True, "was not the JSON verdict"),
        (text('{"verdict": "LGTM", "summary": "fine"}'), True, "no valid verdict"),
        (
            verdict(
                "APPROVED",
                "Fine.",
                comments=[
                    {
                        "file": "calc/__init__.py",
                        "line": 4,
                        "severity": "blocker",
                        "comment": "BLOCKER-COMMENT: sub is wrong",
                    }
                ],
                ac=SUB_AC,
            ),
            False,
            "1 blocker comment(s)",
        ),
        (
            verdict("APPROVED", "Fine.", satisfied=False, ac=SUB_AC),
            False,
            "1 unmet acceptance criterion",
        ),
    ],
    ids=["prose", "bad-verdict", "approved-with-blocker", "approved-unmet-ac"],
)
def test_reviewer_answer_that_is_not_an_approval(
    scripted,
    make_home,
    write_story,
    target_repo: Path,
    answer: Reply,
    malformed: bool,
    words: str,
) -> None:
    model = scripted(policy(good_worker(), answer))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB, max_retries=1)

    assert run_hero(home, story) == 1
    state = load_state(home)
    assert state["status"] == "gave_up"
    review = state["rounds"][0]["review"]
    assert review["verdict"] == "CHANGES_REQUESTED"
    assert review["short_circuited"] is False
    assert review["malformed"] is malformed
    assert words in review["summary"]
    assert len(review_requests(model)) == 1
    assert story.is_file() and not (home / "done").joinpath("s1.md").exists()
    assert "### Round 1" in story.read_text()
    if "blocker" in words:
        assert "BLOCKER-COMMENT" in story.read_text()


# --------------------------------------------------------------------------- 12. config errors


def _drop_worker_block(home: Path) -> None:
    roles = home / "config" / "roles.yaml"
    roles.write_text(roles.read_text().replace("worker:\n  provider: scripted\n", ""))


def _add_unknown_knob(home: Path) -> None:
    roles = home / "config" / "roles.yaml"
    roles.write_text("max_retires: 2\n" + roles.read_text())


def _key_env_missing(home: Path) -> None:
    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + "api_key_env: HERO_E2E_UNSET_KEY\n")


def _bad_target_repo(home: Path) -> None:
    roles = home / "config" / "roles.yaml"
    lines = [ln for ln in roles.read_text().splitlines() if not ln.startswith("target_repo")]
    roles.write_text("\n".join([f"target_repo: {home / 'nope'}", *lines]) + "\n")


@pytest.mark.parametrize(
    ("breaker", "words"),
    [
        (_drop_worker_block, ["config/roles.yaml", "worker", "not configured"]),
        (_add_unknown_knob, ["config/roles.yaml", "max_retires"]),
        (_key_env_missing, ["config/providers/scripted.yaml", "api_key_env", "HERO_E2E_UNSET_KEY"]),
        (_bad_target_repo, ["config/roles.yaml", "target_repo"]),
    ],
    ids=["no-worker-role", "unknown-key", "key-env-missing", "bad-target-repo"],
)
def test_configuration_error_exits_2(
    scripted,
    make_home,
    write_story,
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    breaker: Callable[[Path], None],
    words: list[str],
) -> None:
    monkeypatch.delenv("HERO_E2E_UNSET_KEY", raising=False)
    model = scripted(policy(good_worker(), verdict(ac=SUB_AC)))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    breaker(home)

    assert run_hero(home, story) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err
    for word in words:
        assert word in err, (word, err)
    assert model.requests == []
    assert not (home / "runs" / "state" / "s1.json").exists()
    assert branches(target_repo) == ["main"]


@pytest.mark.parametrize(
    ("front", "field"),
    [
        ({"priority": "urgent"}, "priority"),
        ({"max_retries": 0}, "max_retries"),
        ({"verify": {"unit": []}}, "verify"),
        ({"colour": "blue"}, "colour"),
    ],
    ids=["priority", "max_retries", "verify", "unknown-field"],
)
def test_invalid_story_exits_2(
    scripted,
    make_home,
    write_story,
    target_repo: Path,
    capsys: pytest.CaptureFixture[str],
    front: dict,
    field: str,
) -> None:
    model = scripted(policy(good_worker(), verdict(ac=SUB_AC)))
    home = make_home(model)
    story = write_story(home, "s1", **front)

    assert run_hero(home, story) == 2
    err = capsys.readouterr().err
    assert "invalid story" in err and str(story) in err and f": {field}:" in err, err
    assert model.requests == []
    assert branches(target_repo) == ["main"]
    assert not (home / "runs" / "state" / "s1.json").exists()


def test_missing_id_and_missing_file_exit_2(
    scripted, make_home, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = scripted(policy(good_worker(), verdict(ac=SUB_AC)))
    home = make_home(model)
    story = home / "inbox" / "noid.md"
    story.write_text("---\ntitle: No id here\n---\n\n## Goal\nx\n")
    assert run_hero(home, story) == 2
    err = capsys.readouterr().err
    assert str(story) in err and ": id:" in err

    assert run_hero(home, home / "inbox" / "missing.md") == 2
    assert "missing.md" in capsys.readouterr().err
    assert model.requests == []


def test_unreadable_state_exits_2_naming_the_file(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = scripted(policy(good_worker(), APPROVE))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    state_file = home / "runs" / "state" / "s1.json"
    state_file.parent.mkdir(parents=True)
    state_file.write_text("{not json")

    assert run_hero(home, story) == 2
    err = capsys.readouterr().err
    assert str(state_file) in err and "move it aside" in err
    assert model.requests == [] and branches(target_repo) == ["main"]
    assert state_file.read_text() == "{not json"  # left for the user to look at


# --------------------------------------------------------------------------- 13. rerun


def _attempt_handler(attempt: dict[str, int]) -> Callable[[dict], Answer]:
    def handler(body: dict) -> Answer:
        if is_review(body):
            if attempt["n"] == 2:
                return verdict(ac=SUB_AC)
            return verdict("CHANGES_REQUESTED", f"ATTEMPT-{attempt['n']}-FEEDBACK", ac=SUB_AC)
        plan = [
            call("bash", command=f"echo {attempt['n']} > attempt-{attempt['n']}.txt"),
            call("bash", command=COMMIT.format(msg=f"attempt-{attempt['n']}")),
            text("done"),
        ]
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


@pytest.mark.slow
def test_rerun_without_state_keeps_old_branch_aside(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    attempt = {"n": 1}
    model = scripted(_attempt_handler(attempt))
    home = make_home(model)
    story = write_story(home, "s1", verify=["true"], max_retries=1)

    assert run_hero(home, story) == 1
    assert load_state(home)["status"] == "gave_up"
    old_sha = git(target_repo, "rev-parse", "hero/s1").strip()
    # a user's leftover edit in the old worktree must not be lost either
    (home / "worktrees" / "s1" / "MANUAL-EDIT.txt").write_text("mine\n")
    (home / "runs" / "state" / "s1.json").unlink()

    attempt["n"] = 2
    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    assert [r["round"] for r in state["rounds"]] == [1]
    assert state["runs"] == 1

    prev = [b for b in branches(target_repo) if b.startswith("hero/s1-prev-")]
    assert len(prev) == 1, branches(target_repo)
    kept = prev[0]
    assert re.fullmatch(r"hero/s1-prev-\d{8}-\d{6}(-\d+)?", kept)
    kept_log = git(target_repo, "log", "--format=%s", f"main..{kept}").splitlines()
    assert "attempt-1" in kept_log
    subprocess.run(
        ["git", "merge-base", "--is-ancestor", old_sha, kept], cwd=target_repo, check=True
    )
    assert git(target_repo, "show", f"{kept}:MANUAL-EDIT.txt") == "mine\n"
    # the new branch starts afresh from main
    assert git(target_repo, "log", "--format=%s", "main..hero/s1").splitlines() == ["attempt-2"]
    assert state["base_sha"] == git(target_repo, "rev-parse", "main").strip()
    assert "attempt-1.txt" not in git(target_repo, "ls-tree", "--name-only", "hero/s1")


@pytest.mark.slow
def test_rerun_after_gave_up_continues_the_branch(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    """docs/run.md: a story that gave up gets a fresh budget of rounds on the same branch, round
    numbers going on from where they stopped."""
    attempt = {"n": 1}
    model = scripted(_attempt_handler(attempt))
    home = make_home(model)
    story = write_story(home, "s1", verify=["true"], max_retries=1)

    assert run_hero(home, story) == 1
    assert load_state(home)["status"] == "gave_up"
    old_sha = git(target_repo, "rev-parse", "hero/s1").strip()
    (home / "worktrees" / "s1" / "MANUAL-EDIT.txt").write_text("mine\n")

    attempt["n"] = 2
    n_before = len(model.requests)
    assert run_hero(home, story) == 0
    state = load_state(home)
    assert state["status"] == "passed"
    assert [r["round"] for r in state["rounds"]] == [1, 2]
    assert state["rounds"][0]["review"]["summary"] == "ATTEMPT-1-FEEDBACK"
    assert state["runs"] == 2
    assert not [b for b in branches(target_repo) if b.startswith("hero/s1-prev-")]
    subprocess.run(
        ["git", "merge-base", "--is-ancestor", old_sha, "hero/s1"], cwd=target_repo, check=True
    )
    files = git(target_repo, "ls-tree", "--name-only", "hero/s1").split()
    assert {"attempt-1.txt", "attempt-2.txt", "MANUAL-EDIT.txt"} <= set(files)
    task = task_text([r.body for r in model.requests[n_before:] if not is_review(r.body)][0])
    assert "This is round 2 of at most 2." in task
    assert "ATTEMPT-1-FEEDBACK" in task
    done = (home / "done" / "s1.md").read_text()
    assert done.count("### Round 1") == 1 and "### Round 2" not in done


# --------------------------------------------------------------------------- more runs


@pytest.mark.slow
def test_rerun_of_a_passed_story_does_nothing(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = scripted(policy(good_worker(), APPROVE))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    assert run_hero(home, story) == 0
    before = load_state(home)
    n = len(model.requests)
    capsys.readouterr()

    assert run_hero(home, home / "done" / "s1.md", "-v", "--json") == 0
    captured = capsys.readouterr()
    assert "already passed" in captured.err
    assert json.loads(captured.out)["status"] == "passed"
    assert len(model.requests) == n
    after = load_state(home)
    assert after["rounds"] == before["rounds"] and after["runs"] == before["runs"]
    assert after["head_sha"] == git(target_repo, "rev-parse", "hero/s1").strip()


@pytest.mark.slow
def test_another_file_with_the_id_of_a_passed_story_is_refused(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new file reusing the id of a story that passed is not "passed": nothing runs, and
    hero says which id, on which branch, from which file, with exit 2 (as `hero watch`
    refuses it). The very file that passed (now in done/) still says passed, exit 0."""
    model = scripted(policy(good_worker(), APPROVE))
    home = make_home(model)
    write_story(home, "s1", verify=VERIFY_SUB)
    assert run_hero(home, home / "inbox" / "s1.md") == 0
    before = load_state(home)
    done = home / "done" / "s1.md"
    assert before["story_path"] == str(done)
    n = len(model.requests)
    capsys.readouterr()

    other = write_story(home, "s1", verify=["true"], body="## Goal\nSomething else.\n")
    assert other.read_text() != done.read_text()
    assert run_hero(home, other, "--json") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err
    assert str(other) in err and "'s1' already passed" in err
    assert "on branch hero/s1" in err and str(done) in err
    assert len(model.requests) == n
    assert load_state(home) == before
    assert other.is_file()

    assert run_hero(home, done, "--json") == 0  # the file it passed with: as before
    assert json.loads(capsys.readouterr().out)["status"] == "passed"
    assert len(model.requests) == n


@pytest.mark.slow
def test_base_ref_that_names_no_commit_ends_in_error_once(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A story that cannot start ends in `error` with a one-line reason, exit 1 like any
    error; nothing is made in the repository; `hero status` shows the reason."""
    model = scripted(policy(good_worker(), APPROVE))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB, base_ref="no-such-branch")

    assert run_hero(home, story) == 1
    out = capsys.readouterr().out
    reason = f"base_ref 'no-such-branch' is not a branch, tag or commit in {target_repo}"
    assert f"error: {reason}" in out and "Traceback" not in out
    state = load_state(home)
    assert state["status"] == "error" and state["error"] == reason
    assert state["runs"] == 1 and state["rounds"] == []
    assert model.requests == [] and branches(target_repo) == ["main"]
    assert not (home / "runs" / "s1" / "error.log").exists()  # not a bug: no traceback

    assert main(["status", "--json", "--home", str(home)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["stories"]
    assert (row["status"], row["error"]) == ("error", reason)

    # once the branch exists, the same story runs
    git(target_repo, "branch", "no-such-branch", "main")
    assert run_hero(home, story) == 0
    assert load_state(home)["base_ref"] == "no-such-branch"


@pytest.mark.slow
def test_story_run_by_another_process_exits_2(
    scripted, make_home, write_story, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import fcntl

    model = scripted(policy(good_worker(), APPROVE))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)
    lock = home / "runs" / "locks" / "s1.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert run_hero(home, story) == 2
    assert "being run by another hero process" in capsys.readouterr().err
    assert model.requests == []
    assert not (home / "runs" / "state" / "s1.json").exists()
    assert run_hero(home, story) == 0  # once the other run is gone


@pytest.mark.slow
def test_worker_switching_branch_does_not_pass_on_an_empty_branch(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    worker = [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command="git checkout -q -b rogue && " + COMMIT.format(msg="add-sub")),
        text("Added calc.sub."),
    ]
    model = scripted(policy(worker, APPROVE))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    run_hero(home, story)
    state = load_state(home)
    branch = git(target_repo, "rev-parse", "hero/s1").strip()
    # Whatever hero does about it (bring the commits back, or refuse), it must not report
    # hero/s1 "at" a commit that is not on hero/s1, nor pass a branch without the work.
    assert state["head_sha"] == branch
    if state["status"] == "passed":
        assert git(target_repo, "show", "hero/s1:calc/__init__.py") == SUB_IMPL


@pytest.mark.slow
def test_worker_commits_elsewhere_fail_the_round_and_stay_on_their_branch(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    """Commits that do not build on hero/<id> are not taken over, nor lost."""
    worker = [
        call("write_file", path="NOTES.md", content="notes\n"),
        call("bash", command=COMMIT.format(msg="notes-on-story-branch")),
        call("bash", command="git checkout -q -b elsewhere main"),
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command=COMMIT.format(msg="sub-on-main")),
        text("Added calc.sub."),
    ]
    model = scripted(policy(worker, APPROVE))
    home = make_home(model, max_retries=1)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 1
    state = load_state(home)
    review = state["rounds"][0]["review"]
    assert review["short_circuited"] is True
    assert "elsewhere" in review["summary"]
    assert state["head_sha"] == git(target_repo, "rev-parse", "hero/s1").strip()
    # the branch the worker made is the user's namespace: removed, its commits kept by hero
    assert "elsewhere" not in branches(target_repo)
    (stray,) = [b for b in branches(target_repo) if b.startswith("hero/s1-stray-")]
    assert stray in review["summary"]
    assert git(target_repo, "show", f"{stray}:calc/__init__.py") == SUB_IMPL
    assert "sub-on-main" in git(target_repo, "log", "--format=%s", stray)
    assert "notes-on-story-branch" in git(target_repo, "log", "--format=%s", "hero/s1")
    worktree = home / "worktrees" / "s1"
    assert git(worktree, "symbolic-ref", "--short", "HEAD").strip() == "hero/s1"
