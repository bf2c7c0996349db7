"""The judge against a worker that cheats through what runs the tests: each trick (a conftest
hook, a pytest.ini or pyproject.toml option loading a plugin, a nested pytest.ini, package
metadata whose entry point is a plugin, a pytest.py shadowing pytest, ``pytest_plugins`` in a
test module the judge runs, a link put where a test goes) first shown to make the failing
test pass when the tree is run as the worker left it, then judged: not resolved. A worker's
change to pyproject.toml outside pytest's table stays, and its fix still resolves."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

from hero.evals.judge import apply_test_patch, checkout_tree, judge, parse_summary
from hero.evals.tasks import Task

PY = shlex.quote(sys.executable)
TEST_COMMAND = f"{PY} -m pytest"
BUGGY = "def f(x):\n    return x + 2  # bug: should double\n"
FIXED = "def f(x):\n    return x * 2\n"
HIDDEN = "from pkg.m import f\n\n\ndef test_fixed():\n    assert f(3) == 6\n"
BASE_TEST = "def test_ok():\n    assert 1 + 1 == 2\n"
PYPROJECT = (
    '[project]\nname = "pkg"\nversion = "1.0"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
)
#: A plugin that reports every test as passed.
FORCE_PASS = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
FAKE_PYTEST = (
    "print('PASSED tests/test_m.py::test_fixed')\nprint('PASSED tests/test_base.py::test_ok')\n"
)
ENTRY_POINT = {
    "cheat-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: cheat\nVersion: 1.0\n",
    "cheat-1.0.dist-info/entry_points.txt": "[pytest11]\ncheat = cheatplug\n",
    "cheatplug.py": FORCE_PASS,
}

#: What each cheating worker commits (the bug left in place).
CHEATS: dict[str, dict[str, str | None]] = {
    "conftest hook": {"conftest.py": FORCE_PASS},
    "conftest deep": {"pkg/conftest.py": FORCE_PASS, "tests/conftest.py": FORCE_PASS},
    "pytest.ini -p": {
        "pytest.ini": "[pytest]\naddopts = -p cheatplug\n",
        "cheatplug.py": FORCE_PASS,
    },
    "nested pytest.ini": {
        "tests/pytest.ini": "[pytest]\naddopts = -p cheatplug\n",
        "cheatplug.py": FORCE_PASS,
    },
    "pyproject addopts": {
        "pyproject.toml": PYPROJECT.replace('"-q"', '"-q -p cheatplug"'),
        "cheatplug.py": FORCE_PASS,
    },
    "entry point": ENTRY_POINT,
    "pytest shadowed": {"pytest.py": FAKE_PYTEST},
    "pytest_plugins in a test": {
        "tests/test_base.py": f"pytest_plugins = ['cheatplug']\n\n\n{BASE_TEST}",
        "cheatplug.py": FORCE_PASS,
    },
}


def _commit(repo: Path, message: str, files: dict[str, str | None]) -> str:
    for name, body in files.items():
        path = repo / name
        if body is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def _task(tmp_path: Path) -> tuple[Path, Task]:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = _commit(
        repo,
        "base",
        {
            ".gitignore": "__pycache__/\n",
            "pyproject.toml": PYPROJECT,
            "pkg/__init__.py": "",
            "pkg/m.py": BUGGY,
            "tests/__init__.py": "",
            "tests/test_base.py": BASE_TEST,
        },
    )
    test_patch = (
        "diff --git a/tests/test_m.py b/tests/test_m.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_m.py\n@@ -0,0 +1,5 @@\n"
        + "".join(f"+{line}\n" for line in HIDDEN.splitlines())
    )
    task = Task(
        instance_id="repo__m",
        repo="local/repo",
        base_commit=base,
        patch="",
        test_patch=test_patch,
        problem_statement="f(x) must double x",
        FAIL_TO_PASS=["tests/test_m.py::test_fixed"],
        PASS_TO_PASS=["tests/test_base.py::test_ok"],
    )
    return repo, task


def _config(tmp_path: Path, repo: Path):  # type: ignore[no-untyped-def]
    from hero.config.loader import load_config

    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "roles.yaml").write_text(f"target_repo: {str(repo)!r}\n")
    return load_config(home, roles=())


def _as_the_worker_left_it(repo: Path, task: Task, commit: str, dest: Path) -> dict[str, str]:
    """The test patch applied to the worker's tree with nothing put back, the tests run."""
    checkout_tree(repo, commit, dest)
    apply_test_patch(dest, task.base_commit, task.test_patch)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-p", "no:randomly"]
        + [*task.FAIL_TO_PASS, *task.PASS_TO_PASS],
        cwd=dest,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return parse_summary(result.stdout)


