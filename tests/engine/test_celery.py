"""End to end: the Celery engine (stories run on other machines), with a real redis-server
and real processes.

A coordinator (`hero watch` with `engine: celery`) and `hero worker` processes, each in a
folder of its own standing in for a machine, meet through a redis-server on loopback and a
bare git remote (see engine_support). The scripted model runs in this test process and
answers every machine: it tells stories apart by the "# Story <id>:" line of the task, and
counts each worker turn, so a story run twice shows up as a turn asked twice.

Timing is never asserted but for generous bounds: these tests run on small machines beside
other work. A story that must be caught mid-run waits at a gate (``Policy.gates``), or runs
a command that writes its pid to a file, until the test has done what it came to do.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import git
from engine_support import (
    RUN_TIMEOUT_S,
    Cluster,
    Policy,
    branch_sha,
    coordinator_side,
    hero_cli,
    once_per_turn,
    reviews_of,
    story_of,
    wait_for,
    wait_pid_file,
    worker_turns,
)
from helpers import (
    backlog,
    commit_once,
    is_ancestor,
    is_review,
    review_round,
    sha_of,
    verdict,
    worker_round,
)
from plan_support import write_plan, write_plan_story

from hero.llm.scripted import call, text

LEASE_S = 3  # engine_support.ENGINE_KNOBS: a dead worker's story comes back in seconds


def subjects(repo: Path, ref: str) -> list[str]:
    return git(repo, "log", "--format=%s", f"main..{ref}").splitlines()


def status_of(home: Path) -> dict[str, str]:
    """``hero status --json``: each story's status (``<status> (stale)`` for a running one
    that no process holds)."""
    done = hero_cli(home, "status", "--json")
    assert done.returncode == 0, done.stderr
    return {
        row["id"]: row["status"] + (" (stale)" if row.get("stale") else "")
        for row in json.loads(done.stdout)["stories"]
    }


def review_rounds(model, sid: str) -> list[int]:
    """The round of every review of ``sid``, in order."""
    return [
        review_round(r.body)
        for r in list(model.requests)
        if is_review(r.body) and story_of(r.body) == sid
    ]


def long_once(pid_file: str, flag: Path) -> str:
    """Sleep in a background child (its pid in ``pid_file``, in the worktree) until killed,
    unless ``flag`` exists: the worker that takes the story over runs on at once."""
    return (
        f"test -f {flag} || "
        f"{{ sleep 60 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait; }}"
    )


# --------------------------------------------------------------------------- many machines


@pytest.mark.slow
def test_eight_stories_over_three_workers_all_pass(
    cluster: Cluster, scripted, write_story, target_repo: Path, remote: Path
) -> None:
    model = scripted(Policy(), latency_s=0.2)
    home = cluster.home(model)
    ids = [f"s{n}" for n in range(1, 9)]
    for sid in ids:
        backlog(write_story(home, sid, verify=[f"test -f {sid}-r1.txt"]))
    main_sha = git(target_repo, "rev-parse", "main").strip()
    workers = [cluster.start_worker() for _ in range(3)]

    coordinator = cluster.start_coordinator("--exit-when-idle")
    assert coordinator.wait_exit() == 0, cluster.outputs()

    for sid in ids:
        state = coordinator.state(sid)
        assert state is not None and state["status"] == "passed", (sid, state)
        assert [r["round"] for r in state["rounds"]] == [1]
        branch = f"hero/{sid}"
        # on the remote, and fetched into the coordinator's repository, at the record's head
        assert branch_sha(remote, branch) == state["head_sha"]
        assert branch_sha(target_repo, branch) == state["head_sha"]
        assert subjects(remote, branch) == [f"{sid}-r1"]
        assert git(remote, "rev-parse", f"{branch}^").strip() == main_sha
        assert (home / "done" / f"{sid}.md").is_file()
        assert not (home / "inbox" / f"{sid}.md").exists()
        once_per_turn(model, sid)
        ran_on = [w.name for w in workers if w.ran(sid)]
        assert len(ran_on) == 1, (sid, ran_on)
    for w in workers:
        assert any(w.ran(sid) for sid in ids), f"{w.name} ran no story:\n{cluster.outputs()}"
        assert w.running()
    # the coordinator's repository is left as it was but for the fetched branches
    assert git(target_repo, "rev-parse", "main").strip() == main_sha
    assert git(target_repo, "status", "--porcelain") == ""

    assert status_of(home) == {sid: "passed" for sid in ids}
    shown = hero_cli(home, "status")
    assert shown.returncode == 0, shown.stderr
    for sid in ids:
        assert sid in shown.stdout
    logs = hero_cli(home, "logs", "s3")
    assert logs.returncode == 0, logs.stderr
    assert "s3-r1" in logs.stdout  # the worker's bash command, from the mirrored trace
    assert "Round 1 of s3 done." in logs.stdout
    assert (home / "runs" / "s3" / "round-1.jsonl").is_file()


@pytest.mark.slow
def test_hero_status_on_the_coordinator_shows_a_story_running_on_a_worker(
    cluster: Cluster, scripted, write_story
) -> None:
    gate = threading.Event()
    model = scripted(Policy(gates={"r1": gate}))
    home = cluster.home(model)
    backlog(write_story(home, "r1", verify=["true"]))
    worker = cluster.start_worker()
    coordinator = cluster.start_coordinator("--exit-when-idle")
    try:
        shown = wait_for(
            lambda: (got := status_of(home).get("r1", "")).startswith("running") and got,
            "r1 running in hero status",
            procs=(coordinator, worker),
        )
        logs = hero_cli(home, "logs", "r1")
    finally:
        gate.set()
    assert coordinator.wait_exit() == 0, cluster.outputs()
    assert logs.returncode == 0, logs.stderr
    assert shown == "running", hero_cli(home, "status").stdout


# --------------------------------------------------------------------------- kill -9


def two_round_policy(sid: str, round2: list) -> Policy:
    """Round 1 commits ``<sid>-r1`` and is sent back; round 2 follows ``round2``, approved."""
    return Policy(
        plans={sid: {2: round2}},
        reviews={
            sid: lambda n: verdict("CHANGES_REQUESTED", "More.") if n == 1 else verdict("APPROVED")
        },
    )


def published(cluster: Cluster, key: str) -> dict | None:
    """The story's record as its worker last published it in Redis (below its seal's
    header line)."""
    text = cluster.redis.client().get(f"hero:state:{key}")
    return json.loads(text.partition("\n")[2]) if text else None


@pytest.mark.slow
def test_worker_killed_mid_story_resumes_on_another_with_nothing_lost(
    cluster: Cluster, scripted, write_story, target_repo: Path, remote: Path, tmp_path: Path
) -> None:
    killed = tmp_path / "killed"  # the flag that lets the long command run on at once
    model = scripted(
        two_round_policy(
            "k1",
            [
                call("bash", command=commit_once("r2-before-kill")),
                call("bash", command=long_once("child.pid", killed)),
                call("bash", command=commit_once("r2-after-kill")),
                text("Round 2 done."),
            ],
        )
    )
    home = cluster.home(model)
    backlog(write_story(home, "k1", verify=["test -f k1-r1.txt"], max_retries=3))
    workers = [cluster.start_worker() for _ in range(2)]
    coordinator = cluster.start_coordinator("--exit-when-idle")
    procs = (coordinator, *workers)

    victim = wait_for(
        lambda: next((w for w in workers if (w.worktree("k1") / "child.pid").is_file()), None),
        "the long command running on a worker",
        procs=procs,
    )
    wait_pid_file(victim.worktree("k1") / "child.pid")
    # round 1, the step before the kill, has been published (the moment it ended: see
    # test_a_step_finished_just_before_a_kill_is_not_redone)
    wait_for(
        lambda: (p := published(cluster, "k1")) and p["current_round"] == 2,
        "round 2 published",
        procs=procs,
    )
    (heir,) = [w for w in workers if w is not victim]
    assert not heir.ran("k1")
    pushed = branch_sha(remote, "hero/k1")
    assert pushed is not None  # round 1's commit, pushed when its round was saved
    round1 = sha_of(remote, "k1-r1", "hero/k1")

    killed.touch()
    victim.kill9()
    t_kill = time.monotonic()
    wait_for(lambda: heir.ran("k1"), "the story taken over", procs=(coordinator, heir))
    resumed_after = time.monotonic() - t_kill
    print(f"k1 resumed on {heir.name} {resumed_after:.1f} s after its worker was killed")
    assert resumed_after < 10 * LEASE_S

    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("k1")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert [r["round"] for r in state["rounds"]] == [1, 2]  # no round twice
    assert [r["review"]["verdict"] for r in state["rounds"]] == ["CHANGES_REQUESTED", "APPROVED"]
    assert state["runs"] == 2
    final = branch_sha(remote, "hero/k1")
    assert final == state["head_sha"] == branch_sha(target_repo, "hero/k1")
    for sha in (pushed, round1):  # every pushed commit kept
        assert is_ancestor(remote, sha, "hero/k1")
    got = subjects(remote, "hero/k1")
    assert got.count("k1-r1") == 1 and got.count("r2-after-kill") == 1, got
    assert got.count("r2-before-kill") <= 1, got
    # round 1 was neither worked on nor reviewed again
    assert [t for t in worker_turns(model, "k1") if t[0] == 1] == [(1, 0), (1, 1)]
    assert review_rounds(model, "k1") == [1, 2]
    assert "had been deleted" not in coordinator.output()  # the heir found the branch
    assert (home / "done" / "k1.md").is_file()


@pytest.mark.slow
def test_a_step_finished_just_before_a_kill_is_not_redone(
    cluster: Cluster, scripted, write_story
) -> None:
    """The worker dies the moment round 2 starts (in the model's answer to its first
    request): round 1 had ended, so the next worker must start at round 2."""
    policy = two_round_policy("k2", [call("bash", command=commit_once("k2-r2")), text("Done.")])
    workers: list = []
    seen: dict[str, object] = {}

    def handler(body: dict) -> object:
        if "victim" not in seen and not is_review(body) and worker_round(body) == 2:
            victim = next(w for w in workers if w.ran("k2"))
            victim.kill9()
            seen["victim"] = victim
            seen["published"] = published(cluster, "k2")
        return policy(body)

    model = scripted(handler)
    home = cluster.home(model)
    backlog(write_story(home, "k2", verify=["test -f k2-r1.txt"], max_retries=3))
    workers += [cluster.start_worker() for _ in range(2)]
    coordinator = cluster.start_coordinator("--exit-when-idle")
    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("k2")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert [r["round"] for r in state["rounds"]] == [1, 2]
    at_kill = seen["published"]  # published before round 2 started: done for any worker
    assert isinstance(at_kill, dict) and [r["round"] for r in at_kill["rounds"]] == [1]
    assert review_rounds(model, "k2") == [1, 2], cluster.outputs()
    assert [t for t in worker_turns(model, "k2") if t[0] == 1] == [(1, 0), (1, 1)]


@pytest.mark.slow
def test_a_story_resumes_on_the_branch_as_the_remote_has_it(
    cluster: Cluster, scripted, write_story, target_repo: Path, remote: Path, tmp_path: Path
) -> None:
    """A worker pushes a branch before it publishes the record: one that died in between
    leaves commits on the remote that the record does not know of. The next run goes on
    from the remote's branch, and keeps them (as the local engine keeps a crashed run's)."""
    from hero.state import RunState, Status, save_state

    model = scripted(Policy())
    home = cluster.home(model)
    story = backlog(write_story(home, "rb", verify=["test -f rb-r1.txt"]))
    main_sha = git(target_repo, "rev-parse", "main").strip()
    save_state(
        home,
        RunState(
            id="rb",
            status=Status.RUNNING,
            title="Story rb",
            story_path=str(story),
            branch="hero/rb",
            base_ref="main",
            base_sha=main_sha,
            head_sha=main_sha,
            current_round=1,
            phase="worker",
            runs=1,
            started_at=time.time() - 60,
        ),
    )
    clone = tmp_path / "elsewhere"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    git(clone, "checkout", "-q", "-b", "hero/rb")
    (clone / "earlier.txt").write_text("pushed by a worker that died\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "earlier-work")
    git(clone, "push", "-q", "origin", "hero/rb")
    earlier = git(clone, "rev-parse", "HEAD").strip()

    cluster.start_worker()
    coordinator = cluster.start_coordinator("--exit-when-idle")
    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("rb")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert is_ancestor(remote, earlier, "hero/rb")
    assert subjects(remote, "hero/rb") == ["rb-r1", "earlier-work"]
    assert branch_sha(target_repo, "hero/rb") == branch_sha(remote, "hero/rb")


# --------------------------------------------------------------------------- one run at a time


@pytest.mark.slow
def test_two_workers_offered_the_same_story_run_it_once(
    cluster: Cluster, scripted, write_story
) -> None:
    """The same task (the payload the coordinator builds) sent twice, to two workers on
    queues of their own, as a broker redelivery would: one runs it, the other returns."""
    gate = threading.Event()
    model = scripted(Policy(gates={"d1": gate}))
    home = cluster.home(model)
    path = write_story(home, "d1", verify=["test -f d1-r1.txt"])
    w1 = cluster.start_worker(args=("--queues", "only-w1"))
    w2 = cluster.start_worker(args=("--queues", "only-w2"))

    run, store, app = coordinator_side(home, path)
    run.dispatch = "0" * 32
    payload = run.task()
    task_id = f"d1-{run.dispatch}"
    try:
        for queue in ("only-w1", "only-w2"):
            app.send_task("hero.run_story", args=[payload], queue=queue, task_id=task_id)
        wait_for(
            lambda: w1.received() and w2.received(), "both deliveries received", procs=(w1, w2)
        )
        # the one that took the lease waits at the gate; the other one returns at once
        busy = wait_for(
            lambda: [r for w in (w1, w2) for r in w.results() if r["status"] == "busy"],
            "the second delivery turned away",
            procs=(w1, w2),
        )
        assert len(busy) == 1
    finally:
        gate.set()
    results = wait_for(
        lambda: (found := w1.results() + w2.results()) and len(found) == 2 and found,
        "both deliveries done",
        procs=(w1, w2),
    )
    assert sorted(r["status"] for r in results) == ["busy", "passed"]
    assert [w.ran("d1") for w in (w1, w2)].count(True) == 1
    once_per_turn(model, "d1")
    assert json.loads(store.state("d1").value).get("status") == "passed"
    app.close()


# --------------------------------------------------------------------------- restarts


@pytest.mark.slow
def test_broker_restart_mid_run_loses_no_story_and_runs_none_twice(
    cluster: Cluster, scripted, write_story, remote: Path
) -> None:
    gate = threading.Event()
    model = scripted(Policy(gates={"b1": gate}), latency_s=0.1)
    home = cluster.home(model)
    ids = ["b1", "b2", "b3", "b4"]
    for sid in ids:
        backlog(write_story(home, sid, verify=[f"test -f {sid}-r1.txt"]))
    workers = [cluster.start_worker() for _ in range(2)]
    coordinator = cluster.start_coordinator("--exit-when-idle")
    procs = (coordinator, *workers)
    try:
        wait_for(lambda: worker_turns(model, "b1"), "b1 running on a worker", procs=procs)
        cluster.redis.restart()  # every key lost: queued tasks, leases, pending marks
        # the worker running b1 takes its lease again at its next renewal
        wait_for(
            lambda: cluster.redis.client().get("hero:lease:b1"),
            "b1's lease taken again in the new redis",
            procs=procs,
        )
    finally:
        gate.set()

    assert coordinator.wait_exit() == 0, cluster.outputs()
    for sid in ids:
        state = coordinator.state(sid)
        assert state is not None and state["status"] == "passed", (sid, cluster.outputs())
        assert [r["round"] for r in state["rounds"]] == [1]
        assert state["runs"] == 1
        once_per_turn(model, sid)
        assert branch_sha(remote, f"hero/{sid}") == state["head_sha"]
        assert [w.ran(sid) for w in workers].count(True) == 1


@pytest.mark.slow
def test_a_broker_restart_just_after_a_story_ended_does_not_run_it_again(
    cluster: Cluster, scripted, write_story
) -> None:
    """The story ends on its worker, and Redis loses its data before the coordinator has
    looked (here the coordinator is stopped meanwhile): the ending must not be lost with
    it. Lost, the story would look lost (no lease, no pending mark, no end) and be sent
    again, and its checks and review run twice (the flake of the broker restart test: a
    story ending in the instant before the restart). The worker keeps its ending, and the
    lease, until the coordinator says it has it, and publishes it again after the restart."""
    gate = threading.Event()
    model = scripted(Policy(gates={"e1": gate}))
    home = cluster.home(model)
    backlog(write_story(home, "e1", verify=["test -f e1-r1.txt"]))
    worker = cluster.start_worker()
    coordinator = cluster.start_coordinator("--exit-when-idle")
    procs = (coordinator, worker)
    try:
        wait_for(lambda: worker_turns(model, "e1"), "e1 running", procs=procs)
        coordinator.proc.send_signal(signal.SIGSTOP)  # it looks no more, for now
    finally:
        gate.set()
    try:
        wait_for(
            lambda: (
                (worker.state("e1") or {}).get("status") == "passed"
                and cluster.redis.client().get("hero:done:e1")
            ),
            "e1 ended on its worker",
            procs=(worker,),
        )
        cluster.redis.restart()  # the ending, the record, the lease: gone
        worker.wait_output("published again", timeout=30)
    finally:
        coordinator.proc.send_signal(signal.SIGCONT)

    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("e1")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert state["runs"] == 1
    once_per_turn(model, "e1")
    assert len(coordinator.events("sent", story="e1")) == 1
    assert len(worker.received()) == 1
    assert (home / "done" / "e1.md").is_file()


@pytest.mark.slow
def test_coordinator_killed_mid_run_then_restarted_follows_the_story_to_its_end(
    cluster: Cluster, scripted, write_story, target_repo: Path, remote: Path
) -> None:
    gate = threading.Event()
    model = scripted(Policy(gates={"c1": gate}))
    home = cluster.home(model)
    backlog(write_story(home, "c1", verify=["test -f c1-r1.txt"]))
    workers = [cluster.start_worker() for _ in range(2)]
    first = cluster.start_coordinator()
    try:
        wait_for(
            lambda: worker_turns(model, "c1"), "c1 running on a worker", procs=(first, *workers)
        )
        first.kill9()
        second = cluster.start_coordinator("--exit-when-idle")
        # it finds the story's lease and follows that run instead of sending another
        second.wait_event("following", story="c1")
    finally:
        gate.set()

    assert second.wait_exit() == 0, cluster.outputs()
    assert second.events("sent", story="c1") == []
    state = second.state("c1")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert [r["round"] for r in state["rounds"]] == [1]
    assert state["runs"] == 1
    once_per_turn(model, "c1")
    assert [w.ran("c1") for w in workers].count(True) == 1
    assert sum(len(w.received()) for w in workers) == 1
    assert branch_sha(target_repo, "hero/c1") == branch_sha(remote, "hero/c1") == state["head_sha"]
    assert (home / "done" / "c1.md").is_file()


@pytest.mark.slow
def test_a_story_that_ended_while_the_coordinator_was_down_is_not_run_again(
    cluster: Cluster, scripted, write_story
) -> None:
    """The worker ends the story (here: it gives up) while no coordinator runs; the next
    coordinator takes that ending as it is, and sends nothing (a resend would give the story
    a fresh budget of rounds and pay for them again)."""
    gate = threading.Event()
    no = verdict("CHANGES_REQUESTED", "Not yet.")
    model = scripted(Policy(gates={"g1": gate}, reviews={"g1": lambda n: no}))
    home = cluster.home(model, max_retries=1)
    backlog(write_story(home, "g1", verify=["true"]))
    worker = cluster.start_worker()
    first = cluster.start_coordinator()
    try:
        wait_for(lambda: worker_turns(model, "g1"), "g1 on its worker", procs=(first, worker))
        first.kill9()
    finally:
        gate.set()
    wait_for(
        lambda: (worker.state("g1") or {}).get("status") == "gave_up",
        "g1 given up on its worker",
        procs=(worker,),
    )
    second = cluster.start_coordinator("--exit-when-idle")
    assert second.wait_exit() == 0, cluster.outputs()
    assert second.events("sent", story="g1") == []
    state = second.state("g1")
    assert state is not None and state["status"] == "gave_up", cluster.outputs()
    assert [r["round"] for r in state["rounds"]] == [1]
    assert reviews_of(model, "g1") == 1  # one round, paid once
    assert len(worker.received()) == 1


# --------------------------------------------------------------------------- long stories


@pytest.mark.slow
def test_a_healthy_story_longer_than_the_visibility_timeout_is_not_redelivered(
    cluster: Cluster, scripted, write_story
) -> None:
    """Redis hands a task taken but not acknowledged to another consumer once the visibility
    timeout has passed; a consumer sweeps for such tasks when it starts polling. Here the
    timeout is 1 s, the story runs for longer, and a second worker starts meanwhile: it must
    not be handed the story (hero acknowledges a task when a worker starts it)."""
    gate = threading.Event()
    model = scripted(Policy(gates={"v1": gate}))
    home = cluster.home(model, broker_visibility_timeout_s=1)
    backlog(write_story(home, "v1", verify=["test -f v1-r1.txt"]))
    first = cluster.start_worker()
    coordinator = cluster.start_coordinator("--exit-when-idle")
    try:
        wait_for(
            lambda: worker_turns(model, "v1"), "v1 running on a worker", procs=(coordinator, first)
        )
        time.sleep(2.5)  # the story has run longer than the visibility timeout
        second = cluster.start_worker()  # its first poll sweeps for expired tasks
        time.sleep(3.0)  # time for a redelivery to show, were there one
    finally:
        gate.set()

    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("v1")
    assert state is not None and state["status"] == "passed"
    assert state["runs"] == 1
    once_per_turn(model, "v1")
    assert len(first.received()) == 1
    assert second.received() == [], cluster.outputs()
    assert len(coordinator.events("sent", story="v1")) == 1


# --------------------------------------------------------------------------- refusals


OLDER_HERO = "import hero\nhero.__version__ = '0.0.1'"


def wait_refused(coordinator, sid: str) -> dict:
    """The coordinator's record of ``sid`` once it has ended in error; fails at once if the
    coordinator sends the refused story again instead."""

    def ended() -> dict | None:
        state = coordinator.state(sid)
        if state is not None and state["status"] == "error":
            return state
        if len(coordinator.events("sent", story=sid)) > 1:
            pytest.fail(f"{sid} was refused, then sent again:\n{coordinator.output()[-4000:]}")
        return None

    return wait_for(ended, f"{sid} ended in error", procs=(coordinator,))


@pytest.mark.slow
def test_a_worker_refuses_a_story_from_another_hero_version(
    cluster: Cluster, scripted, write_story
) -> None:
    """An older coordinator (its hero.__version__ 0.0.1) sends a story: the worker refuses
    it, and says why in the coordinator's record and log."""
    model = scripted(Policy())
    home = cluster.home(model)
    backlog(write_story(home, "old1", verify=["true"]))
    cluster.start_worker()
    coordinator = cluster.start_coordinator("--exit-when-idle", prelude=OLDER_HERO)

    state = wait_refused(coordinator, "old1")
    assert "hero 0.0.1" in state["error"] and "hero 0.1.0" in state["error"]
    assert coordinator.wait_exit() == 0, cluster.outputs()
    assert "refused" in coordinator.output() and "hero 0.0.1" in coordinator.output()
    assert len(coordinator.events("sent", story="old1")) == 1
    assert worker_turns(model, "old1") == []
    assert (home / "inbox" / "old1.md").is_file()  # left for a worker of its version


