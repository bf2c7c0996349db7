"""End to end: stopping `hero run` (SIGINT, SIGTERM, SIGKILL) and running it again.

hero runs as a real child process (`python -m hero run ...`); the scripted model runs in
this test process on a thread, and hero's worker talks to it over loopback HTTP. The
worker's long `bash` command writes its background child's pid to a file in the worktree,
so the test knows when to strike and which process must not outlive the run.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import (
    Hero,
    alive,
    commit_once,
    is_ancestor,
    is_review,
    load_state,
    long_command,
    review_round,
    sha_of,
    step_of,
    task_text,
    verdict,
    wait_dead,
    worker_round,
)
from watch_support import Procs

from hero.llm.scripted import HttpError, ScriptedModel, call, text

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

START_TIMEOUT_S = 60.0  # generous "did not hang" bounds, not speed checks
STOP_TIMEOUT_S = 20.0
RUN_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------- helpers


# --------------------------------------------------------------------------- SIGINT / SIGTERM


def one_round_policy() -> Callable[[dict], Any]:
    plan = [
        call("bash", command=commit_once("before-interrupt")),
        call("bash", command=long_command("child.pid")),
        call("bash", command=commit_once("after-resume")),
        text("Done."),
    ]

    def handler(body: dict) -> Any:
        if is_review(body):
            return verdict("APPROVED", "Fine.")
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_interrupts_then_rerun_resumes(
    scripted: Callable[..., ScriptedModel],
    make_home,
    write_story,
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
    signum: int,
) -> None:
    model = scripted(one_round_policy())
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["test -f before-interrupt.txt"])
    worktree = home / "worktrees" / "s1"

    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    child = hero.wait_for_file(worktree / "child.pid")
    procs.append(child)
    assert alive(child)
    state = load_state(home)
    assert state["status"] == "running" and state["phase"] == "worker"
    before_sha = sha_of(home / "worktrees" / "s1", "before-interrupt")

    hero.proc.send_signal(signum)
    try:
        code = hero.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hero did not stop within {STOP_TIMEOUT_S} s of the signal:\n{hero.output()}")
    assert code == 130, hero.output()
    assert "interrupted" in hero.output()
    assert wait_dead(child), "the worker's background child outlived the interrupted run"

    state = load_state(home)
    assert state["status"] == "interrupted"
    assert state["rounds"] == []
    assert state["phase"] == ""
    assert state["current_round"] == 1
    assert state["runs"] == 1
    assert state["usage"]["llm_calls"] == len(model.requests) == 2  # saved on the way out
    assert [r.body for r in model.requests if is_review(r.body)] == []
    assert not (home / "done" / "s1.md").exists() and story.is_file()
    assert git(target_repo, "rev-parse", "hero/s1").strip() == before_sha

    # run again: round 1 again from the start, on the same branch, with the same commits
    n_before = len(model.requests)
    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    state = load_state(home)
    assert state["status"] == "passed"
    assert [r["round"] for r in state["rounds"]] == [1]
    assert state["runs"] == 2
    assert state["usage"]["llm_calls"] == len(model.requests)  # both runs' calls counted
    assert state["rounds"][0]["verify"]["passed"] is True
    assert is_ancestor(target_repo, before_sha, "hero/s1")
    subjects = git(target_repo, "log", "--format=%s", "main..hero/s1").splitlines()
    assert subjects.count("before-interrupt") == 1
    assert "after-resume" in subjects
    # the child.pid the killed command left behind was kept by the resume's rescue commit
    assert "hero: keep uncommitted work found on resume (s1)" in subjects
    rerun = [r.body for r in model.requests[n_before:]]
    assert {worker_round(b) for b in rerun if not is_review(b)} == {1}
    assert sum(1 for b in rerun if is_review(b)) == 1
    assert (home / "done" / "s1.md").is_file()


def test_sigint_while_waiting_for_the_model(
    scripted: Callable[..., ScriptedModel],
    make_home,
    write_story,
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    """A Ctrl-C during the model's retry wait (Retry-After) stops hero at once, too."""
    seen = tmp_path / "asked"

    def handler(body: dict) -> Any:
        seen.write_text("yes")
        return HttpError(429, "slow down", {"Retry-After": "60"})

    model = scripted(handler)
    home = make_home(model, llm_backoff_max_s=60, llm_max_attempts=5)
    story = write_story(home, "s1", verify=["true"])

    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not seen.exists() and time.monotonic() < deadline and hero.proc.poll() is None:
        time.sleep(0.05)
    assert seen.exists(), hero.output()
    time.sleep(0.3)  # let hero get into its 60 s wait
    hero.proc.send_signal(signal.SIGINT)
    try:
        code = hero.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hero did not stop within {STOP_TIMEOUT_S} s of SIGINT:\n{hero.output()}")
    assert code == 130, hero.output()
    state = load_state(home)
    assert state["status"] == "interrupted" and state["rounds"] == []
    assert len(model.requests) == 1


