"""`hero bench` in the project's environment: a repository whose tests import ``tinydep``, a
module that only the home's ``setup`` makes (in a ``.venv`` of its own), which hero's own Python
cannot import. `bench make` and `bench run` agree on FAIL_TO_PASS there; the judge runs the
hidden tests in that environment, as the verifier runs a story's checks (with a sandbox and
without), so the configuration that writes the reference fix resolves and the idle one does
not; the same judge without the environment cannot import the module."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_support import COMMIT, RUNTESTS, make_home, overrides
from conftest import git
from helpers import is_review, step_of, task_text, verdict

from hero.cli import main
from hero.evals.results import read_results, results_path
from hero.evals.tasks import read_tasks
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.sandbox.bwrap import sandbox_python

BUGGY = "from tinydep import double\n\n\ndef quad(x):\n    return double(x) + 1  # bug\n"
FIXED = "from tinydep import double\n\n\ndef quad(x):\n    return double(double(x))\n"
#: The project's setup: a virtualenv-like folder whose python finds ``tinydep`` (made here).
SETUP = (
    "mkdir -p .venv/bin .venv/site && touch .venv/pyvenv.cfg && "
    "printf 'def double(x):\\n    return 2 * x\\n' > .venv/site/tinydep.py && "
    'printf \'#!/bin/sh\\nexport PYTHONPATH="$(dirname "$0")/../site"\\nexec '
    f'{sandbox_python()} "$@"\\n\' > .venv/bin/python && chmod +x .venv/bin/python'
)
TEST_COMMAND = "python runtests.py"


def _commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, body in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(body)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def handler(body: dict[str, Any]) -> Reply:
    if is_review(body):
        return verdict()
    assert "QUAD-BUG" in task_text(body)
    plan = (
        [call("write_file", path="calc.py", content=FIXED), call("bash", command=COMMIT)]
        if body["model"] == "fixer"
        else []
    )
    step = step_of(body)
    return plan[step] if step < len(plan) else text("Done.")


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["none", "auto"])
def test_make_and_run_judge_in_the_project_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sandbox: str
) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    _commit(
        repo,
        "initial",
        {
            ".gitignore": "__pycache__/\n",
            "calc.py": BUGGY,
            "runtests.py": RUNTESTS,
            "tests/test_base.py": "from tinydep import double\n\n\ndef test_double():\n"
            "    assert double(2) == 4\n",
        },
    )
    _commit(
        repo,
        "QUAD-BUG: quad(x) must be four times x",
        {
            "calc.py": FIXED,
            "tests/test_calc.py": "from calc import quad\n\n\ndef test_quad():\n"
            "    assert quad(3) == 12\n",
        },
    )
    # hero's own Python cannot import what the tests need
    missing = subprocess.run(
        [sys.executable, "-c", "import tinydep"], cwd=repo, capture_output=True, check=False
    )
    assert missing.returncode != 0
    model = ScriptedModel(handler).start()
    try:
        home = make_home(tmp_path, model, repo, sandbox=sandbox, setup=[SETUP])
        tasks_file = tmp_path / "tasks.jsonl"
        code = main(
            [
                "bench",
                "make",
                "--home",
                str(home),
                "--test-command",
                TEST_COMMAND,
                "-o",
                str(tasks_file),
            ]
        )
        err = capsys.readouterr().err
        assert code == 0, err
        (task,) = read_tasks(tasks_file)
        assert task.FAIL_TO_PASS == ["tests/test_calc.py::test_quad"]
        assert task.PASS_TO_PASS == ["tests/test_base.py::test_double"]

        out = tmp_path / "out"
        code = main(
            [
                "bench",
                "run",
                str(tasks_file),
                "--home",
                str(home),
                "--out",
                str(out),
                "-c",
                overrides(tmp_path, "A", "worker: {model: fixer}\n"),
                "-c",
                overrides(tmp_path, "B", "worker: {model: idle}\n"),
                "--test-command",
                TEST_COMMAND,
            ]
        )
        err = capsys.readouterr().err
        assert code == 0, err
    finally:
        model.stop()
    (a,) = read_results(results_path(out, "A"))
    (b,) = read_results(results_path(out, "B"))
    assert a.resolved and not b.resolved
    rows = {name: json.loads(results_path(out, name).read_text().splitlines()[0]) for name in "AB"}
    # the idle worker's tree: the environment served PASS_TO_PASS, the bug fails the new test
    assert rows["B"]["failed_tests"] == {"tests/test_calc.py::test_quad": "FAILED"}
    # bench run agrees with bench make: the same test fails at the base and passes at the fix
    assert rows["A"]["failed_tests"] == {}

    # the same judge, on the same fixed tree, without the environment: nothing imports
    from hero.config.loader import load_config
    from hero.evals.judge import judge

    story_id = rows["A"]["story_id"]
    source = out / "work" / "A" / story_id / "repo"
    final = git(source, "rev-parse", f"refs/heads/hero/{story_id}").strip()
    config = load_config(out / "homes" / "A")
    bare = dataclasses.replace(
        config,
        target_repo=source,
        project=dataclasses.replace(config.project, setup=()),
    )
    judged = judge(task, source, final, bare, tmp_path / "bare", test_command=TEST_COMMAND)
    assert not judged.resolved
    assert set(judged.failed) == {*task.FAIL_TO_PASS, *task.PASS_TO_PASS}, judged.output
    # no tinydep; in a sandbox, not even a `python` (hero's own is not shown there)
    assert re.search(r"No module named '?tinydep|python: not found", judged.output)
    with_env = dataclasses.replace(config, target_repo=source)
    judged = judge(task, source, final, with_env, tmp_path / "env", test_command=TEST_COMMAND)
    assert judged.resolved, judged.output

    # a worker that commits a link where the environment's folder goes, to a python of its
    # own that prints every test as passed: the environment's own folder is used, not the link
    git(source, "checkout", "-q", "-b", "liar", task.base_commit)
    fake = source / "fake" / "bin"
    fake.mkdir(parents=True)
    (fake / "python").write_text(
        "#!/bin/sh\necho 'PASSED tests/test_calc.py::test_quad'\n"
        "echo 'PASSED tests/test_base.py::test_double'\n"
    )
    (fake / "python").chmod(0o755)
    (source / ".venv").symlink_to("fake")
    git(source, "add", "-f", "fake", ".venv")
    git(source, "commit", "-q", "-m", "a python of my own")
    liar = git(source, "rev-parse", "HEAD").strip()
    judged = judge(task, source, liar, with_env, tmp_path / "liar", test_command=TEST_COMMAND)
    assert not judged.resolved and "tests/test_calc.py::test_quad" in judged.failed
    if sandbox == "auto" and shutil.which("bwrap"):  # the environment bound over the link
        assert judged.failed == {"tests/test_calc.py::test_quad": "FAILED"}, judged.output
