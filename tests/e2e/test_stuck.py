"""End to end: states that used to need a person, recovered by hero itself.

Each test runs real `hero` processes (`python -m hero run ...`) against a real repository,
the scripted model answering on loopback, and strikes for real: `kill -9` of hero and of
its git in the middle of a commit, two hero homes on one repository, commands that detach
from their process group.

1. Git lock files left by a git killed mid-commit are removed by the next run (a lock a
   live process holds is waited on, never removed).
2. A second home refuses a story another home is running on the same repository, and never
   removes a worktree it did not create.
3. What a worker's or a verify command detaches ends when the command returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import (
    FAST_RESCAN_S,
    Hero,
    alive,
    backlog,
    commit_once,
    is_review,
    load_state,
    rescans_done,
    review_round,
    sha_of,
    step_of,
    story_of,
    verdict,
    watch_command,
    worker_round,
)

from hero.cli import main
from hero.llm.scripted import ScriptedModel, call, text

pytestmark = pytest.mark.slow  # end to end: every test here runs hero for real

START_TIMEOUT_S = 60.0  # generous "did not hang" bounds, not speed checks
RUN_TIMEOUT_S = 120.0


@pytest.fixture
def heroes() -> Iterator[list[Hero]]:
    started: list[Hero] = []
    yield started
    for hero in started:
        if hero.proc.poll() is None:
            hero.proc.kill()
            hero.proc.wait()


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Path]:
    """A file whose existence ends the workers' busy loops: touched at the end whatever
    happens, so that a failing test leaves no loop behind."""
    path = tmp_path / "release"
    yield path
    path.touch()


def start(heroes: list[Hero], home: Path, story: Path, log_dir: Path, name: str) -> Hero:
    hero = Hero(home, story, log_dir, name)
    heroes.append(hero)
    return hero


def policy(plans: dict[int, list[Any]], reviews: dict[int, str] | None = None) -> Any:
    """The worker's plan per round (the last step repeats); the reviewer approves unless
    ``reviews`` says otherwise for that round."""

    def handler(body: dict[str, Any]) -> Any:
        if is_review(body):
            return verdict((reviews or {}).get(review_round(body), "APPROVED"), "Reviewed.")
        plan = plans[worker_round(body)]
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


def git_processes_in(directory: Path) -> list[int]:
    """Live git processes whose working directory is ``directory``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if comm == "git" and cwd == str(directory.resolve()) and alive(int(entry)):
            found.append(int(entry))
    return found


#: What hero's rescue commit says (hero.run.pipeline): its git's command line holds it.
RESCUE = b"commit work left uncommitted"


def cmdline(pid: int) -> bytes:
    """The command line of process ``pid`` (b"" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def marked(marker: str) -> list[int]:
    """Live processes whose environment carries hero's story marker ``marker``."""
    needle = b"\0HERO_RUN_MARKER=" + marker.encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = b"\0" + Path(f"/proc/{entry}/environ").read_bytes() + b"\0"
        except OSError:
            continue
        if needle in environ and alive(int(entry)):
            found.append(int(entry))
    return found


def detach(pid_file: Path) -> str:
    """Shell: `setsid sleep 777 &`, going on once the sleep is in a session of its own
    (its pid in ``pid_file``, written after ``setsid``). The file an earlier run of the
    same command left (the baseline's checks, then the round's) is removed first and the
    pid moved into place whole: the wait never ends on an old pid, and the test never reads
    a file that a process killed as the command returned had only just opened."""
    return (
        f"rm -f {pid_file}; "
        f"setsid sh -c 'echo $$ > {pid_file}.new; mv {pid_file}.new {pid_file}; "
        "exec sleep 777' & "
        f"while [ ! -s {pid_file} ]; do sleep 0.01; done"
    )


def other_home(home: Path, name: str) -> Path:
    """A second hero home with the same configuration: same repository, same model."""
    other = home.parent / name
    shutil.copytree(home / "config", other / "config")
    (other / "inbox").mkdir()
    return other