@pytest.mark.parametrize("phase", ["verify", "review"])
def test_sigint_in_later_phase_records_no_round(
    scripted: Callable[..., ScriptedModel],
    make_home,
    write_story,
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
    phase: str,
) -> None:
    """Ctrl-C while the verifier's command runs, or while the reviewer is thinking: the
    round is not recorded, nothing is left running, and the next run redoes the round."""
    asked = tmp_path / "review-asked"
    release = threading.Event()

    def handler(body: dict) -> Any:
        if is_review(body):
            asked.write_text(str(len(asked.read_text()) + 1 if asked.exists() else 1))
            release.wait(STOP_TIMEOUT_S * 2)
            return verdict("APPROVED", "Fine.")
        plan = [call("bash", command=commit_once("work")), text("Done.")]
        return plan[min(step_of(body), len(plan) - 1)]

    model = scripted(handler)
    home = make_home(model, sandbox="none", baseline=False)  # the round's own checks, first
    verify = [long_command("verify.pid")] if phase == "verify" else ["true"]
    story = write_story(home, "s1", verify=verify)
    worktree = home / "worktrees" / "s1"

    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    child = None
    if phase == "verify":
        child = hero.wait_for_file(worktree / "verify.pid")
        procs.append(child)
    else:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not asked.exists() and time.monotonic() < deadline and hero.proc.poll() is None:
            time.sleep(0.05)
        assert asked.exists(), hero.output()
    assert load_state(home)["phase"] == phase
    work_sha = sha_of(home / "worktrees" / "s1", "work")

    hero.proc.send_signal(signal.SIGINT)
    try:
        code = hero.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hero did not stop within {STOP_TIMEOUT_S} s of SIGINT:\n{hero.output()}")
    finally:
        release.set()
    assert code == 130, hero.output()
    if child is not None:
        assert wait_dead(child), "the verify command's background child outlived the run"
    state = load_state(home)
    assert state["status"] == "interrupted" and state["rounds"] == []
    assert story.is_file()

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    state = load_state(home)
    assert state["status"] == "passed"
    assert [r["round"] for r in state["rounds"]] == [1]
    assert is_ancestor(target_repo, work_sha, "hero/s1")
    assert git(target_repo, "log", "--format=%s", "main..hero/s1").splitlines().count("work") == 1
    if phase == "review":
        assert asked.read_text() == "2"  # asked once per run


# --------------------------------------------------------------------------- SIGKILL (crash)


def two_round_policy() -> Callable[[dict], Any]:
    plans = {
        1: [call("bash", command=commit_once("round-1")), text("Round 1 done.")],
        2: [
            call("bash", command=commit_once("round-2-before-crash")),
            call("bash", command=long_command("crash.pid")),
            call("bash", command=commit_once("round-2-after-crash")),
            text("Round 2 done."),
        ],
    }
    reviews = {
        1: verdict("CHANGES_REQUESTED", "ROUND-1-FEEDBACK: more please"),
        2: verdict("APPROVED", "Good now."),
    }

    def handler(body: dict) -> Any:
        if is_review(body):
            return reviews[review_round(body)]
        plan = plans[worker_round(body)]
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


def test_crash_mid_round_resumes_from_last_finished_round(
    scripted: Callable[..., ScriptedModel],
    make_home,
    write_story,
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    model = scripted(two_round_policy())
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["test -f round-1.txt"], max_retries=3)
    worktree = home / "worktrees" / "s1"

    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    child = hero.wait_for_file(worktree / "crash.pid")
    procs.append(child)
    hero.proc.send_signal(signal.SIGKILL)
    assert hero.proc.wait(timeout=STOP_TIMEOUT_S) == -signal.SIGKILL

    state = load_state(home)
    assert state["status"] == "running"  # nobody could record the crash
    assert state["current_round"] == 2 and state["phase"] == "worker"
    assert [r["round"] for r in state["rounds"]] == [1]
    assert story.read_text().count("### Round 1") == 1
    round1_sha = sha_of(target_repo, "round-1")
    crash_sha = sha_of(home / "worktrees" / "s1", "round-2-before-crash")

    n_before = len(model.requests)
    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    # the rerun ended what the crashed run left running
    assert wait_dead(child), "the crashed run's background child is still alive"
    assert "ended processes left running by an earlier run" in again.output()

    state = load_state(home)
    assert state["status"] == "passed"
    assert [r["round"] for r in state["rounds"]] == [1, 2]
    assert [r["review"]["verdict"] for r in state["rounds"]] == ["CHANGES_REQUESTED", "APPROVED"]
    assert state["runs"] == 2
    for sha in (round1_sha, crash_sha):
        assert is_ancestor(target_repo, sha, "hero/s1")
    subjects = git(target_repo, "log", "--format=%s", "main..hero/s1").splitlines()
    assert subjects.count("round-1") == 1 and subjects.count("round-2-before-crash") == 1
    assert "round-2-after-crash" in subjects

    rerun = [r.body for r in model.requests[n_before:]]
    workers = [b for b in rerun if not is_review(b)]
    assert workers and {worker_round(b) for b in workers} == {2}  # round 1 not run again
    assert "ROUND-1-FEEDBACK" in task_text(workers[0])
    assert [review_round(b) for b in rerun if is_review(b)] == [2]

    done = (home / "done" / "s1.md").read_text()
    assert done.count("### Round 1") == 1
    assert "### Round 2" not in done
