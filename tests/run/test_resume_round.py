"""End to end: a round stopped in its middle (kill -9, Ctrl-C) goes on where it stopped
when `hero run` is run again, from the conversation its trace recorded, so a crash costs no
model calls already paid for.

hero runs as a real child process (`python -m hero run ...`); the scripted model runs in
this test process on a thread and hears every request, so a test compares what the
worker was sent before and after the restart. A long `bash` command writes its
background child's pid to a file: the test waits for that file, then strikes.
"""

from __future__ import annotations

import json
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
    commit_once,
    is_review,
    load_state,
    long_command,
    step_of,
    verdict,
    wait_dead,
    worker_round,
)
from watch_support import Procs

from hero.agent.replay import LOST_RUNNING
from hero.llm.scripted import Reply, ScriptedModel, ToolCall, text

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

Start = Callable[..., ScriptedModel]
STOP_TIMEOUT_S = 20.0  # a generous "did not hang" bound, not a speed check
RESTART_NOTE = "hero was restarted (a crash, a reboot or a stop) in the middle of this round"


def bash(k: int, command: str) -> Reply:
    """Turn ``k``'s answer: one bash call whose id names the turn."""
    return Reply(tool_calls=(ToolCall("bash", {"command": command}, id=f"t{k}"),))


def policy(turns: Callable[[int], Reply]) -> Callable[[dict[str, Any]], Reply]:
    """The reviewer approves; the worker's answer ``k`` (1-based) is ``turns(k)``, where
    k counts the assistant messages its request holds (so a resumed round goes on)."""

    def handler(body: dict[str, Any]) -> Reply:
        if is_review(body):
            return verdict("APPROVED", "Fine.")
        return turns(step_of(body) + 1)

    return handler


def workers(requests: list[Any]) -> list[dict[str, Any]]:
    return [r.body for r in requests if not is_review(r.body)]


def kill9(hero: Hero) -> None:
    hero.proc.send_signal(signal.SIGKILL)
    assert hero.proc.wait(timeout=STOP_TIMEOUT_S) == -signal.SIGKILL


def run_until_killed(home: Path, story: Path, tmp_path: Path, procs: Procs, pid_file: Path) -> Hero:
    """`hero run` of ``story``, killed with SIGKILL once its command wrote ``pid_file``."""
    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    procs.append(hero.wait_for_file(pid_file))
    kill9(hero)
    return hero


def trace_events(home: Path, n: int = 1) -> list[dict[str, Any]]:
    """The round's trace, every line (a torn one is a test failure here)."""
    path = home / "runs" / "s1" / f"round-{n}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def dumped(messages: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(m, sort_keys=True) for m in messages]


def branch_file(repo: Path, name: str) -> str:
    return git(repo, "show", f"hero/s1:{name}")


# --------------------------------------------------------------------------- kill -9 mid-round

TURN7 = "echo ran >> turn7.log; " + long_command("t7.pid")


def twelve_turns(k: int) -> Reply:
    if k == 1:
        return bash(k, commit_once("early"))
    if k == 7:
        return bash(k, TURN7)
    if k < 12:
        return bash(k, f"echo turn-{k} >> turns.log")
    return text("Done: twelve turns.")


def quick_twelve(k: int) -> Reply:
    """twelve_turns without its long turn 7."""
    return bash(k, "echo turn-7 >> turns.log") if k == 7 else twelve_turns(k)