# --------------------------------------------------------------------------- 1. git locks


def test_kill_9_of_hero_and_its_git_mid_commit_then_rerun_clears_the_locks_and_passes(
    scripted: Callable[..., ScriptedModel],
    make_home: Any,
    write_story: Any,
    target_repo: Path,
    tmp_path: Path,
    heroes: list[Hero],
) -> None:
    """hero's rescue commit is caught in the middle (the branch's reflog is a FIFO nobody
    reads, so git waits there holding HEAD.lock and the branch's ref lock); hero and that
    git are killed with SIGKILL. Before: every rerun ended in `error` ("HEAD.lock: File
    exists"). Now the rerun removes the stale locks, says so, resumes and passes."""
    common = (target_repo / ".git").resolve()
    own = (tmp_path / "home" / "worktrees" / "s1" / ".git").resolve()  # the story's repository
    trap = own / "logs" / "refs" / "heads" / "hero" / "s1"
    arm = (
        "test -f armed || { touch armed; echo kept > uncommitted.txt; "
        f"rm -f {trap} && mkfifo {trap}; }}"
    )
    model = scripted(
        policy(
            {
                1: [
                    call("bash", command=commit_once("work")),
                    call("bash", command=arm),
                    text("Done."),
                ]
            }
        )
    )
    home = make_home(model)
    story = write_story(home, "s1", verify=["test -f work.txt"])
    worktree = home / "worktrees" / "s1"
    assert home == tmp_path / "home"
    head_lock = own / "HEAD.lock"
    ref_lock = own / "refs" / "heads" / "hero" / "s1.lock"

    def rescue_stuck() -> list[int]:
        # hero's rescue commit, blocked on the trap. Not any git that holds the two locks:
        # the worker's own commit holds them too, for a moment, and a kill then could land
        # after that git let go of them.
        if not (trap.is_fifo() and head_lock.exists() and ref_lock.exists()):
            return []
        return [pid for pid in git_processes_in(worktree) if RESCUE in cmdline(pid)]

    first = start(heroes, home, story, tmp_path, "first")
    stuck = first.wait_until(rescue_stuck, "hero's git stuck in its commit")
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    for pid in stuck:  # hero's git may be gone with its sandbox already (--die-with-parent)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in stuck) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in stuck)
    trap.unlink()  # the test's trap: what stays is what a crash leaves
    assert head_lock.exists() and ref_lock.exists()
    # and, where git leaves them when it dies holding them (as a kill -9 during `git add`
    # or a ref packing would): the worktree's index lock and the repository's shared ones
    others = [
        own / "index.lock",
        common / "refs" / "heads" / "hero" / "s1.lock",
        common / "packed-refs.lock",
        common / "config.lock",
        common / "index.lock",
    ]
    for path in others:
        path.write_bytes(b"")
    assert load_state(home)["status"] == "running"  # nobody could record the crash
    work_sha = sha_of(worktree, "work")

    again = start(heroes, home, story, tmp_path, "second")
    assert again.wait() == 0, again.output()

    out = again.output()
    for path in [head_lock, ref_lock, *others]:
        assert f"removed stale git lock {path} left by a process that died" in out
        assert not path.exists()
    state = load_state(home)
    assert state["status"] == "passed", state
    assert [r["round"] for r in state["rounds"]] == [1]
    subjects = git(target_repo, "log", "--format=%s", "main..hero/s1").splitlines()
    assert subjects.count("work") == 1
    assert git(target_repo, "merge-base", "--is-ancestor", work_sha, "hero/s1") == ""
    assert git(target_repo, "show", "hero/s1:uncommitted.txt") == "kept\n"


