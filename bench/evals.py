#!/usr/bin/env python
"""hero benchmark: what `hero bench run` itself costs per task, around the model's work.

    python bench/evals.py              # 5 tasks: about 1 min on 2 cores (bubblewrap for the judge)
    python bench/evals.py --tasks 3    # shorter
    python bench/evals.py --keep       # keep the temporary folder (repo, home, bench output)

A generated repository (a package with planted bugs, each fixed by a commit that also adds its
test, like tests/evals/test_run.py's) gives N tasks, written here in SWE-bench's format from
the history (not by `hero bench make`, so that this measures `run` alone). One configuration
runs them, one at a time (``max_parallel: 1``, so that no task-run waits for another), as a
real ``python -m hero bench run --events`` subprocess against hero's scripted model over
real HTTP: its worker writes the reference fix and commits in one round, its reviewer
approves. Everything is timed from outside, on this machine's clock (``time.time()``):

- the command's launch, and each ``task_started`` / ``task_ended`` event as it arrives on
  stdout;
- each model request as the scripted server receives it (the task's marker in the worker's
  message tells which task it is for);
- the story's own ``started_at`` / ``finished_at`` from its run record (``runs/state/`` of the
  configuration's home under ``--out``).

The rows:

- **launch to the first model request**: `hero bench run` starting up, reading the tasks,
  making the configuration's home, the first task's repository and its story;
- **a task-run's start to its first model request** (``task_started`` to the request),
  split into making the task's own repository (to the story's ``started_at``) and the story's
  start (to the request);
- **judging** (the story's ``finished_at`` to ``task_ended``): checking out the worker's final
  tree, applying the hidden test patch, running FAIL_TO_PASS and PASS_TO_PASS in the sandbox,
  writing the results and predictions lines; beside it, the same tests run by a bare
  ``python -m pytest`` outside hero and outside the sandbox, as a floor;
- **outside the story**: a results line's ``wall_s`` less the story's own duration.

A report, not a test: it prints the table and exits 0 (see bench/README.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from report import GIT_ISOLATION, Report, env_line, hero_env, median, print_report

from hero.llm.scripted import Reply, ScriptedModel, call, text

MARK = "BENCH-TASK-"
BUGGY = "def f{i}(x):\n    return x + {i}  # planted bug: should multiply\n"
FIXED = "def f{i}(x):\n    return x * {i}\n"
TEST = "from pkg.m{i} import f{i}\n\n\ndef test_fixed():\n    assert f{i}(3) == 3 * {i}\n"
BASE_TEST = "def test_ok():\n    assert 1 + 1 == 2\n"
COMMIT = "git add -A && git commit -q -m fix"
#: The judge's Python: the interpreter under this one's virtualenv, which hero's sandbox always
#: shows (a virtualenv outside it is not; the sandbox's PATH may have no `python` at all).
JUDGE_PYTHON = os.path.realpath(sys.executable)
REVIEW = json.dumps({"verdict": "APPROVED", "summary": "Fixed.", "ac_check": [], "comments": []})


def git(repo: Path, *args: str) -> str:
    from hero.git.ops import DEFAULT_IDENTITY
    from hero.git.ops import git as hero_git

    return hero_git(repo, *args, env={**GIT_ISOLATION, **DEFAULT_IDENTITY})


def make_tasks(repo: Path, n: int) -> list[tuple[dict[str, Any], str]]:
    """The repository (N planted bugs, a commit per fix and its test, then a docs commit)
    and its tasks, as SWE-bench-format dicts, each with its fix commit."""
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "tests" / "__init__.py").write_text("")
    (repo / ".gitignore").write_text("__pycache__/\n")
    for i in range(1, n + 1):
        (repo / "pkg" / f"m{i}.py").write_text(BUGGY.format(i=i))
    (repo / "tests" / "test_base.py").write_text(BASE_TEST)
    git(repo.parent, "init", "-q", "-b", "main", repo.name)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    base = git(repo, "rev-parse", "HEAD").strip()
    tasks = []
    for i in range(1, n + 1):
        (repo / "pkg" / f"m{i}.py").write_text(FIXED.format(i=i))
        (repo / "tests" / f"test_m{i}.py").write_text(TEST.format(i=i))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"fix f{i}")
        fix = git(repo, "rev-parse", "HEAD").strip()
        task = (
            {
                "instance_id": f"bench__m{i}",
                "repo": "local/bench",
                "base_commit": base,
                "patch": git(repo, "diff", base, fix, "--", f"pkg/m{i}.py"),
                "test_patch": git(repo, "diff", base, fix, "--", f"tests/test_m{i}.py"),
                "problem_statement": f"{MARK}{i}: f{i}(x) must return x * {i}, not x + {i}.",
                "hints_text": "",
                "created_at": "",
                "FAIL_TO_PASS": [f"tests/test_m{i}.py::test_fixed"],
                "PASS_TO_PASS": ["tests/test_base.py::test_ok"],
                "version": "",
                "environment_setup_commit": base,
            },
            fix,
        )
        tasks.append(task)
        base = fix
    (repo / "README.md").write_text("docs\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "docs")
    return tasks


@dataclass
class Model:
    """The scripted model: the worker writes the reference fix and commits, the reviewer
    approves; every request's arrival is kept with its task."""

    requests: list[tuple[float, str, str]] = field(default_factory=list)
    """(time.time(), role, task number)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        now = time.time()
        messages = body["messages"]
        reviewer = str(messages[0].get("content", "")).startswith("You are hero's reviewer")
        task = ""
        for message in messages[1:]:
            content = str(message.get("content") or "")
            if MARK in content:
                task = content.split(MARK, 1)[1].split(":", 1)[0]
                break
        with self.lock:
            self.requests.append((now, "reviewer" if reviewer else "worker", task))
        if reviewer:
            return text(REVIEW)
        step = sum(1 for m in messages if m.get("role") == "assistant")
        plan = [
            call("write_file", path=f"pkg/m{task}.py", content=FIXED.format(i=task)),
            call("bash", command=COMMIT),
        ]
        return plan[step] if step < len(plan) else text("Fixed.")

    def first(self, task: str, role: str = "worker") -> float | None:
        times = [t for t, r, k in self.requests if k == task and r == role]
        return min(times) if times else None


def make_home(base: Path, url: str, repo: Path) -> Path:
    home = base / "home"
    (home / "config" / "providers").mkdir(parents=True)
    (home / "config" / "providers" / "scripted.yaml").write_text(
        f"name: scripted\nbase_url: {url}\ndefault_model: scripted-bench\n"
    )
    (home / "config" / "roles.yaml").write_text(
        f"target_repo: {json.dumps(str(repo))}\nllm_max_attempts: 1\nmax_retries: 1\n"
        "max_parallel: 1\nworker:\n  provider: scripted\nreviewer:\n  provider: scripted\n"
    )
    return home


def bare_pytest(repo: Path, task: dict[str, Any], fix: str, where: Path) -> float:
    """Seconds for a bare `python -m pytest` of the task's tests on its fix commit's tree,
    outside hero and the sandbox (the judging's floor)."""
    tree = where / task["instance_id"]
    git(repo, "worktree", "add", "-q", "--detach", str(tree), fix)
    tests = [*task["FAIL_TO_PASS"], *task["PASS_TO_PASS"]]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-q", "-p", "no:cacheprovider", *tests],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"bare pytest failed on {task['instance_id']}:\n{done.stdout}")
    return took


def run_bench(tmp: Path, n: int, report: Report) -> None:
    model = Model()
    with ScriptedModel(model) as server:
        repo = tmp / "repo"
        repo.mkdir()
        made = make_tasks(repo, n)
        home = make_home(tmp, server.base_url, repo)
        tasks_file = tmp / "tasks.jsonl"
        tasks_file.write_text("".join(json.dumps(t) + "\n" for t, _ in made))
        (tmp / "fix.yaml").write_text("{}\n")
        out = tmp / "out"
        events: list[tuple[float, dict[str, Any]]] = []
        launched = time.time()
        proc = subprocess.Popen(
            [sys.executable, "-m", "hero", "bench", "run", str(tasks_file), "-c",
             f"fix={tmp / 'fix.yaml'}", "--out", str(out), "--events", "--home", str(home),
             "--test-command", f"{shlex.quote(JUDGE_PYTHON)} -m pytest"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=hero_env(),
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        errors: list[str] = []
        drain = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
        drain.start()
        for line in proc.stdout:
            try:
                events.append((time.time(), json.loads(line)))
            except ValueError:
                continue
        code = proc.wait()
        drain.join()
        ended = time.time()

    results = [json.loads(x) for x in (out / "results-fix.jsonl").read_text().splitlines() if x]
    if code != 0 or len(results) != n:
        raise RuntimeError(f"hero bench run exited {code} with {len(results)} results:\n{errors}")
    started = {e["instance_id"]: t for t, e in events if e.get("event") == "task_started"}
    finished = {e["instance_id"]: t for t, e in events if e.get("event") == "task_ended"}
    story_of = {
        e["instance_id"]: e["story_id"] for _, e in events if e.get("event") == "task_started"
    }
    to_first, making, story_start, judging, outside, story_s = [], [], [], [], [], []
    for result in results:
        iid = result["instance_id"]
        number = iid[len("bench__m") :]
        state = json.loads(next(out.glob(f"homes/*/runs/state/{story_of[iid]}.json")).read_text())
        first = model.first(number)
        if first is None:
            raise RuntimeError(f"{iid}: no worker request reached the model")
        to_first.append(first - started[iid])
        making.append(state["started_at"] - started[iid])
        story_start.append(first - state["started_at"])
        judging.append(finished[iid] - state["finished_at"])
        story_s.append(state["finished_at"] - state["started_at"])
        outside.append(result["wall_s"] - story_s[-1])
    floor = [bare_pytest(repo, t, fix, tmp / "bare") for t, fix in made]

    resolved = sum(bool(r["resolved"]) for r in results)
    report.section(f"hero bench run: {n} tasks, one configuration, one at a time")
    report.add(
        "tasks resolved (the worker writes the reference fix)",
        f"{resolved} / {n}",
        f"{n} / {n}",
        resolved == n,
    )
    report.add("the whole run", f"{ended - launched:.2f} s")
    report.add("launch to the first model request", f"{model.requests[0][0] - launched:.2f} s")
    report.section("a task-run's start to its first model request (s)")
    report.add("task_started -> first request (median)", f"{median(to_first):.3f}")
    report.add("task_started -> first request (worst)", f"{max(to_first):.3f}")
    report.add("  of it: the task's own repository (median)", f"{median(making):.3f}")
    report.add("  of it: the story's start (median)", f"{median(story_start):.3f}")
    report.section("judging a task (s)")
    report.add("story finished -> task_ended (median)", f"{median(judging):.3f}")
    report.add("story finished -> task_ended (worst)", f"{max(judging):.3f}")
    report.add("bare pytest of the same tests, no sandbox (median)", f"{median(floor):.3f}")
    report.add("judging less the bare pytest (median)", f"{median(judging) - median(floor):.3f}")
    report.section("the task-run as a whole (s)")
    report.add("the story itself, one round (median)", f"{median(story_s):.3f}")
    report.add("results wall_s less the story (median)", f"{median(outside):.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5, help="tasks in the generated repository")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    print(env_line("openai", "pytest"))
    if importlib.util.find_spec("hero.evals.runner") is None:
        print("hero.evals.runner is not in this checkout: `hero bench run` cannot be measured")
        return 0
    has_pytest = subprocess.run([JUDGE_PYTHON, "-c", "import pytest"], capture_output=True)
    if has_pytest.returncode != 0:
        print(f"{JUDGE_PYTHON} has no pytest: the judge cannot run the tests (pip install pytest)")
        return 0
    if shutil.which("bwrap") is None:
        print("note: bubblewrap is not installed; the judge runs the tests without the sandbox")
    began = time.monotonic()
    report = Report()
    tmp = Path(tempfile.mkdtemp(prefix="hero-bench-evals-"))
    try:
        try:
            run_bench(tmp, args.tasks, report)
        except Exception as exc:  # noqa: BLE001 - a report: show what failed
            report.add("hero bench run: could not measure", "FAILED", "", False)
            report.notes.append(f"{type(exc).__name__}: {exc}")
        print_report(report, began)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