@pytest.mark.parametrize("trick", sorted(CHEATS))
def test_a_cheat_through_what_runs_the_tests_resolves_nothing(tmp_path: Path, trick: str) -> None:
    repo, task = _task(tmp_path)
    git(repo, "checkout", "-q", "-b", "worker")
    cheat = _commit(repo, f"cheat: {trick}", CHEATS[trick])
    seen = _as_the_worker_left_it(repo, task, cheat, tmp_path / "raw")
    # it would work: the hidden test passes (its id as the worker's rootdir names it)
    assert [v for k, v in seen.items() if k.endswith("test_m.py::test_fixed")] == ["PASSED"], seen
    judged = judge(
        task, repo, cheat, _config(tmp_path, repo), tmp_path / "work", test_command=TEST_COMMAND
    )
    assert not judged.resolved, judged.output
    assert judged.failed == {"tests/test_m.py::test_fixed": "FAILED"}, judged.output
    assert "tests/test_base.py::test_ok" in judged.passed


def test_a_link_where_a_test_goes_is_removed_not_written_through(tmp_path: Path) -> None:
    """The worker replaces tests/ by a link to a folder of its own: the judge's tree gets the
    base's tests back in a real folder, and the worker's folder is left as it was."""
    repo, task = _task(tmp_path)
    git(repo, "checkout", "-q", "-b", "worker")
    (repo / "elsewhere").mkdir()
    (repo / "elsewhere" / "__init__.py").write_text("")
    (repo / "elsewhere" / "test_base.py").write_text("def test_ok():\n    pass\n")
    git(repo, "rm", "-q", "-r", "tests")
    (repo / "tests").symlink_to("elsewhere")
    cheat = _commit(repo, "tests are a link", {})
    judged = judge(
        task, repo, cheat, _config(tmp_path, repo), tmp_path / "work", test_command=TEST_COMMAND
    )
    tree = tmp_path / "work" / "judge"
    assert not (tree / "tests").is_symlink()
    assert (tree / "tests" / "test_base.py").read_text() == BASE_TEST
    assert not (tree / "elsewhere" / "test_m.py").exists()
    assert judged.failed == {"tests/test_m.py::test_fixed": "FAILED"}, judged.output


def test_a_fix_that_changes_pyproject_outside_pytest_still_resolves(tmp_path: Path) -> None:
    repo, task = _task(tmp_path)
    git(repo, "checkout", "-q", "-b", "worker")
    fix = _commit(
        repo,
        "fix",
        {"pkg/m.py": FIXED, "pyproject.toml": PYPROJECT.replace('"1.0"', '"1.1"')},
    )
    judged = judge(
        task, repo, fix, _config(tmp_path, repo), tmp_path / "work", test_command=TEST_COMMAND
    )
    assert judged.resolved, judged.output
    tree = tmp_path / "work" / "judge"
    assert '"1.1"' in (tree / "pyproject.toml").read_text()  # the worker's, kept


def test_the_judge_unsets_pytest_options_from_outside(tmp_path: Path, monkeypatch) -> None:
    """PYTEST_ADDOPTS (allowed through ``pass_env``) loading a plugin of the tree's: not
    passed to the tests."""
    repo, task = _task(tmp_path)
    git(repo, "checkout", "-q", "-b", "worker")
    cheat = _commit(repo, "a plugin", {"cheatplug.py": FORCE_PASS})
    config = _config(tmp_path, repo)
    import dataclasses

    config = dataclasses.replace(
        config,
        safety=dataclasses.replace(
            config.safety, pass_env=(*config.safety.pass_env, "PYTEST_ADDOPTS")
        ),
    )
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p cheatplug")
    judged = judge(task, repo, cheat, config, tmp_path / "work", test_command=TEST_COMMAND)
    assert judged.failed == {"tests/test_m.py::test_fixed": "FAILED"}, judged.output