HOLD_LOCK = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # as git takes it
print("held", flush=True)
sys.stdin.read()
os.unlink(sys.argv[1])  # as git lets go of it
"""


def test_a_git_lock_a_live_process_holds_is_waited_on_not_removed(
    scripted: Callable[..., ScriptedModel],
    make_home: Any,
    write_story: Any,
    target_repo: Path,
    tmp_path: Path,
    heroes: list[Hero],
) -> None:
    model = scripted(
        policy(
            {n: [call("bash", command=commit_once(f"round-{n}")), text("Done.")] for n in (1, 2)},
            reviews={1: "CHANGES_REQUESTED"},
        )
    )
    home = make_home(model, max_retries=1)
    story = write_story(home, "s1", verify=["true"])
    first = start(heroes, home, story, tmp_path, "first")
    assert first.wait() == 1, first.output()
    assert load_state(home)["status"] == "gave_up"

    lock = home / "worktrees" / "s1" / ".git" / "index.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        again = start(heroes, home, story, tmp_path, "second")
        again.wait_until(
            lambda: f"waiting for git lock {lock}, held by pid {holder.pid}" in again.output(),
            "hero waiting for the held lock",
        )
        time.sleep(1.0)  # while it is held, it stays: hero waits and touches nothing
        assert lock.exists() and again.proc.poll() is None, again.output()
        assert len(model.requests) == 3  # round 2 has not started
        holder.communicate("")  # the live process finishes and lets go
    finally:
        holder.kill()
        holder.wait()
    assert again.wait() == 0, again.output()
    assert "removed stale git lock" not in again.output()
    state = load_state(home)
    assert state["status"] == "passed"
    assert [r["round"] for r in state["rounds"]] == [1, 2]


def test_a_git_lock_held_past_the_wait_ends_the_story_in_error_naming_the_holder(
    scripted: Callable[..., ScriptedModel],
    make_home: Any,
    write_story: Any,
    target_repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hero in this process, for a wait shorter than the 120 s it allows: the story ends in
    `error` naming the process that holds the lock, which stays; the next run resumes."""
    model = scripted(policy({1: [call("bash", command=commit_once("work")), text("Done.")]}))
    home = make_home(model)
    story = write_story(home, "s1", verify=["true"])
    lock = target_repo / ".git" / "refs" / "heads" / "hero" / "s1.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    monkeypatch.setattr("hero.git.ops.LOCK_WAIT_S", 0.5)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        code = main(["run", str(story), "--home", str(home)])
        assert code == 1
        state = load_state(home)
        assert state["status"] == "error"
        assert f"{lock}" in state["error"] and f"pid {holder.pid}" in state["error"]
        assert lock.exists()
        holder.communicate("")
        assert main(["run", str(story), "--home", str(home)]) == 0
        assert load_state(home)["status"] == "passed"
    finally:
        signal.signal(signal.SIGTERM, previous)
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------- 2. two homes


def test_a_second_home_on_the_same_repo_refuses_the_running_story_and_touches_nothing(
    scripted: Callable[..., ScriptedModel],
    make_home: Any,
    write_story: Any,
    target_repo: Path,
    tmp_path: Path,
    heroes: list[Hero],
    release: Path,
) -> None:
    busy = (
        "echo precious > uncommitted-a.txt; touch started; "
        f"while [ ! -f {release} ]; do sleep 0.05; done"
    )
    model = scripted(
        policy(
            {
                1: [
                    call("bash", command=commit_once("a-work")),
                    call("bash", command=busy),
                    text("Done."),
                ]
            }
        )
    )
    home_a = make_home(model, sandbox="none")
    home_b = other_home(home_a, "home-b")
    story_a = write_story(home_a, "s1", verify=["test -f a-work.txt"])
    story_b = write_story(home_b, "s1", verify=["true"])
    worktree_a = home_a / "worktrees" / "s1"

    a = start(heroes, home_a, story_a, tmp_path, "home-a")
    a.wait_until(lambda: (worktree_a / "started").exists(), "home A's worker at work")
    a_sha = sha_of(home_a / "worktrees" / "s1", "a-work")
    requests = len(model.requests)

    b = start(heroes, home_b, story_b, tmp_path, "home-b")
    assert b.wait() == 2, b.output()
    assert f"being run by {home_a.resolve()} (pid {a.proc.pid})" in b.output()
    assert len(model.requests) == requests  # B asked nothing
    # A's worktree, its uncommitted work and its branch are as A left them
    assert (worktree_a / "uncommitted-a.txt").read_text() == "precious\n"
    assert git(worktree_a, "rev-parse", "hero/s1").strip() == a_sha
    assert "hero/s1-prev" not in git(target_repo, "branch", "--list", "hero/*")
    assert not (home_b / "worktrees" / "s1").exists()
    assert not (home_b / "runs" / "state" / "s1.json").exists()

    release.touch()
    assert a.wait() == 0, a.output()
    assert load_state(home_a)["status"] == "passed"
    assert git(target_repo, "show", "hero/s1:uncommitted-a.txt") == "precious\n"

    # A has finished, its worktree stays: B still may not remove it (nor rename A's branch)
    passed_sha = git(target_repo, "rev-parse", "hero/s1").strip()
    (worktree_a / "notes-a.txt").write_text("mine\n")
    b2 = start(heroes, home_b, story_b, tmp_path, "home-b-again")
    assert b2.wait() != 0, b2.output()
    assert f"checked out in {worktree_a}" in b2.output()
    assert "did not create" in b2.output()
    assert (worktree_a / "notes-a.txt").read_text() == "mine\n"
    assert git(target_repo, "rev-parse", "hero/s1").strip() == passed_sha
    assert "hero/s1-prev" not in git(target_repo, "branch", "--list", "hero/*")


