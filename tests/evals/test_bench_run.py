"""`hero bench run`: tasks from a generated repository run as stories under configurations
whose scripted worker writes the reference fix (all resolved), nothing (none), or cheats by
writing the hidden test file itself (none); the worker's repository holds nothing after the
base; a `kill -9` mid-run then a re-run runs no task-run twice."""

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
from bench_support import make_home, overrides
from bench_tasks import (
    GATE,
    N_TASKS,
    bench_args,
    commit,
    diff,
    handler,
    make_repo,
)
from conftest import GIT_ENV, git
from helpers import is_review, task_text

from hero.cli import main
from hero.evals.results import predictions_path, read_results, results_path
from hero.evals.tasks import Task, write_tasks
from hero.llm.scripted import ScriptedModel


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ScriptedModel, Path, Path, list[Task], dict[str, list[str]]]:
    model = ScriptedModel(handler).start()
    repo, tasks, future = make_repo(tmp_path)
    home = make_home(tmp_path, model, repo)
    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, tasks)
    yield model, home, tasks_file, tasks, future
    model.stop()


@pytest.mark.slow
def test_fixer_resolves_all_idle_and_cheater_none(setup, tmp_path: Path, capsys) -> None:
    model, home, tasks_file, tasks, _ = setup
    out = tmp_path / "out"
    configs = [
        overrides(tmp_path, "A", "worker:\n  model: fixer\n"),
        overrides(tmp_path, "B", "worker:\n  model: idle\n"),
        overrides(tmp_path, "C", "worker:\n  model: cheater\n"),
    ]
    code = main([*bench_args(home, tasks_file, out, *configs), "--events"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    resolved = {}
    for name in "ABC":
        results = read_results(results_path(out, name))
        assert sorted((r.instance_id, r.run) for r in results) == sorted(
            (t.instance_id, 1) for t in tasks
        )
        resolved[name] = sum(r.resolved for r in results)
        assert all(r.status != "judge_error" for r in results), results
    assert resolved == {"A": N_TASKS, "B": 0, "C": 0}
    preds = [json.loads(x) for x in predictions_path(out, "A").read_text().splitlines()]
    assert {p["model_name_or_path"] for p in preds} == {"fixer"}
    for p in preds:
        i = p["instance_id"][-1]
        assert f"+    return x * {i}" in p["model_patch"]
    c_results = [json.loads(x) for x in results_path(out, "C").read_text().splitlines()]
    # the story passed (its own checks and review), but the hidden test, put back, fails
    assert all(r["status"] == "passed" for r in c_results)
    assert all(set(r["failed_tests"].values()) == {"FAILED"} for r in c_results)
    events = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert sum(e["event"] == "task_started" for e in events) == 3 * N_TASKS
    assert sum(e["event"] == "task_ended" for e in events) == 3 * N_TASKS
    assert re.search(r"\[\d+/9\] A repo__m1 run 1: resolved", captured.err)


@pytest.mark.slow
def test_cheats_through_the_test_configuration_resolve_nothing(setup, tmp_path: Path) -> None:
    model, home, tasks_file, tasks, _ = setup
    out = tmp_path / "out"
    configs = [
        overrides(tmp_path, "A", "worker:\n  model: fixer\n"),
        overrides(tmp_path, "K", "worker:\n  model: conftester\n"),
        overrides(tmp_path, "D", "worker:\n  model: deselector\n"),
    ]
    assert main(bench_args(home, tasks_file, out, *configs)) == 0
    resolved = {n: sum(r.resolved for r in read_results(results_path(out, n))) for n in "AKD"}
    assert resolved == {"A": N_TASKS, "K": 0, "D": 0}
    for name, cheat in (("K", "conftest.py"), ("D", "pytest.ini")):
        rows = [json.loads(x) for x in results_path(out, name).read_text().splitlines()]
        assert len(rows) == N_TASKS
        for row in rows:
            # the story passed, its cheat is in its prediction, and the hidden test failed
            assert row["status"] == "passed"
            i = row["instance_id"][-1]
            assert row["failed_tests"] == {f"tests/test_m{i}.py::test_fixed": "FAILED"}
        preds = [json.loads(x) for x in predictions_path(out, name).read_text().splitlines()]
        assert all(f"b/{cheat}" in p["model_patch"] for p in preds)


@pytest.mark.slow
def test_the_worker_never_sees_the_future(setup, tmp_path: Path) -> None:
    model, home, tasks_file, tasks, future = setup
    out = tmp_path / "out"
    code = main(
        bench_args(home, tasks_file, out, overrides(tmp_path, "S", "worker: {model: spy}\n"))
    )
    assert code == 0
    seen: dict[str, str] = {}
    for request in model.requests:
        body = request.body
        if is_review(body) or body.get("model") != "spy":
            continue
        m = re.search(r"TASK-m(\d+)", task_text(body))
        assert m
        tool_output = "\n".join(
            str(msg.get("content")) for msg in body["messages"] if msg.get("role") == "tool"
        )
        if tool_output:
            seen[f"repo__m{m.group(1)}"] = tool_output
    assert set(seen) == {t.instance_id for t in tasks}
    for task in tasks:
        found = seen[task.instance_id]
        assert task.base_commit in found  # the spy did see its repository
        for sha in future[task.instance_id]:
            assert sha not in found, f"{task.instance_id}: the worker saw {sha}"
    # and on disk: no story's repository, nor the one it borrows from, holds a later object
    rows = [json.loads(x) for x in results_path(out, "S").read_text().splitlines()]
    for row in rows:
        story_id = row["story_id"]
        for repo in (
            out / "work" / "S" / story_id / "repo",
            out / "homes" / "S" / "worktrees" / story_id,
        ):
            assert (repo / ".git").exists(), repo
            objects = git(repo, "cat-file", "--batch-all-objects", "--batch-check")
            refs = git(repo, "for-each-ref")
            for sha in future[row["instance_id"]]:
                assert sha not in objects and sha not in refs, (repo, sha)


def test_unknown_key_in_overrides_names_file_and_key(setup, tmp_path: Path, capsys) -> None:
    _, home, tasks_file, _, _ = setup
    spec = overrides(tmp_path, "X", "worker:\n  model: fixer\nmax_retriez: 2\n")
    code = main(bench_args(home, tasks_file, tmp_path / "out", spec))
    err = capsys.readouterr().err
    assert code == 2
    assert "X.yaml" in err and "max_retriez" in err


@pytest.mark.slow
def test_kill_mid_run_then_rerun_runs_each_task_once(setup, tmp_path: Path) -> None:
    model, home, tasks_file, tasks, _ = setup
    out = tmp_path / "out"
    GATE.clear()
    spec = overrides(tmp_path, "A", "worker:\n  model: gated\n")
    (home / "config" / "roles.yaml").write_text(
        (home / "config" / "roles.yaml").read_text().replace("max_parallel: 2", "max_parallel: 1")
    )
    args = bench_args(home, tasks_file, out, spec)
    results = results_path(out, "A")
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hero", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        work = out / "work" / "A"
        while time.monotonic() < deadline and proc.poll() is None:
            # the first result written and the second task-run's story begun (its worker then
            # waits on the gated model): on a loaded machine the one comes well before the other
            if (
                results.exists()
                and results.read_text().count("\n") >= 1
                and work.is_dir()
                and any("repo-m2" in p.name for p in work.iterdir())
            ):
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        GATE.set()
    # killed while the second task's worker waited on its model: one result, its story begun
    assert len(results.read_text().splitlines()) == 1
    second = [p.name for p in (out / "work" / "A").iterdir() if "repo-m2" in p.name]
    assert len(second) == 1 and second[0].endswith("-a1")
    assert main(args) == 0
    lines = [json.loads(x) for x in results.read_text().splitlines()]
    assert sorted((x["instance_id"], x["run"]) for x in lines) == sorted(
        (t.instance_id, 1) for t in tasks
    )
    assert all(x["resolved"] for x in lines)
    preds = [json.loads(x) for x in predictions_path(out, "A").read_text().splitlines()]
    assert sorted(p["instance_id"] for p in preds) == sorted(t.instance_id for t in tasks)
    # the task-run that was under way started afresh, under the next attempt's story id
    second = sorted(p.name for p in (out / "work" / "A").iterdir() if "repo-m2" in p.name)
    assert [n[-3:] for n in second] == ["-a1", "-a2"]
    assert next(x for x in lines if x["instance_id"] == "repo__m2")["story_id"] == second[1]


# ----------------------------------------------------------------------------- the parts


def test_the_hidden_test_files_win_over_the_workers(tmp_path: Path) -> None:
    """A test file the worker edited (or deleted) is put back as at the base before the test
    patch is applied: the patch applies, and the worker's version is gone."""
    from hero.evals.judge import apply_test_patch, checkout_tree, patch_paths

    repo = tmp_path / "r"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_a.py").write_text("def test_a():\n    assert 1\n")
    (repo / "tests" / "test_b.py").write_text("def test_b():\n    assert 1\n")
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, "base")
    (repo / "tests" / "test_a.py").write_text("def test_a():\n    assert 2 == 2\n")
    (repo / "tests" / "test_new.py").write_text("def test_new():\n    assert 0\n")
    hidden = commit(repo, "hidden")
    test_patch = diff(repo, base, hidden)
    assert patch_paths(test_patch) == ["tests/test_a.py", "tests/test_new.py"]
    git(repo, "checkout", "-q", "-b", "worker", base)
    (repo / "tests" / "test_a.py").write_text("def test_a():\n    pass  # weakened\n")
    (repo / "tests" / "test_new.py").write_text("def test_new():\n    pass  # the worker's\n")
    (repo / "tests" / "test_b.py").unlink()
    worker = commit(repo, "worker")
    tree = tmp_path / "tree"
    checkout_tree(repo, worker, tree)
    apply_test_patch(tree, base, test_patch)
    assert (tree / "tests" / "test_a.py").read_text() == "def test_a():\n    assert 2 == 2\n"
    assert (tree / "tests" / "test_new.py").read_text() == "def test_new():\n    assert 0\n"
    assert not (tree / "tests" / "test_b.py").exists()  # not the test patch's: the worker's


def test_a_test_patch_that_applies_nowhere_is_a_judge_error(tmp_path: Path) -> None:
    from hero.evals.judge import JudgeError, apply_test_patch, checkout_tree

    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, "base")
    tree = tmp_path / "tree"
    checkout_tree(repo, base, tree)
    bad = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-y = 2\n+y = 3\n"
    with pytest.raises(JudgeError, match="does not apply"):
        apply_test_patch(tree, base, bad)


