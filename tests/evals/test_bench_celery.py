"""`hero bench run` on the Celery engine: task-runs sent to real ``hero worker`` processes
over a real redis-server (skipped without one, see engine_support). The configuration's
overrides reach the worker (its scripted model is the configuration's); the worker's
repositories hold nothing after the task's base; a `kill -9` of the bench mid-run then a
re-run sends no task-run twice."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench_support import overrides
from bench_tasks import GATE, bench_args, handler, make_repo
from engine_support import Cluster
from helpers import is_review, task_text

from hero.cli import main
from hero.evals.dispatch import dispatched_path
from hero.evals.results import predictions_path, read_results, results_path
from hero.evals.tasks import Task, write_tasks
from hero.git.ops import git
from hero.llm.scripted import ScriptedModel


def bench_home(
    cluster: Cluster, tmp_path: Path, **knobs: object
) -> tuple[ScriptedModel, Path, Path, list[Task], dict[str, list[str]]]:
    model = ScriptedModel(handler).start()
    repo, tasks, future = make_repo(tmp_path)
    home = cluster.home(model, target_repo=str(repo), max_retries=1, **knobs)
    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, tasks)
    return model, home, tasks_file, tasks, future


def story_runs(cluster: Cluster) -> list[str]:
    """The story of every run a worker started (its task's result), all workers."""
    return [r["key"] for w in cluster.workers for r in w.results()]


@pytest.mark.slow
def test_two_workers_resolve_every_task_and_see_no_future(cluster: Cluster, tmp_path: Path):
    model, home, tasks_file, tasks, future = bench_home(cluster, tmp_path, max_parallel=4)
    try:
        w1, w2 = cluster.start_worker(), cluster.start_worker()
        out = tmp_path / "out"
        fixer = overrides(tmp_path, "A", "worker:\n  model: fixer\n")
        spy = overrides(tmp_path, "S", "worker:\n  model: spy\n")
        # a provider the bench's home has and the workers' have not: they cannot apply it
        providers = home / "config" / "providers"
        (providers / "other.yaml").write_text(
            (providers / "scripted.yaml").read_text().replace("name: scripted", "name: other")
        )
        other = overrides(tmp_path, "X", "worker: {provider: other, model: fixer}\n")
        args = bench_args(home, tasks_file, out, fixer, spy, other)
        assert main(args) == 0, cluster.outputs()
        results = read_results(results_path(out, "A"))
        assert sorted(r.instance_id for r in results) == sorted(t.instance_id for t in tasks)
        assert all(r.resolved for r in results), results
        assert all(r.tokens > 0 and r.rounds >= 1 for r in results), results
        preds = [json.loads(x) for x in predictions_path(out, "A").read_text().splitlines()]
        assert {p["model_name_or_path"] for p in preds} == {"fixer"}
        for p in preds:
            assert f"+    return x * {p['instance_id'][-1]}" in p["model_patch"]
        assert not any(r.resolved for r in read_results(results_path(out, "S")))
        # the configuration a worker could not apply: each story ended in error, saying why
        for row in results_path(out, "X").read_text().splitlines():
            x = json.loads(row)
            assert x["status"] == "error" and not x["resolved"], x
            assert "overrides sent with bench story" in x["error"], x
            assert "worker.provider" in x["error"] and "other.yaml" in x["error"], x
        # the overrides reached the workers: each worker request asked for its configuration's
        asked = {r.body.get("model") for r in model.requests if not is_review(r.body)}
        assert asked == {"fixer", "spy"}
        # each story ran once, on some worker, from the task-run's own repository
        rows = [
            json.loads(x)
            for name in "ASX"
            for x in results_path(out, name).read_text().splitlines()
        ]
        assert sorted(story_runs(cluster)) == sorted(row["story_id"] for row in rows)
        rows = [row for row in rows if not row["story_id"].startswith("bench-x-")]
        for w in (w1, w2):
            assert not (w.workdir / "repo").exists()  # its clone of target_remote: unused
        for row in rows:
            key = row["story_id"]
            ran = [w for w in (w1, w2) if w.ran(key)]
            assert len(ran) == 1, key
            # the spy wrote nothing; the fixer wrote the fixed module, whose blob is the
            # reference's: every other object of the future is absent
            unseen = future[row["instance_id"]]
            if key.startswith("bench-a-"):
                unseen = [sha for n, sha in enumerate(unseen) if n != 1]
            for repo in (ran[0].workdir / "bench" / key / "repo", ran[0].worktree(key)):
                objects = git(repo, "cat-file", "--batch-all-objects", "--batch-check")
                refs = git(repo, "for-each-ref")
                assert task_base(tasks, row) in git(repo, "log", "--all", "--format=%H")
                for sha in unseen:
                    assert sha not in objects and sha not in refs, (repo, sha)
            alternates = repo_alternates(ran[0].worktree(key))
            assert all(str(ran[0].workdir / "repo") not in a for a in alternates)
        # and what the spy's commands saw, on its worker
        seen = spy_outputs(model)
        assert set(seen) == {t.instance_id for t in tasks}
        for task in tasks:
            assert task.base_commit in seen[task.instance_id]
            for sha in future[task.instance_id]:
                assert sha not in seen[task.instance_id], (task.instance_id, sha)
    finally:
        model.stop()


def spy_outputs(model: ScriptedModel) -> dict[str, str]:
    seen: dict[str, str] = {}
    for request in model.requests:
        body = request.body
        if is_review(body) or body.get("model") != "spy":
            continue
        m = re.search(r"TASK-m(\d+)", task_text(body))
        assert m
        output = "\n".join(
            str(msg.get("content")) for msg in body["messages"] if msg.get("role") == "tool"
        )
        if output:
            seen[f"repo__m{m.group(1)}"] = output
    return seen


def task_base(tasks: list[Task], row: dict[str, object]) -> str:
    return next(t.base_commit for t in tasks if t.instance_id == row["instance_id"])


def repo_alternates(worktree: Path) -> list[str]:
    gitdir = git(worktree, "rev-parse", "--absolute-git-dir").strip()
    path = Path(gitdir) / "objects" / "info" / "alternates"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
def test_kill_of_the_bench_then_rerun_sends_no_task_run_twice(cluster: Cluster, tmp_path: Path):
    model, home, tasks_file, tasks, _ = bench_home(cluster, tmp_path, max_parallel=1)
    GATE.clear()
    try:
        cluster.start_worker()
        cluster.start_worker()
        out = tmp_path / "out"
        args = bench_args(
            home, tasks_file, out, overrides(tmp_path, "A", "worker: {model: gated}\n")
        )
        results = results_path(out, "A")
        proc = subprocess.Popen(
            [sys.executable, "-m", "hero", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=cluster.env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and proc.poll() is None:
                sent = dispatched_path(out, "A")
                if results.exists() and sent.exists() and sent.read_text().count("\n") >= 2:
                    break
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            GATE.set()
        # killed while the second task-run waited on its model, on its worker
        assert len(results.read_text().splitlines()) == 1
        assert main(args) == 0, cluster.outputs()
        rows = [json.loads(x) for x in results.read_text().splitlines()]
        assert sorted(r["instance_id"] for r in rows) == sorted(t.instance_id for t in tasks)
        assert all(r["resolved"] for r in rows), rows
        assert len(read_results(results)) == len(tasks)
        sent_rows = [json.loads(x) for x in dispatched_path(out, "A").read_text().splitlines()]
        assert sorted(r["story_id"] for r in sent_rows) == sorted(r["story_id"] for r in rows)
        # the workers ran each story once: the one under way was awaited, not sent again
        assert sorted(story_runs(cluster)) == sorted(r["story_id"] for r in rows)
    finally:
        GATE.set()
        model.stop()


@pytest.mark.slow
def test_a_worker_killed_mid_task_run_another_finishes_it(cluster: Cluster, tmp_path: Path):
    model, home, tasks_file, tasks, _ = bench_home(cluster, tmp_path, max_parallel=1)
    GATE.clear()
    try:
        w1 = cluster.start_worker()
        out = tmp_path / "out"
        args = bench_args(
            home, tasks_file, out, overrides(tmp_path, "A", "worker: {model: gated}\n")
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "hero", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=cluster.env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and proc.poll() is None:
                if any(
                    "TASK-m2" in task_text(r.body) for r in model.requests if not is_review(r.body)
                ):
                    break
                time.sleep(0.05)
            w1.kill9()  # while the second task-run's worker waits on its model
            w2 = cluster.start_worker()
            GATE.set()
            assert proc.wait(timeout=240) == 0, cluster.outputs()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        rows = [json.loads(x) for x in results_path(out, "A").read_text().splitlines()]
        assert sorted(r["instance_id"] for r in rows) == sorted(t.instance_id for t in tasks)
        assert all(r["resolved"] for r in rows), rows
        second = next(r["story_id"] for r in rows if r["instance_id"] == "repo__m2")
        # taken over from the task-run's own repository, never from a clone of target_remote
        assert w2.ran(second) and (w2.workdir / "bench" / second / "repo").is_dir()
        assert not (w2.workdir / "repo").exists()
    finally:
        GATE.set()
        model.stop()
