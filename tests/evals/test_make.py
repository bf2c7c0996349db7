"""`hero bench make` on real repositories: commits that fix planted bugs become tasks with the
right FAIL_TO_PASS, the rest are no candidates or are dropped with their reason; the tasks
file is read back, as are SWE-bench's own lines."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from bench_support import RUNTESTS
from conftest import git

from hero.cli import main
from hero.evals.make import is_code_path, is_test_path, issue_numbers, judge, parse_pytest
from hero.evals.tasks import read_tasks
from hero.sandbox.bwrap import sandbox_python

FIXES = 10
TEST_CMD = f"{shlex.quote(sys.executable)} -m pytest"


def _home(tmp_path: Path, repo: Path) -> Path:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "roles.yaml").write_text(f"target_repo: {str(repo)!r}\n")
    return home


def _commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def _history(tmp_path: Path) -> tuple[Path, dict[str, int], str, str]:
    """A repository whose history holds ten fixes of planted bugs with their tests, commits of
    only docs, only code and only tests, a refactor whose new test passes before it, and a
    flaky one (its test passes on odd runs, counted in an untracked file of the checkout,
    which a sandbox lets it write).
    Returns the repository, each fix's sha and bug number, the refactor's and the flaky sha."""
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    files = {
        f"pkg/mod{i}.py": f"def f{i}(x):\n    return x + {i} + 1  # bug\n" for i in range(FIXES)
    }
    files["pkg/__init__.py"] = ""
    files["tests/test_base.py"] = "def test_base():\n    assert True\n"
    files["README.md"] = "# proj\n"
    files[".gitignore"] = "__pycache__/\n"
    _commit(repo, "initial", files)
    fixes: dict[str, int] = {}
    for i in range(FIXES):
        sha = _commit(
            repo,
            f"f{i} is off by one\n\nf{i}(x) should be x + {i}.",
            {
                f"pkg/mod{i}.py": f"def f{i}(x):\n    return x + {i}\n",
                f"tests/test_mod{i}.py": f"from pkg.mod{i} import f{i}\n\n\n"
                f"def test_f{i}():\n    assert f{i}(1) == {1 + i}\n",
            },
        )
        fixes[sha] = i
        if i == 3:
            _commit(repo, "docs only", {"README.md": "# proj\n\nMore words.\n"})
        if i == 5:
            _commit(repo, "code only", {"pkg/extra.py": "VALUE = 1\n"})
        if i == 7:
            _commit(repo, "tests only", {"tests/test_extra.py": "def test_extra():\n    pass\n"})
    refactor = _commit(
        repo,
        "refactor: a named constant",
        {
            "pkg/extra.py": "VALUE = 1\nNAME = 'x'\n",
            "tests/test_named.py": "from pkg.extra import VALUE\n\n\ndef test_value():\n"
            "    assert VALUE == 1\n",
        },
    )
    flaky = _commit(
        repo,
        "a fix whose test is flaky",
        {
            "pkg/extra.py": "VALUE = 1\nNAME = 'y'\n",
            "tests/test_flaky.py": "from pathlib import Path\n\n\ndef test_flaky():\n"
            "    counter = Path(__file__).parent.parent / '.flaky-counter'\n"
            "    n = int(counter.read_text()) + 1 if counter.exists() else 1\n"
            "    counter.write_text(str(n))\n"
            "    assert n % 2 == 1\n",
        },
    )
    return repo, fixes, refactor, flaky


@pytest.mark.slow
def test_make_finds_the_ten_fixes_and_drops_the_flaky_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, fixes, refactor, flaky = _history(tmp_path)
    home = _home(tmp_path, repo)
    out = tmp_path / "tasks.jsonl"
    before = git(repo, "for-each-ref")
    code = main(["bench", "make", "--home", str(home), "--test-command", TEST_CMD, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    tasks = read_tasks(out)
    assert {t.base_commit for t in tasks} == {
        git(repo, "rev-parse", f"{sha}^").strip() for sha in fixes
    }
    for task in tasks:
        sha = next(s for s in fixes if task.instance_id == f"proj-{s[:10]}")
        i = fixes[sha]
        assert task.FAIL_TO_PASS == [f"tests/test_mod{i}.py::test_f{i}"]
        earlier = [f"tests/test_mod{j}.py::test_f{j}" for j in range(i)]
        extra = ["tests/test_extra.py::test_extra"] if i > 7 else []
        assert task.PASS_TO_PASS == sorted(["tests/test_base.py::test_base", *earlier, *extra])
        assert task.repo == "proj"
        assert task.environment_setup_commit == task.base_commit
        assert task.problem_statement.startswith(f"f{i} is off by one")
        assert f"pkg/mod{i}.py" in task.patch and "tests/" not in task.patch
        assert f"tests/test_mod{i}.py" in task.test_patch and "pkg/" not in task.test_patch
        assert task.created_at[:4].isdigit() and "T" in task.created_at
    assert len(tasks) == FIXES
    assert f"dropped {flaky[:10]} flaky: tests/test_flaky.py::test_flaky" in err
    assert f"dropped {refactor[:10]} no test fails before the fix" in err
    assert "12 candidates, 10 tasks, 2 dropped" in err
    # the repository itself is as it was: no ref, no worktree, no stray file
    assert git(repo, "for-each-ref") == before
    assert git(repo, "status", "--porcelain") == ""
    assert "worktree" not in git(repo, "worktree", "list", "--porcelain").split()[2:]

    # a window of the last three commits: the flaky one, the refactor and the last fix
    code = main(["bench", "make", "--home", str(home), "--test-command", TEST_CMD, "--last", "3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["FAIL_TO_PASS"] for line in lines] == [["tests/test_mod9.py::test_f9"]]
    assert "3 candidates, 1 tasks, 2 dropped" in captured.err


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["none", "auto"])
def test_make_in_the_project_environment_with_linked_issues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sandbox: str
) -> None:
    """The home's setup runs once, and what it made (a virtualenv whose python sets a
    variable a test checks) serves the test command at every checkout, with a sandbox or
    without; a commit's ``Fixes #N`` brings the issue's text from the github settings' API.
    The project's tests run by a runner of its own that prints pytest's ``-rA`` summary (a
    sandbox with a project environment shows no pytest of hero's)."""
    from fakegithub import FakeGitHub

    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    _commit(
        repo,
        "initial",
        {
            "calc.py": "def double(x):\n    return x + x + 1\n",
            "runtests.py": RUNTESTS,
            "tests/test_env.py": "import os\n\n\ndef test_env():\n"
            "    assert os.environ.get('CALC_ENV') == 'made'\n",
        },
    )
    fix = _commit(
        repo,
        "double is wrong\n\nFixes #1",
        {
            "calc.py": "def double(x):\n    return x + x\n",
            "tests/test_calc.py": "from calc import double\n\n\ndef test_double():\n"
            "    assert double(2) == 4\n",
        },
    )
    runs = tmp_path / "setup-runs"  # seen without a sandbox only
    setup = (
        f"mkdir -p .venv/bin && touch .venv/pyvenv.cfg && (echo ran >> {runs} || true) && "
        f"printf '#!/bin/sh\\nexport CALC_ENV=made\\nexec {sandbox_python()} \"$@\"\\n' "
        "> .venv/bin/python && chmod +x .venv/bin/python"
    )
    with FakeGitHub() as fake:
        fake.add_issue("acme/app", title="double(2) is 5", body="It should be 4.")
        home = _home(tmp_path, repo)
        with (home / "config" / "roles.yaml").open("a") as roles:
            roles.write(
                f"sandbox: {sandbox}\nsetup:\n  - {json.dumps(setup)}\n"
                f"github:\n  repo: acme/app\n  label: hero\n  api_url: {fake.api_url}\n"
            )
        out = tmp_path / "tasks.jsonl"
        code = main(
            [
                "bench",
                "make",
                "--home",
                str(home),
                "--test-command",
                "python runtests.py",
                "-o",
                str(out),
            ]
        )
    err = capsys.readouterr().err
    assert code == 0, err
    tasks = read_tasks(out)
    assert len(tasks) == 1, err
    task = tasks[0]
    assert task.instance_id == f"acme__app-{fix[:10]}" and task.repo == "acme/app"
    assert task.FAIL_TO_PASS == ["tests/test_calc.py::test_double"]
    assert task.PASS_TO_PASS == ["tests/test_env.py::test_env"]  # at both checkouts, twice
    assert (
        task.problem_statement
        == "double is wrong\n\nFixes #1\n\n#1: double(2) is 5\n\nIt should be 4."
    )
    if sandbox == "none":
        assert runs.read_text() == "ran\n"
    assert "1 candidates, 1 tasks, 0 dropped" in err


def test_a_window_of_no_candidates_writes_no_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    first = _commit(repo, "initial", {"a.py": "A = 1\n"})
    _commit(repo, "docs", {"README.md": "hi\n"})
    _commit(repo, "code and docs", {"a.py": "A = 2\n", "docs/a.md": "A is 2\n"})
    out = tmp_path / "tasks.jsonl"
    home = _home(tmp_path, repo)
    code = main(["bench", "make", "--home", str(home), "--range", f"{first}..main", "-o", str(out)])
    assert code == 0
    assert read_tasks(out) == []
    assert "0 candidates, 0 tasks, 0 dropped" in capsys.readouterr().err


@pytest.mark.slow
def test_a_test_command_that_gives_no_outcome_drops_the_candidate_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    _commit(repo, "initial", {"a.py": "A = 1\n"})
    fix = _commit(repo, "fix", {"a.py": "A = 2\n", "tests/test_a.py": "def test_a():\n    pass\n"})
    home = _home(tmp_path, repo)
    (home / "config" / "roles.yaml").write_text(
        (home / "config" / "roles.yaml").read_text() + "sandbox: none\n"
    )
    code = main(["bench", "make", "--home", str(home), "--test-command", "echo no tests:"])
    err = capsys.readouterr().err
    assert code == 0
    assert (
        f"dropped {fix[:10]} no test outcome at the commit from `echo no tests: -rA -p "
        "no:cacheprovider` (exit 0: no tests: -rA -p no:cacheprovider)"
    ) in err
    assert "1 candidates, 0 tasks, 1 dropped" in err


@pytest.mark.parametrize(
    ("window", "said"),
    [
        (["--range", "main..nowhere"], "'nowhere' is no commit of"),
        (["--range", "main"], "expected A..B"),
        (["--range", "main..main"], "no commits in"),
        (["--range=--all..main"], "'--all' is no commit name"),
        (["--range", "main...HEAD"], "expected A..B"),
        (["--last", "0"], "--last 0: expected a number of commits"),
    ],
)
def test_a_bad_window_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], window: list[str], said: str
) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    _commit(repo, "initial", {"a.py": "A = 1\n"})
    code = main(["bench", "make", "--home", str(_home(tmp_path, repo)), *window])
    assert code == 2
    assert said in capsys.readouterr().err


