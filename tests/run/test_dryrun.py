"""`hero run STORY --dry-run`: the real CLI in a child process against a home whose model is
the scripted server on loopback. The dry run makes no request and changes nothing on disk
(a snapshot of the home and of the target repository, .git included, is the same after),
and the request it prints is the one the real run then sends first."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import PY, commit_once, is_review, verdict

from hero.llm.scripted import Reply, call, text
from hero.state import RunState, Status, save_state

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

KEY = "sk-dryrun-9f8e7d6c5b4a3210"
KEY_ENV = "HERO_TEST_DRYRUN_KEY"
#: The interpreter by its path: a bare `python` may be a ~/.pyenv shim, under the home, which
#: the sandbox does not show (docs/safety.md).
VERIFY = [f"{PY} -m unittest -q"]
RUN_TIMEOUT_S = 120.0  # a generous "did not hang" bound, not a speed check


def hero(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hero", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        cwd=home,
        env={**os.environ, **(env or {})},
    )


def snapshot(*roots: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under ``roots`` (the roots too) with its type, mode, size, mtime and the
    hash of a file's content or a link's target: any change on disk changes it."""
    found: dict[str, tuple[Any, ...]] = {}
    for root in roots:
        for here, dirs, files in os.walk(root):
            for name in [".", *dirs, *files]:
                path = os.path.normpath(os.path.join(here, name))
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode):
                    with open(path, "rb") as fh:
                        what = hashlib.sha256(fh.read()).hexdigest()
                elif stat.S_ISLNK(info.st_mode):
                    what = os.readlink(path)
                else:
                    what = ""
                found[path] = (info.st_mode, info.st_size, info.st_mtime_ns, what)
    return found