def test_kill_during_turn_7_resumes_at_turn_7(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    model = scripted(policy(twelve_turns))
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["test -f early.txt"])
    worktree = home / "worktrees" / "s1"

    run_until_killed(home, story, tmp_path, procs, worktree / "t7.pid")
    first = workers(model.requests)
    assert [step_of(b) for b in first] == list(range(7))  # turns 1-7 asked, no more
    n_before = len(model.requests)

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    assert "round 1: resumes at turn 8" in again.output()

    rerun = workers(model.requests[n_before:])
    assert rerun and {worker_round(b) for b in rerun} == {1}
    resumed = rerun[0]["messages"]
    # the system prompt, the task and turns 1-6, exactly as the first run sent them
    turn7_request = first[6]["messages"]
    assert len(turn7_request) == 2 + 6 * 2
    assert dumped(resumed[:14]) == dumped(turn7_request)
    # then turn 7's call, its result reported lost, and the restart note
    assert resumed[14]["role"] == "assistant"
    [call7] = resumed[14]["tool_calls"]
    assert call7["id"] == "t7"
    assert json.loads(call7["function"]["arguments"]) == {"command": TURN7}
    assert resumed[15] == {"role": "tool", "tool_call_id": "t7", "content": LOST_RUNNING}
    assert resumed[16]["role"] == "user"
    assert resumed[16]["content"].startswith(RESTART_NOTE)
    assert "(bash) was lost" in resumed[16]["content"]
    assert len(resumed) == 17
    # never asked to start over; turns 8-12 asked once each
    assert all(len(b["messages"]) > 2 for b in rerun)
    assert [step_of(b) for b in rerun] == list(range(7, 12))
    # turn 7's command ran once, and no earlier turn's command ran again
    assert branch_file(target_repo, "turn7.log") == "ran\n"
    assert branch_file(target_repo, "turns.log").split() == [
        f"turn-{k}" for k in (2, 3, 4, 5, 6, 8, 9, 10, 11)
    ]
    subjects = git(target_repo, "log", "--format=%s", "main..hero/s1").splitlines()
    assert subjects.count("early") == 1

    state = load_state(home)
    assert state["status"] == "passed"
    [round1] = state["rounds"]
    assert round1["worker"]["turns"] == 12
    assert round1["worker"]["tool_calls"] == 11  # turn 7's counts: it ran
    assert round1["worker"]["stop_reason"] == "done"
    assert round1["worker"]["summary"] == "Done: twelve turns."
    # the worker's tokens count both parts (the server counts len(json(messages)) // 4)
    asked = workers(model.requests)
    assert round1["worker"]["tokens_in"] == sum(len(json.dumps(b["messages"])) // 4 for b in asked)

    events = trace_events(home)
    starts = [e for e in events if e["event"] == "round_start"]
    assert len(starts) == 2 and not starts[0].get("resumed")
    assert (starts[1]["resumed"], starts[1]["part"]) == (True, 2)
    assert starts[1]["base"] == starts[0]["base"] == state["base_sha"]
    lost = [e for e in events if e["event"] == "tool_result" and e.get("lost")]
    assert [(e["id"], e["lost"]) for e in lost] == [("t7", "running")]
    assert [e for e in events if e["event"] == "message" and e.get("restart")]
    [end] = [e for e in events if e["event"] == "agent_end"]
    assert (end["turns"], end["tool_calls"], end["parts"]) == (12, 11, 2)


def test_a_round_killed_twice_goes_on_in_three_parts(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    def turns(k: int) -> Reply:
        if k in (4, 8):
            return bash(k, f"echo ran >> turn{k}.log; " + long_command(f"t{k}.pid"))
        return quick_twelve(k)

    model = scripted(policy(turns))
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["test -f early.txt"])
    worktree = home / "worktrees" / "s1"
    for name, pid_file in (("first", "t4.pid"), ("second", "t8.pid")):
        hero = Hero(home, story, tmp_path, name)
        procs.append(hero)
        procs.append(hero.wait_for_file(worktree / pid_file))
        kill9(hero)
    n_before = len(model.requests)

    last = Hero(home, story, tmp_path, "third")
    procs.append(last)
    assert last.wait() == 0, last.output()
    assert "round 1: resumes at turn 9" in last.output()
    resumed = workers(model.requests[n_before:])[0]["messages"]
    notes = [i for i, m in enumerate(resumed) if str(m["content"]).startswith(RESTART_NOTE)]
    assert notes == [2 + 4 * 2 + 0, 2 + 8 * 2 + 1]  # after turn 4's and turn 8's lost results
    assert resumed[notes[0] - 1]["content"] == resumed[notes[1] - 1]["content"] == LOST_RUNNING
    assert len(resumed) == 2 + 8 * 2 + 2
    assert branch_file(target_repo, "turn4.log") == branch_file(target_repo, "turn8.log") == "ran\n"
    assert branch_file(target_repo, "turns.log").split() == [
        f"turn-{k}" for k in (2, 3, 5, 6, 7, 9, 10, 11)
    ]

    state = load_state(home)
    assert state["status"] == "passed"
    assert state["rounds"][0]["worker"]["turns"] == 12
    events = trace_events(home)
    starts = [(e.get("resumed"), e.get("part")) for e in events if e["event"] == "round_start"]
    assert starts == [(None, None), (True, 2), (True, 3)]
    [end] = [e for e in events if e["event"] == "agent_end"]
    assert (end["turns"], end["parts"]) == (12, 3)


def test_a_condensed_round_resumes_with_its_condensed_history(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    """Under a 16k window, turn 8 condenses the history (six ~6 kB reads); kill -9 during
    turn 10: the rerun's first request is the condensed history the first run sent for
    turn 10, then turn 10's lost call and the restart note."""
    for i in range(6):
        lines = (f"c{i} {n:03d} " + "z" * 52 + "\n" for n in range(100))
        (target_repo / f"c{i}.txt").write_text("".join(lines))
    git(target_repo, "add", "-A")
    git(target_repo, "commit", "-q", "-m", "files to read")

    def turns(k: int) -> Reply:
        if k == 1:
            return bash(k, commit_once("early"))
        if k == 10:
            return bash(k, long_command("t10.pid"))
        if k < 12:
            return Reply(tool_calls=(ToolCall("read_file", {"path": f"c{k % 6}.txt"}, id=f"t{k}"),))
        return text("Done.")

    model = scripted(policy(turns))
    home = make_home(model, sandbox="none", output_reserve_default=1024)
    provider = home / "config" / "providers" / "scripted.yaml"
    provider.write_text(provider.read_text() + "context_window: 16384\n")
    story = write_story(home, "s1", verify=["test -f early.txt"])
    worktree = home / "worktrees" / "s1"

    hero = run_until_killed(home, story, tmp_path, procs, worktree / "t10.pid")
    assert "s1: context condensed at turn 8: 5 tool result(s) elided" in hero.output()
    first = workers(model.requests)
    turn10 = first[9]["messages"]
    elided = [m for m in turn10 if str(m["content"]).startswith("[elided by hero")]
    assert len(elided) == 5
    n_before = len(model.requests)

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    resumed = workers(model.requests[n_before:])[0]["messages"]
    assert dumped(resumed[: len(turn10)]) == dumped(turn10)
    assert resumed[len(turn10)]["tool_calls"][0]["id"] == "t10"
    assert resumed[len(turn10) + 1]["content"] == LOST_RUNNING
    assert resumed[len(turn10) + 2]["content"].startswith(RESTART_NOTE)
    assert len(resumed) == len(turn10) + 3
    assert load_state(home)["status"] == "passed"
    condensed = [e["turn"] for e in trace_events(home) if e["event"] == "condense"]
    assert condensed == [8]  # once, in the first part: the rerun replayed it


def test_a_kill_while_the_model_thinks_resumes_with_the_same_request(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
    procs: Procs,
) -> None:
    """Killed while waiting for turn 4's answer: nothing was lost but the answer, so the
    rerun sends the same history again, with only the restart note after it."""
    asked = tmp_path / "turn-4-asked"
    release = threading.Event()
    held = [False]
    turns = policy(quick_twelve)

    def handler(body: dict[str, Any]) -> Reply:
        if not is_review(body) and step_of(body) == 3 and not held[0]:
            held[0] = True
            asked.write_text("yes")
            release.wait(STOP_TIMEOUT_S * 3)  # the answer never reaches the killed hero
        return turns(body)

    model = scripted(handler)
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["test -f early.txt"])
    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    try:
        hero.wait_until(asked.exists, "turn 4's request")
        kill9(hero)
    finally:
        release.set()
    first = workers(model.requests)
    assert [step_of(b) for b in first] == [0, 1, 2, 3]
    n_before = len(model.requests)

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    resumed = workers(model.requests[n_before:])[0]["messages"]
    assert dumped(resumed[:-1]) == dumped(first[3]["messages"])
    assert resumed[-1]["role"] == "user"
    assert resumed[-1]["content"].startswith(RESTART_NOTE)
    assert "Your last request got no answer" in resumed[-1]["content"]
    state = load_state(home)
    assert state["status"] == "passed"
    assert (state["rounds"][0]["worker"]["turns"], state["rounds"][0]["worker"]["tool_calls"]) == (
        12,
        11,
    )
    assert not [e for e in trace_events(home) if e.get("lost")]


# --------------------------------------------------------------------------- a torn trace


def four_turns(long: str) -> Callable[[int], Reply]:
    def turns(k: int) -> Reply:
        if k == 1:
            return bash(k, commit_once("early"))
        if k == 2:
            return bash(k, long)
        if k == 3:
            return bash(k, "echo three >> three.log")
        return text("Done.")

    return turns


def test_a_torn_trace_starts_the_round_over(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    model = scripted(policy(four_turns(long_command("t2.pid"))))
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["test -f early.txt"])
    worktree = home / "worktrees" / "s1"

    run_until_killed(home, story, tmp_path, procs, worktree / "t2.pid")
    trace = home / "runs" / "s1" / "round-1.jsonl"
    lines_before = trace.read_text().count("\n")
    with open(trace, "a") as fh:  # a line half written when the process died
        fh.write('{"t": 9.5, "ts": 1700000000.5, "event": "tool_result", "id": "t2", "con')
    n_before = len(model.requests)

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    output = again.output()
    assert f"round 1: starts over: its trace cannot be replayed (line {lines_before + 1} " in output
    assert "resumes at turn" not in output and "error" not in output.lower()

    rerun = workers(model.requests[n_before:])
    assert len(rerun[0]["messages"]) == 2  # the round over, from its first messages
    assert not any(RESTART_NOTE in str(m.get("content")) for b in rerun for m in b["messages"])
    state = load_state(home)
    assert state["status"] == "passed" and state["error"] == ""
    assert state["rounds"][0]["worker"]["turns"] == 4  # the new attempt's turns
    assert branch_file(target_repo, "three.log") == "three\n"

    # the torn line was ended, and the failed resume recorded, in the same trace
    lines = trace.read_text().splitlines()
    assert lines[lines_before].endswith('"con')
    events = [json.loads(line) for line in lines[lines_before + 1 :]]
    assert events[0]["event"] == "round_start" and not events[0].get("resumed")
    assert events[1]["event"] == "resume_failed"
    assert "torn or not JSON" in events[1]["reason"]


# --------------------------------------------------------------------------- limits


def test_the_turn_limit_counts_across_parts(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
    procs: Procs,
) -> None:
    def turns(k: int) -> Reply:
        if k == 1:
            return bash(k, commit_once("early"))
        if k == 5:
            return bash(k, long_command("t5.pid"))
        return bash(k, f"echo turn-{k} >> turns.log")  # never done: only the limit stops it

    model = scripted(policy(turns))
    home = make_home(model, sandbox="none", worker_max_turns=8)
    story = write_story(home, "s1", verify=["true"], max_retries=1)
    worktree = home / "worktrees" / "s1"

    run_until_killed(home, story, tmp_path, procs, worktree / "t5.pid")
    assert len(workers(model.requests)) == 5
    n_before = len(model.requests)

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    again.wait()
    rerun = workers(model.requests[n_before:])
    assert [step_of(b) for b in rerun] == [5, 6, 7]  # turns 6-8, then the limit
    state = load_state(home)
    [round1] = state["rounds"]
    assert round1["worker"]["stop_reason"] == "max_turns"
    assert round1["worker"]["turns"] == 8
    assert "8" in round1["worker"]["detail"]
    assert state["status"] == "gave_up"
    [end] = [e for e in trace_events(home) if e["event"] == "agent_end"]
    assert (end["stop_reason"], end["turns"], end["parts"]) == ("max_turns", 8, 2)


# --------------------------------------------------------------------------- a finished worker


def test_a_worker_that_had_finished_is_not_asked_again(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    def turns(k: int) -> Reply:
        return bash(k, commit_once("work")) if k == 1 else text("Work done.")

    model = scripted(policy(turns))
    home = make_home(model, sandbox="none", baseline=False)  # the round's own checks, first
    story = write_story(home, "s1", verify=[long_command("verify.pid")])
    worktree = home / "worktrees" / "s1"

    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    verify_child = hero.wait_for_file(worktree / "verify.pid")
    procs.append(verify_child)
    assert load_state(home)["phase"] == "verify"
    kill9(hero)
    n_before = len(model.requests)
    assert n_before == 2 and not any(is_review(r.body) for r in model.requests)

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    assert wait_dead(verify_child)
    assert "the worker had finished before the stop" in again.output()
    rerun = [r.body for r in model.requests[n_before:]]
    assert len(rerun) == 1 and is_review(rerun[0])  # no worker request: verify, then review

    state = load_state(home)
    assert state["status"] == "passed"
    [round1] = state["rounds"]
    assert round1["verify"]["passed"] is True
    assert round1["review"]["verdict"] == "APPROVED"
    assert (round1["worker"]["turns"], round1["worker"]["summary"]) == (2, "Work done.")
    subjects = git(target_repo, "log", "--format=%s", "main..hero/s1").splitlines()
    assert subjects.count("work") == 1

    events = trace_events(home)
    kinds = [e["event"] for e in events]
    second = kinds.index("round_start", 1)
    assert events[second].get("resumed") is True
    assert kinds.count("agent_end") == 1 and kinds.index("agent_end") < second
    assert kinds[second:].count("verify") == 1 and kinds[second:].count("verdict") == 1
    assert "assistant" not in kinds[second:]


# --------------------------------------------------------------------------- a stale trace


def test_a_trace_of_an_earlier_run_record_is_not_replayed(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    """The round's trace is from an earlier run record (the record was dropped, and main
    moved on): the round starts from scratch, without a restart note."""
    long = [True]
    model = scripted(policy(lambda k: four_turns(long_command("t2.pid") if long[0] else "true")(k)))
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["test -f early.txt"])
    worktree = home / "worktrees" / "s1"

    run_until_killed(home, story, tmp_path, procs, worktree / "t2.pid")
    long[0] = False
    old_base = load_state(home)["base_sha"]
    (home / "runs" / "state" / "s1.json").unlink()  # the user drops the run record
    (target_repo / "NEWS").write_text("main moved on\n")
    git(target_repo, "add", "NEWS")
    git(target_repo, "commit", "-q", "-m", "news")
    new_base = git(target_repo, "rev-parse", "main").strip()
    n_before = len(model.requests)

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    output = again.output()
    assert "resumes at turn" not in output and "starts over" not in output

    rerun = workers(model.requests[n_before:])
    assert len(rerun[0]["messages"]) == 2
    assert [step_of(b) for b in rerun] == [0, 1, 2, 3]
    assert not any(RESTART_NOTE in str(m.get("content")) for b in rerun for m in b["messages"])
    state = load_state(home)
    assert state["status"] == "passed" and state["base_sha"] == new_base != old_base

    events = trace_events(home)
    starts = [e for e in events if e["event"] == "round_start"]
    assert [e["base"] for e in starts] == [old_base, new_base]
    assert not any(e.get("resumed") for e in starts)
    assert not any(e["event"] == "resume_failed" for e in events)
    assert not any(e.get("restart") or e.get("lost") for e in events)


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_mid_round_then_rerun_resumes_mid_round(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    target_repo: Path,
    tmp_path: Path,
    procs: Procs,
) -> None:
    model = scripted(policy(four_turns(long_command("t2.pid"))))
    home = make_home(model, sandbox="none")
    story = write_story(home, "s1", verify=["test -f early.txt"])
    worktree = home / "worktrees" / "s1"

    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    child = hero.wait_for_file(worktree / "t2.pid")
    procs.append(child)
    hero.proc.send_signal(signal.SIGINT)
    try:
        code = hero.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hero did not stop within {STOP_TIMEOUT_S} s of SIGINT:\n{hero.output()}")
    assert code == 130, hero.output()
    assert wait_dead(child)
    assert load_state(home)["status"] == "interrupted"
    first = workers(model.requests)
    assert [step_of(b) for b in first] == [0, 1]
    n_before = len(model.requests)

    again = Hero(home, story, tmp_path, "second")
    procs.append(again)
    assert again.wait() == 0, again.output()
    assert "round 1: resumes at turn 3" in again.output()

    rerun = workers(model.requests[n_before:])
    resumed = rerun[0]["messages"]
    assert dumped(resumed[:4]) == dumped(first[1]["messages"])  # through turn 1's result
    assert resumed[4]["role"] == "assistant" and resumed[4]["tool_calls"][0]["id"] == "t2"
    assert resumed[5] == {"role": "tool", "tool_call_id": "t2", "content": LOST_RUNNING}
    assert resumed[-1]["role"] == "user" and resumed[-1]["content"].startswith(RESTART_NOTE)
    assert len(resumed) == 7
    assert [step_of(b) for b in rerun] == [2, 3]

    state = load_state(home)
    assert state["status"] == "passed"
    assert state["rounds"][0]["worker"]["turns"] == 4
    subjects = git(target_repo, "log", "--format=%s", "main..hero/s1").splitlines()
    assert subjects.count("early") == 1
    assert branch_file(target_repo, "three.log") == "three\n"


# --------------------------------------------------------------------------- spend on record


def test_a_killed_worker_turns_spend_is_on_record(
    scripted: Start,
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
    procs: Procs,
) -> None:
    """The run record (and its usage, which the budgets read) is saved during a long
    worker turn, not only between phases: a run killed mid-round leaves its spend on
    record."""

    def turns(k: int) -> Reply:
        return bash(k, "sleep 0.2") if k < 200 else text("Done.")

    model = scripted(policy(turns))
    home = make_home(model, sandbox="none", worker_max_turns=300, loop_repeats=500)
    story = write_story(home, "s1", allow_empty=True)
    hero = Hero(home, story, tmp_path, "first")
    procs.append(hero)
    deadline = time.monotonic() + 60
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        if hero.proc.poll() is not None:
            pytest.fail(f"hero exited early:\n{hero.output()}")
        try:
            state = load_state(home)
        except (FileNotFoundError, ValueError):
            state = {}
        if state.get("phase") == "worker" and state.get("usage", {}).get("llm_calls", 0) >= 3:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"no usage was saved during the worker's turn: {state.get('usage')}")
    kill9(hero)
    after = load_state(home)
    assert after["status"] == "running" and after["rounds"] == []
    assert 3 <= after["usage"]["llm_calls"] <= len(workers(model.requests))
    assert after["usage"]["tokens_in"] > 0