@pytest.mark.slow
def test_a_worker_that_cannot_reach_the_remote_refuses(
    cluster: Cluster, scripted, write_story, tmp_path: Path
) -> None:
    model = scripted(Policy())
    home = cluster.home(model)
    backlog(write_story(home, "far1", verify=["true"]))
    nowhere = tmp_path / "no-such-remote.git"
    cluster.start_worker(target_remote=str(nowhere))
    coordinator = cluster.start_coordinator("--exit-when-idle")

    state = wait_refused(coordinator, "far1")
    assert "target_remote" in state["error"] and str(nowhere) in state["error"]
    assert coordinator.wait_exit() == 0, cluster.outputs()
    assert str(nowhere) in coordinator.output()
    assert len(coordinator.events("sent", story="far1")) == 1
    assert worker_turns(model, "far1") == []


@pytest.mark.slow
def test_a_token_in_the_remote_url_never_reaches_the_coordinator(
    cluster: Cluster, scripted, write_story
) -> None:
    """A worker refusing a remote it cannot reach quotes the URL, less its credential."""
    model = scripted(Policy())
    home = cluster.home(model)
    backlog(write_story(home, "tok1", verify=["true"]))
    secret = "ghp-not-a-real-token-4242"
    cluster.start_worker(target_remote=f"http://hero:{secret}@127.0.0.1:9/app.git")
    coordinator = cluster.start_coordinator("--exit-when-idle")

    state = wait_refused(coordinator, "tok1")
    assert "target_remote" in state["error"] and "127.0.0.1:9" in state["error"]
    assert coordinator.wait_exit() == 0, cluster.outputs()
    record = (home / "runs" / "state" / "tok1.json").read_text()
    assert secret not in record and secret not in coordinator.output()


