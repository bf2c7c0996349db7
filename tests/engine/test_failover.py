"""End to end: failover with the Celery engine keeps the work in progress, and the
coordinator outlives its workers. Real redis-server, real ``hero worker`` and ``hero
watch`` processes, a real bare remote (see engine_support); the scripted model answers
every machine.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from engine_support import (
    ENGINE_KEY,
    Cluster,
    Policy,
    branch_sha,
    story_of,
    wait_for,
    wait_pid_file,
)
from helpers import backlog, commit_once, is_review, verdict, worker_round

from hero.engine.wip import RESTORED
from hero.llm.scripted import call, text


def long_once(pid_file: str, flag: Path) -> str:
    """Sleep in a background child (its pid in ``pid_file``) until killed, unless ``flag``
    exists: the worker that takes the story over runs on at once."""
    return (
        f"test -f {flag} || "
        f"{{ sleep 60 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait; }}"
    )


def wip_mark(cluster: Cluster, key: str) -> dict[str, Any] | None:
    """The snapshot's mark the story's worker last published (below its seal's line)."""
    value = cluster.redis.client().get(f"hero:wip:{key}")
    return json.loads(value.partition("\n")[2]) if value else None


@pytest.mark.slow
def test_a_worker_killed_between_a_write_and_its_commit_loses_no_round(
    cluster: Cluster, scripted, write_story, remote: Path, tmp_path: Path
) -> None:
    """Round 2 writes a file, then (a turn later, while a command runs) the worker dies
    before the commit. The next worker puts the file back, so the commit the resumed
    conversation asks for works and the story passes in round 2, as a run never killed
    does."""
    killed = tmp_path / "killed"
    round2 = [
        call("write_file", path="k3-wip.txt", content="kept across machines\n"),
        call("bash", command=long_once("child.pid", killed)),
        call("bash", command="git add k3-wip.txt && git commit -q -m k3-wip"),
        text("Round 2 done."),
    ]
    base = Policy(plans={"k3": {2: round2}})

    def model_answer(body: dict[str, Any]):
        if is_review(body) and story_of(body) == "k3":
            # the reviewer sees the diff: round 2 passes only with the file committed
            shown = json.dumps(body)
            if "Verifier summary (round 1)" in shown:
                return verdict("CHANGES_REQUESTED", "Add k3-wip.txt.")
            return verdict("APPROVED" if "kept across machines" in shown else "CHANGES_REQUESTED")
        return base(body)

    model = scripted(model_answer)
    home = cluster.home(model)
    backlog(write_story(home, "k3", verify=["test -f k3-r1.txt"], max_retries=3))
    workers = [cluster.start_worker() for _ in range(2)]
    coordinator = cluster.start_coordinator("--exit-when-idle")
    procs = (coordinator, *workers)

    victim = wait_for(
        lambda: next((w for w in workers if (w.worktree("k3") / "child.pid").is_file()), None),
        "the long command running on a worker",
        procs=procs,
    )
    wait_pid_file(victim.worktree("k3") / "child.pid")
    # the snapshot of the turn that wrote the file is on the remote, its mark in Redis
    mark = wait_for(
        lambda: (m := wip_mark(cluster, "k3")) and m["round"] == 2 and m["sha"] and m,
        "round 2's snapshot published",
        procs=procs,
    )
    assert git(remote, "rev-parse", "refs/hero/wip/hero/k3").strip() == mark["sha"]
    shown = git(remote, "show", f"{mark['sha']}:k3-wip.txt")
    assert shown == "kept across machines\n"
    (heir,) = [w for w in workers if w is not victim]

    killed.touch()
    victim.kill9()
    assert coordinator.wait_exit() == 0, cluster.outputs()

    state = coordinator.state("k3")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert [r["round"] for r in state["rounds"]] == [1, 2], cluster.outputs()  # as unkilled
    assert state["runs"] == 2 and heir.ran("k3")
    tip = branch_sha(remote, "hero/k3")
    assert tip == state["head_sha"]
    # the worker's own commit of the file it wrote before the kill
    subjects = git(remote, "log", "--format=%s", f"main..{tip}").splitlines()
    assert "k3-wip" in subjects, subjects
    assert git(remote, "show", f"{tip}:k3-wip.txt") == "kept across machines\n"
    # the resumed conversation was told the truth: the worktree was put back
    resumed = [
        r.body
        for r in list(model.requests)
        if not is_review(r.body) and story_of(r.body) == "k3" and worker_round(r.body) == 2
    ]
    notes = [m["content"] for b in resumed for m in b["messages"] if m["role"] == "user"]
    assert any(RESTORED in n for n in notes), notes
    # the story passed: its snapshot is gone from the remote
    wait_for(lambda: not git(remote, "for-each-ref", "refs/hero/wip/"), "the snapshot dropped")
    assert "the uncommitted work put back" in coordinator.output()


@pytest.mark.slow
def test_a_worker_stopped_mid_turn_hands_over_its_commits_and_its_uncommitted_work(
    cluster: Cluster, scripted, write_story, remote: Path, tmp_path: Path
) -> None:
    """SIGTERM, mid-turn, after a commit and a write: the stop brings the commit onto the
    branch (its tip moves), and the work left is snapshotted again on that tip, so the
    next worker has both and the round passes."""
    killed = tmp_path / "killed"
    round2 = [
        call("bash", command=commit_once("k5-a")),
        call("write_file", path="k5-b.txt", content="uncommitted at the stop\n"),
        call("bash", command=long_once("child.pid", killed)),
        call("bash", command="git add k5-b.txt && git commit -q -m k5-b"),
        text("Round 2 done."),
    ]
    base = Policy(plans={"k5": {2: round2}})

    def model_answer(body: dict[str, Any]):
        if is_review(body) and story_of(body) == "k5":
            shown = json.dumps(body)
            if "Verifier summary (round 1)" in shown:
                return verdict("CHANGES_REQUESTED", "More.")
            return verdict("APPROVED" if "uncommitted at the stop" in shown else "REJECTED")
        return base(body)

    model = scripted(model_answer)
    home = cluster.home(model)
    backlog(write_story(home, "k5", verify=["test -f k5-r1.txt"], max_retries=3))
    workers = [cluster.start_worker() for _ in range(2)]
    coordinator = cluster.start_coordinator("--exit-when-idle")
    procs = (coordinator, *workers)
    victim = wait_for(
        lambda: next((w for w in workers if (w.worktree("k5") / "child.pid").is_file()), None),
        "the long command running on a worker",
        procs=procs,
    )
    wait_pid_file(victim.worktree("k5") / "child.pid")
    killed.touch()
    victim.stop()  # SIGTERM: the worker stops its stories, recorded as interrupted
    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("k5")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert [r["round"] for r in state["rounds"]] == [1, 2], cluster.outputs()
    subjects = git(remote, "log", "--format=%s", f"main..{state['head_sha']}").splitlines()
    assert "k5-a" in subjects and "k5-b" in subjects, subjects


@pytest.mark.slow
def test_work_holding_a_secret_is_not_published_and_the_resumed_round_is_told(
    cluster: Cluster, scripted, write_story, remote: Path, tmp_path: Path
) -> None:
    """The worker writes a file holding a secret hero knows (the engine key), then dies
    before committing it: no snapshot of it leaves the machine, and the worker that
    resumes the round is told its uncommitted work was not kept, and why."""
    killed = tmp_path / "killed"
    plan = [
        call("write_file", path="leak.txt", content=f"key: {ENGINE_KEY}\n"),
        call("bash", command=long_once("child.pid", killed)),
        call("bash", command="git add leak.txt; git status --short > seen.txt; true"),
        text("Round 1 done."),
    ]
    model = scripted(Policy(plans={"k4": {1: plan}}))
    home = cluster.home(model)
    backlog(write_story(home, "k4", verify=["true"], allow_empty=True, max_retries=1))
    workers = [cluster.start_worker() for _ in range(2)]
    coordinator = cluster.start_coordinator("--exit-when-idle")
    procs = (coordinator, *workers)
    victim = wait_for(
        lambda: next((w for w in workers if (w.worktree("k4") / "child.pid").is_file()), None),
        "the long command running on a worker",
        procs=procs,
    )
    mark = wait_for(
        lambda: (m := wip_mark(cluster, "k4")) and m["refused"] and m,
        "the refused snapshot's mark",
        procs=procs,
    )
    assert mark["sha"] == "" and "leak.txt" in mark["refused"]
    assert ENGINE_KEY not in mark["refused"]
    killed.touch()
    victim.kill9()
    assert coordinator.wait_exit() == 0, cluster.outputs()
    # nothing of it on the remote, under any ref
    for ref in git(remote, "for-each-ref", "--format=%(refname)").split():
        shown = subprocess.run(
            ["git", "grep", "-q", ENGINE_KEY, ref], cwd=remote, capture_output=True
        )
        assert shown.returncode == 1, ref
    resumed = [
        r.body for r in list(model.requests) if not is_review(r.body) and story_of(r.body) == "k4"
    ]
    notes = [m["content"] for b in resumed for m in b["messages"] if m["role"] == "user"]
    told = [n for n in notes if "hero did not keep a snapshot of them" in n]
    assert told and "leak.txt held a secret value" in told[0], notes
    assert ENGINE_KEY not in told[0]


@pytest.mark.slow
def test_a_task_taken_by_a_worker_that_died_before_its_lease_is_sent_again(
    cluster: Cluster, scripted, write_story
) -> None:
    """Celery acknowledges a task as a worker starts it, and hero's lease comes a moment
    later: a worker killed in between leaves the story's pending mark with no lease and
    its task in no queue. The coordinator finds it gone from the broker and sends it
    again, rather than wait for ever. (The task is taken off the queue here by hand, as
    such a worker would have.)"""
    model = scripted(Policy())
    home = cluster.home(model)
    backlog(write_story(home, "d1", verify=["test -f d1-r1.txt"]))
    coordinator = cluster.start_coordinator("--exit-when-idle")
    first = coordinator.wait_event("sent")
    broker = cluster.redis.client()
    taken = wait_for(lambda: broker.lpop("hero:kombu:hero"), "the task in the queue")
    assert first["dispatch"] in taken
    assert broker.get("hero:pending:d1") == first["dispatch"]  # the mark left behind
    again = coordinator.wait_event("sent again", timeout=120)
    assert again["story"] == "d1"
    worker = cluster.start_worker()
    assert coordinator.wait_exit() == 0, cluster.outputs()
    state = coordinator.state("d1")
    assert state is not None and state["status"] == "passed", cluster.outputs()
    assert [r["round"] for r in state["rounds"]] == [1] and worker.ran("d1")


def hogs(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` CPU hogs (``yes``), for a test that must hold on a loaded machine."""
    return [
        subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, start_new_session=True)
        for _ in range(n)
    ]


@pytest.mark.slow
def test_the_coordinator_outlives_a_worker_killed_under_load(
    cluster: Cluster, scripted, write_story
) -> None:
    """Six stories, two workers of two slots, one worker killed with SIGKILL the moment one
    of its stories has committed (its branch being pushed, its record published), on a
    machine kept busy: the coordinator runs every story to its end, and exits, 0, only
    when idle. Its log is in the failure's message."""
    model = scripted(Policy(), latency_s=0.3)
    home = cluster.home(model)
    ids = [f"h{n}" for n in range(1, 7)]
    for sid in ids:
        # any round's file: a story killed inside a command loses that round's work (its
        # result is said lost; the scripted model does not run it again), so it passes in
        # its next round, and only a story that ran out of rounds fails
        backlog(write_story(home, sid, verify=[f"ls {sid}-r*.txt"], max_retries=3))
    load = hogs(2)  # one per core of a 2-core machine, beside the test's own processes
    try:
        workers = [cluster.start_worker(concurrency=2) for _ in range(2)]
        coordinator = cluster.start_coordinator("--exit-when-idle")
        procs = (coordinator, *workers)

        def committed() -> Any:
            for w in workers:
                if any((w.worktree(s) / f"{s}-r1.txt").is_file() for s in ids):
                    return w
            return None

        victim = wait_for(committed, "a story's commit on a worker", step=0.02, procs=procs)
        victim.kill9()
        code = coordinator.wait_exit(timeout=600)  # on a timeout: fails with its output
    finally:
        for hog in load:
            hog.kill()
            hog.wait()
    log = coordinator.output()
    assert code == 0, f"the coordinator exited {code}:\n{log[-30000:]}\n{cluster.outputs()}"
    for sid in ids:
        state = coordinator.state(sid)
        assert state is not None and state["status"] == "passed", (sid, state, log[-30000:])


def test_an_error_raised_inside_the_broker_client_is_a_broker_error() -> None:
    """The broker's client libraries fail with Python's own exceptions too (a TypeError, an
    AttributeError from a channel torn down under another thread): where it was raised
    decides, so the coordinator waits and looks again rather than giving the story up."""
    import kombu.utils.url

    from hero.engine.remote import _broker_error

    try:
        kombu.utils.url.url_to_parts(None)  # type: ignore[arg-type]
    except TypeError as exc:
        assert _broker_error(exc)
    try:
        {}["hero's own"]
    except KeyError as exc:
        assert not _broker_error(exc)


class Said:
    """A logger that keeps what it was told (the dispatcher's is structlog's)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append(("info", event, kw))

    def warning(self, event: str, **kw: Any) -> None:
        self.lines.append(("warning", event, kw))


@pytest.mark.slow
def test_the_coordinator_keeps_watching_a_story_through_failures_it_did_not_foresee(
    cluster: Cluster, scripted, write_story
) -> None:
    """Watching a story fails three times in a way hero did not foresee: the story runs on
    its worker all the same, so the coordinator does not give it up (which would refuse its
    file, and let `--exit-when-idle` exit): the traceback goes to runs/<id>/error.log, the
    log says it once, and the ending is taken when it comes."""
    import threading

    from hero.config.loader import load_config
    from hero.engine.app import make_app
    from hero.engine.remote import RemoteRun
    from hero.engine.seal import Seal
    from hero.engine.store import Store
    from hero.git.ops import TargetRepo
    from hero.story.format import parse_story

    model = scripted(Policy())
    home = cluster.home(model)
    path = backlog(write_story(home, "f1", verify=["true"]))
    config = load_config(home)
    engine = config.engine
    seal = Seal(engine.key)
    store = Store(engine.state_url, engine.queue, engine.lease_s, seal)
    said = Said()
    run = RemoteRun(
        parse_story(path),
        path,
        config,
        store,
        make_app(engine),
        TargetRepo(config.target_repo),
        said,
        threading.Event(),
    )
    real_mirror = run._mirror
    failures = {"left": 3}

    def flaky_mirror() -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise KeyError("a failure hero did not foresee")
        real_mirror()

    run._mirror = flaky_mirror  # type: ignore[method-assign]
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(state=run.run()), daemon=True)
    thread.start()
    # a worker of the dispatch sent ends it (no worker runs in this test: the store's own
    # calls, under the lease, as a worker makes them)
    dispatch = wait_for(lambda: run.dispatch, "the story sent")
    assert store.take("f1", "test-worker")
    store.clear_pending("f1")
    store.set_done("f1", "test-worker", dispatch, "passed", "test-worker")
    thread.join(120)
    assert not thread.is_alive() and "state" in result, said.lines
    assert failures["left"] == 0
    warned = [kw for level, event, kw in said.lines if event == "watching failed; looking again"]
    assert len(warned) == 1 and "KeyError" in warned[0]["error"], said.lines
    error_log = home / "runs" / "f1" / "error.log"
    assert "a failure hero did not foresee" in error_log.read_text()