def dry_run_json(home: Path, story: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = hero(home, "run", str(story), "--dry-run", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


def test_dry_run_sends_nothing_changes_nothing_and_shows_the_first_request(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    (target_repo / "AGENTS.md").write_text("Run the tests before you commit.\n")
    (target_repo / "CLAUDE.md").symlink_to("AGENTS.md")
    (target_repo / ".roo" / "rules").mkdir(parents=True)
    (target_repo / ".roo" / "rules" / "host.md").symlink_to("/etc/passwd")  # leads out
    git(target_repo, "add", "-A")
    git(target_repo, "commit", "-q", "-m", "rules")

    def answer(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "Looks good.")
        if sum(1 for m in body["messages"] if m["role"] == "assistant") == 0:
            return call("bash", command=commit_once("sub"))
        return text("Done.")

    model = scripted(answer)
    home = make_home(model, max_retries=3)
    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + f"api_key_env: {KEY_ENV}\n")
    story = write_story(home, "s1", verify=VERIFY, body=f"## Goal\nAdd sub. Not {KEY}.\n")
    env = {KEY_ENV: KEY}
    before = snapshot(home, target_repo)

    plan = dry_run_json(home, story, env)
    text_run = hero(home, "run", str(story), "--dry-run", env=env)

    assert text_run.returncode == 0, text_run.stderr
    assert model.requests == []
    assert snapshot(home, target_repo) == before
    # what it says: where, the checks, the models, the budgets
    start = plan["start"]
    assert start["action"] == "fresh"
    assert start["branch"] == "hero/s1"
    assert start["base_ref"] == "main"
    assert start["base_sha"] == git(target_repo, "rev-parse", "main").strip()
    assert start["worktree"] == str(home / "worktrees" / "s1")
    assert start["max_rounds"] == 3
    assert plan["verify"]["tiers"] == [{"name": "verify", "commands": VERIFY}]
    assert plan["verify"]["timeout_s"] > 0
    assert plan["roles"]["worker"]["key_source"] == f"${KEY_ENV}"
    assert plan["budgets"]["worker"]["max_turns"] == 100
    request = plan["request"]
    assert request["url"] == model.base_url + "/chat/completions"
    assert request["tokens_estimate"] > 0
    task = request["body"]["messages"][1]["content"]
    assert "Run the tests before you commit." in task
    assert "(the same file as AGENTS.md)" in task
    assert "### .roo/rules/host.md\n[not read:" in task and "root:" not in task
    # the key is never printed, in either form
    assert KEY not in json.dumps(plan) and KEY not in text_run.stdout + text_run.stderr
    assert "Add sub. Not [redacted]" in task
    assert "worker's first request" in text_run.stdout
    assert "would start afresh: round 1 of 3 on hero/s1" in text_run.stdout

    # the real run's first request is the one the dry run printed
    done = hero(home, "run", str(story), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    first = model.requests[0].body
    assert first["messages"] == request["body"]["messages"]
    assert first["tools"] == request["body"]["tools"]
    assert {k: v for k, v in first.items() if k not in ("messages", "tools")} == {
        k: v for k, v in request["body"].items() if k not in ("messages", "tools")
    }

    # a story that passed: nothing to do, still nothing sent or changed
    sent, before = len(model.requests), snapshot(home, target_repo)
    done_story = home / "done" / "s1.md"
    plan = dry_run_json(home, done_story if done_story.exists() else story, env)
    assert plan["start"]["action"] == "passed" and plan["request"] is None
    assert len(model.requests) == sent
    assert snapshot(home, target_repo) == before


def test_a_story_that_would_resume_says_its_round_and_feedback(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("CHANGES_REQUESTED", "Add a docstring to sub.")
        if sum(1 for m in body["messages"] if m["role"] == "assistant") == 0:
            return call("bash", command=commit_once("sub"))
        return text("Done.")

    model = scripted(answer)
    home = make_home(model, max_retries=1)
    story = write_story(home, "s1", verify=VERIFY, max_retries=1)
    done = hero(home, "run", str(story))
    assert done.returncode == 1, done.stdout + done.stderr  # gave up after its one round
    story.write_text(story.read_text() + "\nOne more thing.\n")  # edited: it may run again
    sent = len(model.requests)
    before = snapshot(home, target_repo)

    plan = dry_run_json(home, story)

    assert len(model.requests) == sent
    assert snapshot(home, target_repo) == before
    start = plan["start"]
    assert start["action"] == "resume"
    assert (start["round"], start["rounds_done"], start["max_rounds"]) == (2, 1, 2)
    assert start["worktree_exists"]
    task = plan["request"]["body"]["messages"][1]["content"]
    assert "## Feedback on round 1" in task and "Add a docstring to sub." in task
    assert "This is round 2 of at most 2." in task
    assert plan["budgets"]["spent"]["tokens"] > 0
    shown = hero(home, "run", str(story), "--dry-run")
    assert "would resume round 2 of 2 (1 done) on hero/s1" in shown.stdout

    done = hero(home, "run", str(story))
    assert done.returncode == 1, done.stdout + done.stderr
    first = model.requests[sent].body
    assert first["messages"] == plan["request"]["body"]["messages"]


def test_an_invalid_or_refused_story_exits_2_and_changes_nothing(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    model = scripted([])
    home = make_home(model)
    bad = home / "inbox" / "bad.md"
    bad.write_text("---\nid: [not, an, id]\n---\nbody\n")
    later = write_story(home, "s2", verify=VERIFY, depends_on=["s1"])
    nowhere = write_story(home, "s3", verify=VERIFY, base_ref="no-such-branch")
    before = snapshot(home, target_repo)

    for story, words in (
        (bad, "bad.md"),
        (later, "cannot run yet"),
        (nowhere, "would not start: base_ref 'no-such-branch' is not a branch"),
    ):
        done = hero(home, "run", str(story), "--dry-run", "--json")
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("hero: ") and words in lines[0], lines

    assert model.requests == []
    assert snapshot(home, target_repo) == before


def test_a_usd_budget_on_a_model_without_prices_would_not_start(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    model = scripted([])
    home = make_home(model, max_round_cost_usd=1)
    story = write_story(home, "s1", verify=VERIFY)
    before = snapshot(home, target_repo)

    done = hero(home, "run", str(story), "--dry-run")

    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        f"hero: {story}: would not start: max_round_cost_usd is set, but the worker's and "
        "the reviewer's model 'scripted-test' (provider 'scripted') has no input_usd_per_mtok "
        "or output_usd_per_mtok: hero cannot count the dollars it spends. To run, set "
        "input_usd_per_mtok and output_usd_per_mtok in config/providers/scripted.yaml (0 for "
        "a model that costs nothing), or take max_round_cost_usd out of config/roles.yaml\n"
    )
    assert model.requests == []
    assert snapshot(home, target_repo) == before

    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + "input_usd_per_mtok: 1\noutput_usd_per_mtok: 2\n")
    done = hero(home, "run", str(story), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["budgets"]["limits"]["max_round_cost_usd"] == 1


def test_a_story_another_process_is_running_exits_2_and_leaves_that_run_alone(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    asked, go_on = threading.Event(), threading.Event()

    def answer(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "Looks good.")
        if sum(1 for m in body["messages"] if m["role"] == "assistant") == 0:
            asked.set()
            go_on.wait(RUN_TIMEOUT_S)  # the real run waits in its first request
            return call("bash", command=commit_once("sub"))
        return text("Done.")

    model = scripted(answer)
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY)
    real = subprocess.Popen(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert asked.wait(RUN_TIMEOUT_S), "the real run never asked the model"
        done = hero(home, "run", str(story), "--dry-run")
        assert done.returncode == 2, done.stdout + done.stderr
        assert "being run by another hero process" in done.stderr
        assert len(model.requests) == 1
    finally:
        go_on.set()
        out, _ = real.communicate(timeout=RUN_TIMEOUT_S)
    assert real.returncode == 0, out


def test_a_story_on_two_dependencies_makes_no_merge_commit(
    scripted, make_home, write_story, target_repo: Path
) -> None:
    """The start merges the dependencies' heads into a new commit: the dry run only says so."""
    model = scripted([])
    home = make_home(model)
    for dep in ("a", "b"):
        git(target_repo, "checkout", "-q", "-b", f"hero/{dep}", "main")
        (target_repo / f"{dep}.txt").write_text(f"{dep}\n")
        git(target_repo, "add", "-A")
        git(target_repo, "commit", "-q", "-m", dep)
        head = git(target_repo, "rev-parse", "HEAD").strip()
        save_state(
            home,
            RunState(id=dep, status=Status.PASSED, branch=f"hero/{dep}", head_sha=head),
        )
    git(target_repo, "checkout", "-q", "main")
    story = write_story(home, "c", verify=VERIFY, depends_on=["a", "b"])
    before = snapshot(home, target_repo)

    plan = dry_run_json(home, story)

    assert model.requests == []
    assert snapshot(home, target_repo) == before
    start = plan["start"]
    assert (start["action"], start["base_ref"], start["base_sha"]) == (
        "fresh",
        "merge of hero/a, hero/b",
        "",
    )
    assert any("would make a merge commit of hero/a, hero/b" in n for n in start["notes"])
    task = plan["request"]["body"]["messages"][1]["content"]
    assert "- a (branch hero/a)\n- b (branch hero/b)" in task