@pytest.mark.slow
def test_a_worker_calls_itself_as_celery_does(cluster: Cluster, scripted) -> None:
    cluster.home(scripted(Policy()))
    worker = cluster.start_worker("w1")  # --hostname w1@%h
    celery_name = worker.wait_output(r"(\S+@\S+) ready\.").group(1)
    assert celery_name == f"w1@{socket.gethostname()}"
    assert f"hero worker ready: {celery_name}," in worker.output()


# --------------------------------------------------------------------------- set-up


@pytest.mark.slow
def test_the_local_engine_imports_nothing_of_celery_or_redis(
    make_home, scripted, write_story, tmp_path: Path
) -> None:
    model = scripted(Policy())
    home = make_home(model, engine="local")
    backlog(write_story(home, "l1", verify=["test -f l1-r1.txt"]))
    probe = (
        "import sys\n"
        "from hero.cli import main\n"
        "codes = [main(['--home', sys.argv[1], 'status']),\n"
        "         main(['--home', sys.argv[1], 'watch', '--exit-when-idle', '--log-format', 'json'])]\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'kombu', 'redis'))\n"
        "print('LOADED', loaded, 'CODES', codes)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(home)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=tmp_path,
    )
    assert "LOADED [] CODES [0, 0]" in done.stdout, done.stdout + done.stderr
    assert json.loads((home / "runs" / "state" / "l1.json").read_text())["status"] == "passed"