def test_pytest_summary_is_read_by_node_id() -> None:
    from hero.evals.judge import parse_summary

    out = (
        "PASSED tests/test_a.py::test_x\n"
        "FAILED tests/test_a.py::test_y - assert 1 == 2\n"
        "ERROR tests/test_b.py::test_z[a b] - boom\n"
        "noise PASSED not/this\n"
    )
    assert parse_summary(out) == {
        "tests/test_a.py::test_x": "PASSED",
        "tests/test_a.py::test_y": "FAILED",
        "tests/test_b.py::test_z[a b]": "ERROR",
    }


def test_the_source_repository_holds_the_base_alone(tmp_path: Path) -> None:
    from hero.evals.runner import make_source

    repo, tasks, future = make_repo(tmp_path)
    git(repo, "tag", "v1", "HEAD")
    task = tasks[1]
    dest = tmp_path / "src"
    make_source(repo, task.base_commit, dest)
    objects = git(dest, "cat-file", "--batch-all-objects", "--batch-check")
    refs = git(dest, "for-each-ref")
    assert task.base_commit in objects
    assert refs.split() == [task.base_commit, "commit", "refs/heads/bench"]
    for sha in future[task.instance_id]:
        assert sha not in objects
    assert not list((dest / ".git").glob("FETCH_HEAD"))


