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
from typing import Any

import pytest
from conftest import GIT_ENV, git
from helpers import is_review, step_of, task_text, verdict

from hero.cli import main
from hero.evals.results import predictions_path, read_results, results_path
from hero.evals.tasks import Task, write_tasks
from hero.llm.scripted import Reply, ScriptedModel, call, text

pytestmark = pytest.mark.slow

N_TASKS = 3
COMMIT = "git add -A && git commit -q -m work"
BUGGY = "def f{i}(x):\n    return x + {i}  # planted bug: should multiply\n"
FIXED = "def f{i}(x):\n    return x * {i}\n"
TEST = "from pkg.m{i} import f{i}\n\n\ndef test_fixed():\n    assert f{i}(3) == 3 * {i}\n"
CHEAT = "def test_fixed():\n    pass\n"
#: What the spying worker runs: every object and ref its repository can reach.
SPY = "git cat-file --batch-all-objects --batch-check; git for-each-ref; git log --all --format=%H"


def _commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def _diff(repo: Path, a: str, b: str, *paths: str) -> str:
    return git(repo, "diff", a, b, "--", *paths)


def make_repo(tmp_path: Path) -> tuple[Path, list[Task], dict[str, list[str]]]:
    """A repository with N_TASKS planted bugs, each fixed (with its test) by a commit of its
    own, and a later docs-only commit; the tasks, and per task the shas that are its future
    (the fix commit, the fixed module's blob, the test's blob)."""
    repo = tmp_path / "user-repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "tests" / "__init__.py").write_text("")
    for i in range(1, N_TASKS + 1):
        (repo / "pkg" / f"m{i}.py").write_text(BUGGY.format(i=i))
    (repo / "tests" / "test_base.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    git(repo, "init", "-q", "-b", "main")
    base = _commit(repo, "initial")
    tasks, future = [], {}
    for i in range(1, N_TASKS + 1):
        (repo / "pkg" / f"m{i}.py").write_text(FIXED.format(i=i))
        (repo / "tests" / f"test_m{i}.py").write_text(TEST.format(i=i))
        fix = _commit(repo, f"fix f{i}")
        iid = f"repo__m{i}"
        tasks.append(
            Task(
                instance_id=iid,
                repo="local/repo",
                base_commit=base,
                patch=_diff(repo, base, fix, f"pkg/m{i}.py"),
                test_patch=_diff(repo, base, fix, f"tests/test_m{i}.py"),
                problem_statement=f"TASK-m{i}: f{i}(x) must return x * {i}, not x + {i}.",
                FAIL_TO_PASS=[f"tests/test_m{i}.py::test_fixed"],
                PASS_TO_PASS=["tests/test_base.py::test_ok"],
            )
        )
        future[iid] = [
            fix,
            git(repo, "rev-parse", f"{fix}:pkg/m{i}.py").strip(),
            git(repo, "rev-parse", f"{fix}:tests/test_m{i}.py").strip(),
        ]
        base = fix
    (repo / "README.md").write_text("docs\n")
    later = _commit(repo, "docs")
    for iid in future:
        future[iid].append(later)
    return repo, tasks, future


def handler(body: dict[str, Any]) -> Reply:
    """The reviewer approves; the worker, by its model: ``fixer`` writes the reference fix,
    ``idle`` writes nothing, ``cheater`` writes the hidden test file as a test that always
    passes and deletes the passing one, ``spy`` lists what its repository holds."""
    if is_review(body):
        return verdict()
    m = re.search(r"TASK-m(\d+)", task_text(body))
    assert m, "a worker request without its task"
    i = int(m.group(1))
    step = step_of(body)
    model = body["model"]
    if model == "fixer":
        plan = [call("write_file", path=f"pkg/m{i}.py", content=FIXED.format(i=i))]
    elif model == "cheater":
        plan = [
            call("write_file", path=f"tests/test_m{i}.py", content=CHEAT),
            call("bash", command="git rm -q tests/test_base.py"),
        ]
    elif model == "spy":
        plan = [call("bash", command=SPY)]
    else:
        plan = []
    plan = [*plan, call("bash", command=COMMIT)] if plan else plan
    return plan[step] if step < len(plan) else text("Done.")


def make_home(tmp_path: Path, model: ScriptedModel, repo: Path, **knobs: object) -> Path:
    home = tmp_path / "home"
    (home / "config" / "providers").mkdir(parents=True)
    (home / "config" / "providers" / "scripted.yaml").write_text(
        f"name: scripted\nbase_url: {model.base_url}\ndefault_model: scripted-test\n"
    )
    settings: dict[str, object] = {
        "target_repo": str(repo),
        "max_retries": 1,
        "max_parallel": 2,
        "llm_backoff_base_s": 0.01,
        "llm_backoff_max_s": 0.05,
        **knobs,
    }
    lines = [f"{k}: {json.dumps(v)}" for k, v in settings.items()]
    lines += ["worker:", "  provider: scripted", "reviewer:", "  provider: scripted"]
    (home / "config" / "roles.yaml").write_text("\n".join(lines) + "\n")
    return home


def overrides(tmp_path: Path, name: str, text_: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text_)
    return f"{name}={path}"


def bench_args(home: Path, tasks: Path, out: Path, *configs: str) -> list[str]:
    args = ["bench", "run", str(tasks), "--home", str(home), "--out", str(out)]
    for c in configs:
        args += ["-c", c]
    return [*args, "--test-command", f"{sys.executable} -m pytest"]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ScriptedModel, Path, Path, list[Task], dict[str, list[str]]]:
    model = ScriptedModel(handler).start()
    repo, tasks, future = make_repo(tmp_path)
    home = make_home(tmp_path, model, repo)
    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, tasks)
    yield model, home, tasks_file, tasks, future
    model.stop()


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
    c_results = read_results(results_path(out, "C"))
    assert all(r.rounds >= 1 for r in c_results)
    events = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert sum(e["event"] == "task_started" for e in events) == 3 * N_TASKS
    assert sum(e["event"] == "task_ended" for e in events) == 3 * N_TASKS
    assert re.search(r"\[\d+/9\] A repo__m1 run 1: resolved", captured.err)


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


def test_kill_mid_run_then_rerun_runs_each_task_once(setup, tmp_path: Path) -> None:
    model, home, tasks_file, tasks, _ = setup
    out = tmp_path / "out"
    spec = overrides(tmp_path, "A", "worker:\n  model: fixer\nmax_parallel: 1\n")
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
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and results.read_text().count("\n") >= 1:
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert results.exists()
    assert main(args) == 0
    lines = [json.loads(x) for x in results.read_text().splitlines()]
    assert sorted((x["instance_id"], x["run"]) for x in lines) == sorted(
        (t.instance_id, 1) for t in tasks
    )
    assert all(x["resolved"] for x in lines)
    preds = [json.loads(x) for x in predictions_path(out, "A").read_text().splitlines()]
    assert sorted(p["instance_id"] for p in preds) == sorted(t.instance_id for t in tasks)