# --------------------------------------------------------------------------- plans


@pytest.mark.slow
def test_a_plan_runs_on_workers_with_code_flowing_along_its_edges(
    cluster: Cluster, scripted, target_repo: Path, remote: Path
) -> None:
    """A diamond plan (a; b and c on a; d on b and c) over two workers: each story starts
    from its dependencies' passed heads (which only the remote and the records carry from
    machine to machine), and the coordinator finishes the plan's branch."""

    model = scripted(Policy())
    home = cluster.home(model)
    folder = write_plan(home, "dia", {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    for sid, deps, needs in (
        ("b", ["a"], ["a"]),
        ("c", ["a"], ["a"]),
        ("d", ["b", "c"], ["a", "b", "c"]),
    ):  # each story's check needs the files its dependencies committed
        write_plan_story(
            folder,
            sid,
            deps=deps,
            verify=[f"test -f {n}-r1.txt" for n in [*needs, sid]],
        )
    write_plan_story(folder, "a", verify=["test -f a-r1.txt"])
    backlog(*sorted(folder.glob("*.md")))
    for _ in range(2):
        cluster.start_worker()

    coordinator = cluster.start_coordinator("--exit-when-idle")
    assert coordinator.wait_exit() == 0, cluster.outputs()

    def record(sid: str) -> dict:
        path = home / "runs" / "state" / "plans" / "dia" / f"{sid}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    for sid in "abcd":
        state = record(sid)
        assert state.get("status") == "passed", (sid, state, cluster.outputs())
        assert [r["round"] for r in state["rounds"]] == [1]
        assert branch_sha(remote, f"hero/plans/dia/{sid}") == state["head_sha"]
    d_head = record("d")["head_sha"]
    for sid in "abc":
        head = record(sid)["head_sha"]
        assert is_ancestor(remote, head, d_head), sid
    # the plan's branch, made here from the branches the coordinator fetched
    plan_branch = branch_sha(target_repo, "hero/plan/dia")
    assert plan_branch is not None
    assert is_ancestor(target_repo, d_head, "hero/plan/dia")
    assert (home / "done" / "dia" / "d.md").is_file()


@pytest.mark.slow
def test_a_task_that_fails_on_its_worker_ends_the_story_in_error_once(
    cluster: Cluster, scripted, write_story
) -> None:
    """Whatever a worker cannot foresee (here a story text that is no story, sent as a
    broken or hostile coordinator could) ends that story in error with the reason and the
    dispatch marked over: it does not come back to some worker every lease for ever."""
    model = scripted(Policy())
    home = cluster.home(model)
    path = write_story(home, "bad1", verify=["true"])
    worker = cluster.start_worker()
    run, store, app = coordinator_side(home, path)
    run.dispatch = "1" * 32
    payload = run.seal.sign_task({**run.payload(), "story_text": "no frontmatter, no story\x00"})
    app.send_task("hero.run_story", args=[payload], task_id=f"bad1-{run.dispatch}")
    done = wait_for(lambda: store.done("bad1"), "the dispatch marked over", procs=(worker,))
    assert done["dispatch"] == run.dispatch and done["status"] == "error"
    record = json.loads(store.state("bad1").value)
    assert record["status"] == "error"
    assert record["error"].startswith("worker w1@") and "failed: StoryError" in record["error"]
    # the lease is let go once the coordinator has the ending (here: the test says so)
    store.mark_mirrored("bad1", run.dispatch)
    wait_for(lambda: store.holder("bad1") is None, "the lease let go", procs=(worker,))
    assert worker_turns(model, "bad1") == []
    app.close()


def test_a_file_the_worker_wrote_anew_replaces_the_coordinators_copy(
    cluster: Cluster, scripted, write_story
) -> None:
    """Traces only grow and are appended to; a verify log written again, shorter (its
    round run again after a worker died in the checks), replaces the copy whole."""
    home = cluster.home(scripted(Policy()))
    path = write_story(home, "v1", verify=["true"])
    run, store, app = coordinator_side(home, path)
    owner = "test-worker"
    assert store.take("v1", owner)
    run_dir = home / "runs" / "v1"
    seal = run.seal

    def put(name: str, data: bytes) -> None:
        store.set_file("v1", owner, name, data, seal.seal_file("v1", name, data))

    put("round-1.jsonl", b'{"event": "a"}\n')
    put("verify-r1.log", b"a long log from the first try\n")
    run._mirror()
    assert (run_dir / "verify-r1.log").read_bytes() == b"a long log from the first try\n"
    whole = b'{"event": "a"}\n{"event": "b"}\n'
    assert store.append_file(
        "v1",
        owner,
        "round-1.jsonl",
        b'{"event": "b"}\n',
        15,
        seal.seal_file("v1", "round-1.jsonl", whole),
    )
    put("verify-r1.log", b"retried\n")
    run._mirror()
    assert (run_dir / "round-1.jsonl").read_bytes() == b'{"event": "a"}\n{"event": "b"}\n'
    assert (run_dir / "verify-r1.log").read_bytes() == b"retried\n"
    app.close()