def test_resume_drops_a_torn_line_and_an_orphan_prediction(tmp_path: Path) -> None:
    from hero.evals.runner import resume

    results = results_path(tmp_path, "A")
    preds = predictions_path(tmp_path, "A")
    row = {
        "instance_id": "t1",
        "run": 1,
        "resolved": True,
        "rounds": 1,
        "tokens": 1,
        "cost_usd": 0.0,
        "wall_s": 1.0,
        "status": "passed",
    }
    results.write_text(json.dumps(row) + "\n" + '{"instance_id": "t2", "ru')
    p1 = {"instance_id": "t1", "model_name_or_path": "m", "model_patch": "", "run": 1}
    p2 = {**p1, "instance_id": "t2"}
    preds.write_text(json.dumps(p1) + "\n" + json.dumps(p2) + "\n")
    assert resume(tmp_path, "A") == {("t1", 1)}
    assert [r.instance_id for r in read_results(results)] == ["t1"]
    assert [json.loads(x)["instance_id"] for x in preds.read_text().splitlines()] == ["t1"]


def test_bad_configuration_specs_are_usage_errors(tmp_path: Path) -> None:
    from hero.config.overrides import deep_merge
    from hero.errors import UsageError
    from hero.evals.runner import _specs

    for bad in ("A", "A=", "a b=x.yaml"):
        with pytest.raises(UsageError):
            _specs([bad])
    with pytest.raises(UsageError, match="twice"):
        _specs(["A=x.yaml", "A=y.yaml"])
    assert deep_merge(
        {"worker": {"provider": "p", "model": "m"}, "k": 1}, {"worker": {"model": "n"}}
    ) == {
        "worker": {"provider": "p", "model": "n"},
        "k": 1,
    }


@pytest.mark.slow
def test_an_engine_per_configuration_its_errors_naming_where(setup, tmp_path: Path, capsys) -> None:
    """Each configuration runs on its own engine (the home's, or its overrides'): a Celery
    engine that is not set up is a usage error naming the overrides file and the setting,
    before anything runs; a configuration that sets engine: local, in a home set up for the
    Celery engine, runs here (tests/evals/test_bench_celery.py runs one on workers)."""
    model, home, tasks_file, _, _ = setup
    roles = home / "config" / "roles.yaml"
    out = tmp_path / "out"
    spec = overrides(tmp_path, "C", "worker: {model: fixer}\nengine: celery\n")
    assert main(bench_args(home, tasks_file, out, spec)) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'C.yaml'} (over {roles}): broker_url" in err
    # a home set up for the engine (docs/celery.md)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    roles.write_text(
        roles.read_text()
        + f"engine: celery\nbroker_url: redis://127.0.0.1:9/0\ntarget_remote: {remote}\n"
    )
    (home / "config.local.yaml").write_text(f"engine_key: {'5c' * 32}\n")
    # a configuration that sets engine: local runs from that home
    spec = overrides(tmp_path, "L", "worker: {model: idle}\nengine: local\n")
    assert main(bench_args(home, tasks_file, out, spec)) == 0
    assert not (out / "dispatched-L.jsonl").exists()
    assert not results_path(out, "C").exists()
    assert len(read_results(results_path(out, "L"))) == N_TASKS
    assert not any(r.body.get("model") == "fixer" for r in model.requests)
