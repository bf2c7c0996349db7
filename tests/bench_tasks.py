"""The planted-bug repository the tests of `hero bench run` share (local and Celery engines):
its tasks, the scripted model's answer per configuration, the command line."""

from __future__ import annotations

import re
import shlex
import sys
import threading
from pathlib import Path
from typing import Any

from bench_support import COMMIT
from conftest import git
from helpers import is_review, step_of, task_text, verdict

from hero.evals.tasks import Task
from hero.llm.scripted import Reply, call, text

N_TASKS = 3
BUGGY = "def f{i}(x):\n    return x + {i}  # planted bug: should multiply\n"
FIXED = "def f{i}(x):\n    return x * {i}\n"
TEST = "from pkg.m{i} import f{i}\n\n\ndef test_fixed():\n    assert f{i}(3) == 3 * {i}\n"
CHEAT = "def test_fixed():\n    pass\n"
#: A conftest.py that reports every test as passed (the ``conftester``'s).
FORCE_PASS = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n    outcome = yield\n"
    "    report = outcome.get_result()\n    report.outcome = 'passed'\n    report.longrepr = None\n"
)
#: A pytest.ini that deselects the task's hidden test (the ``deselector``'s).
DESELECT = "[pytest]\naddopts = --deselect tests/test_m{i}.py::test_fixed\n"
#: What the spying worker runs: every object and ref its repository can reach.
#: Set when the worker of ``gated`` may answer for the second task (the kill test).
GATE = threading.Event()
SPY = "git cat-file --batch-all-objects --batch-check; git for-each-ref; git log --all --format=%H"


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def diff(repo: Path, a: str, b: str, *paths: str) -> str:
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
    base = commit(repo, "initial")
    tasks, future = [], {}
    for i in range(1, N_TASKS + 1):
        (repo / "pkg" / f"m{i}.py").write_text(FIXED.format(i=i))
        (repo / "tests" / f"test_m{i}.py").write_text(TEST.format(i=i))
        fix = commit(repo, f"fix f{i}")
        iid = f"repo__m{i}"
        tasks.append(
            Task(
                instance_id=iid,
                repo="local/repo",
                base_commit=base,
                patch=diff(repo, base, fix, f"pkg/m{i}.py"),
                test_patch=diff(repo, base, fix, f"tests/test_m{i}.py"),
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
    later = commit(repo, "docs")
    for iid in future:
        future[iid].append(later)
    return repo, tasks, future


def handler(body: dict[str, Any]) -> Reply:
    """The reviewer approves; the worker, by its model: ``fixer`` writes the reference fix,
    ``idle`` writes nothing, ``cheater`` writes the hidden test file itself, as a test that
    always passes, ``conftester`` a conftest.py that reports every test passed,
    ``deselector`` a pytest.ini that deselects the hidden test, ``spy`` lists what its
    repository holds."""
    if is_review(body):
        return verdict()
    m = re.search(r"TASK-m(\d+)", task_text(body))
    assert m, "a worker request without its task"
    i = int(m.group(1))
    step = step_of(body)
    model = body["model"]
    if model == "gated" and i == 2:
        GATE.wait(120)  # the run is killed while its worker waits here
    if model in ("fixer", "gated"):
        plan = [call("write_file", path=f"pkg/m{i}.py", content=FIXED.format(i=i))]
    elif model == "cheater":
        plan = [call("write_file", path=f"tests/test_m{i}.py", content=CHEAT)]
    elif model == "conftester":
        plan = [call("write_file", path="conftest.py", content=FORCE_PASS)]
    elif model == "deselector":
        plan = [call("write_file", path="pytest.ini", content=DESELECT.format(i=i))]
    elif model == "spy":
        plan = [call("bash", command=SPY)]
    else:
        plan = []
    plan = [*plan, call("bash", command=COMMIT)] if plan else plan
    return plan[step] if step < len(plan) else text("Done.")


def bench_args(home: Path, tasks: Path, out: Path, *configs: str) -> list[str]:
    args = ["bench", "run", str(tasks), "--home", str(home), "--out", str(out)]
    for c in configs:
        args += ["-c", c]
    return [*args, "--test-command", f"{shlex.quote(sys.executable)} -m pytest"]