def test_a_target_that_is_no_repository_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    code = main(["bench", "make", "--home", str(_home(tmp_path, plain))])
    assert code == 2
    said = capsys.readouterr().err
    assert "target_repo" in said and "git repository" in said and str(plain) in said


def test_test_and_code_files() -> None:
    for path in (
        "tests/test_a.py",
        "test/helpers.py",
        "pkg/tests/data.json",
        "test_x.py",
        "pkg/x_test.py",
        "web/app.test.ts",
        "spec/user_spec.rb",
    ):
        assert is_test_path(path), path
    for path in ("pkg/a.py", "src/app.ts", "main.go", "lib/testing.py", "contest.py"):
        assert is_code_path(path), path
    for path in ("README.md", "docs/x.rst", "pyproject.toml", "tests/test_a.py"):
        assert not is_code_path(path), path


def test_issue_numbers() -> None:
    message = "Fixes #12, see #3 and #12 again; not acme/app#4 nor &#38; nor #0\n\nAlso #5 #6"
    assert issue_numbers(message) == [12, 3, 5]
    assert issue_numbers("no issue") == []


def test_pytest_summary_and_judgement() -> None:
    output = (
        "....\n---- Captured stdout call ----\nPASSED printed/by::a_test\n"
        "=========================== short test summary info ============================\n"
        "PASSED tests/test_a.py::test_ok\n"
        "PASSED tests/test_a.py::test_p[a - b]\n"
        "FAILED tests/test_a.py::test_bad - AssertionError: assert 1 == 2\n"
        "ERROR tests/test_b.py - ImportError: no module\n"
        "SKIPPED [1] tests/test_c.py:3: not here\n"
        "XFAIL tests/test_a.py::test_xf - known\n"
        "FAILED tests/test_a.py::test_q[x - y] - assert 0\n"
    )
    found = parse_pytest(output)
    assert found == {
        "tests/test_a.py::test_ok": "PASSED",
        "tests/test_a.py::test_p[a - b]": "PASSED",
        "tests/test_a.py::test_bad": "FAILED",
        "tests/test_b.py": "ERROR",
        "tests/test_a.py::test_xf": "XFAIL",
        "tests/test_a.py::test_q[x - y]": "FAILED",
    }
    before = {"t::a": "FAILED", "t::b": "PASSED", "t::c": "PASSED", "t::d": "ERROR"}
    after = {
        "t::a": "PASSED",
        "t::b": "PASSED",
        "t::c": "FAILED",
        "t::d": "PASSED",
        "t::e": "PASSED",
    }
    assert judge(before, after) == (["t::a", "t::d", "t::e"], ["t::b"])