def test_a_daemon_of_another_home_says_busy_once_and_waits(
    scripted: Callable[..., ScriptedModel],
    make_home: Any,
    write_story: Any,
    target_repo: Path,
    tmp_path: Path,
    heroes: list[Hero],
    release: Path,
) -> None:
    """`hero watch` in home B, while home A runs the story: B logs that it is busy once,
    starts nothing, and looks again at its rescans without a word (two rescans waited out,
    made frequent and logged by ``RESCAN_PROBE``)."""
    busy = (
        "echo precious > uncommitted-a.txt; touch started; "
        f"while [ ! -f {release} ]; do sleep 0.05; done"
    )
    model = scripted(policy({1: [call("bash", command=busy), text("Done.")]}))
    home_a = make_home(model, sandbox="none")
    home_b = other_home(home_a, "home-b")
    story_a = write_story(home_a, "s1", verify=["true"])
    backlog(write_story(home_b, "s1", verify=["true"]))  # settled: each rescan looks at it
    worktree_a = home_a / "worktrees" / "s1"
    a = start(heroes, home_a, story_a, tmp_path, "home-a")
    a.wait_until(lambda: (worktree_a / "started").exists(), "home A's worker at work")

    log_path = tmp_path / "watch-b.log"

    def events(name: str) -> list[dict[str, Any]]:
        found = []
        for line in log_path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == name:
                found.append(event)
        return found

    def wait_until(cond: Callable[[], Any]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not cond() and time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(0.05)
        assert cond(), log_path.read_text()

    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(
            watch_command("--home", str(home_b), "--log-format", "json", rescan_s=FAST_RESCAN_S),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: events("busy"))
        rescans = rescans_done(len(events("rescanned")), 2)  # rescans looked at the file again
        wait_until(lambda: len(events("rescanned")) >= rescans)
        assert daemon.poll() is None, log_path.read_text()
        busy_events = events("busy")
        assert len(busy_events) == 1, log_path.read_text()
        assert f"being run by {home_a.resolve()} (pid {a.proc.pid})" in busy_events[0]["reason"]
        assert events("started") == [], log_path.read_text()
        assert (worktree_a / "uncommitted-a.txt").read_text() == "precious\n"
        assert not (home_b / "worktrees" / "s1").exists()
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    release.touch()
    assert a.wait() == 0, a.output()
    assert load_state(home_a)["status"] == "passed"


# --------------------------------------------------------------------------- 3. detached


def test_what_a_command_detaches_ends_when_the_command_returns(
    scripted: Callable[..., ScriptedModel],
    make_home: Any,
    write_story: Any,
    tmp_path: Path,
    heroes: list[Hero],
) -> None:
    """`setsid sleep 777 &` leaves the command's process group: ending the group missed it,
    and it outlived the story. Now it is gone as soon as the command returns, while the
    story goes on (and passes). (The command waits until its child has left the group, so
    that the group's end cannot catch it first.)"""
    seen: dict[str, list[int]] = {}
    marker: list[str] = []
    worker_pid, verify_pid = tmp_path / "worker.pid", tmp_path / "verify.pid"
    plan = [
        call("bash", command=detach(worker_pid)),
        call("bash", command=commit_once("work")),
        text("Done."),
    ]

    def handler(body: dict[str, Any]) -> Any:
        # The model is asked again only after hero has the command's result in hand.
        if is_review(body):
            seen["after verify"] = marked(marker[0])
            return verdict("APPROVED", "Fine.")
        step = step_of(body)
        if step == 1:
            seen["after worker bash"] = marked(marker[0])
        return plan[min(step, len(plan) - 1)]

    model = scripted(handler)
    home = make_home(model, sandbox="none")
    marker.append(f"{home.resolve()}/s1")
    story = write_story(
        home,
        "s1",
        verify=[detach(verify_pid), "test -f work.txt"],
    )
    leftovers = [worker_pid, verify_pid]
    try:
        hero = start(heroes, home, story, tmp_path, "run")
        assert hero.wait() == 0, hero.output()
        assert load_state(home)["status"] == "passed"
        assert seen == {"after worker bash": [], "after verify": []}
        for pid_file in leftovers:
            assert not alive(int(pid_file.read_text()))
    finally:
        for pid_file in leftovers:
            if pid_file.exists() and alive(int(pid_file.read_text())):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_parallel_stories_in_one_daemon_leave_each_others_processes_alone(
    scripted: Callable[..., ScriptedModel],
    make_home: Any,
    write_story: Any,
    tmp_path: Path,
) -> None:
    """Two stories at once in one `hero watch`: when B's command returns and its detached
    process is ended, A's command (still running, starting new processes all along) is
    left alone, and so is hero."""
    a_pid, b_pid, release = tmp_path / "a.pid", tmp_path / "b.pid", tmp_path / "release"
    a_busy = f"echo $$ > {a_pid}; while [ ! -f {release} ]; do sleep 0.05; done; " + commit_once(
        "a-work"
    )
    b_work = (
        f"while [ ! -f {a_pid} ]; do sleep 0.05; done; sleep 0.5; "
        + detach(b_pid)
        + "; "
        + commit_once("b-work")
    )
    plans = {
        "a": [call("bash", command=a_busy), text("Done.")],
        "b": [call("bash", command=b_work), text("Done.")],
    }
    a_alive_after_b: list[bool] = []

    def handler(body: dict[str, Any]) -> Any:
        sid = story_of(body)
        if is_review(body):
            if sid == "b":  # B's commands are all done; A's is still running
                a_alive_after_b.append(alive(int(a_pid.read_text())))
                release.touch()
            return verdict("APPROVED", "Fine.")
        return plans[sid][min(step_of(body), len(plans[sid]) - 1)]

    model = scripted(handler)
    home = make_home(model, max_parallel=2, sandbox="none")
    backlog(
        write_story(home, "a", verify=["test -f a-work.txt"]),
        write_story(home, "b", verify=["test -f b-work.txt"]),
    )
    with open(tmp_path / "watch.log", "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "hero", "watch", "--home", str(home), "--exit-when-idle"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            code = daemon.wait(timeout=RUN_TIMEOUT_S)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            release.touch()
    output = (tmp_path / "watch.log").read_text(errors="replace")
    try:
        assert code == 0, output
        assert a_alive_after_b == [True], output
        assert load_state(home, "a")["status"] == "passed", output
        assert load_state(home, "b")["status"] == "passed", output
        assert not alive(int(b_pid.read_text()))
    finally:
        if b_pid.exists() and alive(int(b_pid.read_text())):
            os.kill(int(b_pid.read_text()), signal.SIGKILL)