def test_tasks_round_trip_and_swe_bench_lines(tmp_path: Path) -> None:
    from hero.evals.tasks import Task, write_tasks

    task = Task(
        instance_id="octo__app-abc123",
        repo="octo/app",
        base_commit="a" * 40,
        patch="diff --git a/x.py b/x.py\n",
        test_patch="diff --git a/tests/test_x.py b/tests/test_x.py\n",
        problem_statement="x is wrong",
        created_at="2026-12-04T15:00:00+00:00",
        FAIL_TO_PASS=["tests/test_x.py::test_x"],
        PASS_TO_PASS=["tests/test_x.py::test_y"],
        environment_setup_commit="a" * 40,
    )
    ours = tmp_path / "ours.jsonl"
    write_tasks(ours, [task])
    assert read_tasks(ours) == [task]
    swe = tmp_path / "swe.jsonl"
    line = {**task.to_json(), "instance_id": "octo__app-1"}
    line["FAIL_TO_PASS"] = json.dumps(task.FAIL_TO_PASS)
    line["PASS_TO_PASS"] = json.dumps(task.PASS_TO_PASS)
    swe.write_text(json.dumps(line) + "\n")
    (read,) = read_tasks(swe)
    assert read.FAIL_TO_PASS == ["tests/test_x.py::test_x"]
    assert read.PASS_TO_PASS == ["tests/test_x.py::test_y"]
