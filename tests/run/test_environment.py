"""The project's environment (hero.run.environment): real `hero run`s against the scripted model
over real HTTP, a real project whose tests need a package hero does not have (installed by pip
from a wheel in the repository, offline), real bubblewrap sandboxes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import working_bwrap
from env_support import CHECK, FIXED, SETUP, make_project
from helpers import COMMIT, task_text
from run_support import policy, run_hero, worker_requests

from hero.cli import main
from hero.llm.scripted import ScriptedModel, call, text
from hero.run.environment import envs_dir, load

pytestmark = pytest.mark.slow


def fix_work(msg: str = "fix-sub") -> list:
    return [
        call("write_file", path="calc/__init__.py", content=FIXED),
        call("bash", command=COMMIT.format(msg=msg)),
        text("Fixed calc.sub."),
    ]


def state_of(home: Path, story: str) -> dict:
    return json.loads((home / "runs" / "state" / f"{story}.json").read_text())


def made(home: Path) -> list[Path]:
    return [p for p in envs_dir(home).iterdir() if p.is_dir() and load(p) is not None]


@pytest.fixture
def project(target_repo: Path) -> Path:
    working_bwrap()
    make_project(target_repo)
    return target_repo


def test_a_story_passes_in_the_projects_environment_and_the_next_reuses_it(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    # hero's own interpreter has no tinydep: the check can pass only in the project's environment
    assert subprocess.run([sys.executable, "-c", "import tinydep"], capture_output=True).returncode
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="bwrap")
    checks = [CHECK, "! python -c 'import hero'"]  # hero's packages are not there
    assert run_hero(home, write_story(home, "s1", verify=checks)) == 0

    first = state_of(home, "s1")
    assert first["status"] == "passed" and len(first["rounds"]) == 1
    assert first["setup"]["reused"] is False and first["setup"]["seconds"] > 0
    (env,) = made(home)
    assert first["setup"]["key"] == env.name
    assert "pip install" in Path(first["setup"]["log"]).read_text()
    # the baseline: the planted bug made the project's tests fail before any change
    base = {c["command"]: c for c in first["baseline"]["checks"]}
    assert base[CHECK]["passed"] is False and base[checks[1]]["passed"] is True
    assert "already fail" in task_text(worker_requests(model)[0])
    # nothing the setup made is on the branch
    files = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "hero/s1"],
        cwd=project,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert not [f for f in files if f.startswith(".venv") or "egg-info" in f or f.endswith(".pth")]

    # the second story: the environment is reused, its setup log says no setup ran
    assert run_hero(home, write_story(home, "s2", verify=checks)) == 0
    second = state_of(home, "s2")
    assert second["status"] == "passed" and second["setup"]["reused"] is True
    assert second["setup"]["key"] == first["setup"]["key"] and len(made(home)) == 1
    assert "no setup ran" in Path(second["setup"]["log"]).read_text()
    assert second["baseline"]["cached"] is True  # the same commit, environment and checks


def test_a_changed_lock_file_makes_a_new_environment(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="bwrap")
    assert run_hero(home, write_story(home, "s1", verify=[CHECK])) == 0
    (project / "requirements.txt").write_text("tinydep==1.0\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pin"],
        cwd=project,
        check=True,
    )
    assert run_hero(home, write_story(home, "s2", verify=[CHECK])) == 0
    assert state_of(home, "s2")["setup"]["reused"] is False
    assert len(made(home)) == 2


def test_a_failed_setup_ends_the_story_before_any_model_call(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=["echo installing", "exit 7"], sandbox="bwrap")
    assert run_hero(home, write_story(home, "s1", verify=[CHECK])) == 1
    state = state_of(home, "s1")
    assert state["status"] == "error" and state["rounds"] == []
    assert "setup failed: `exit 7` exited 7" in state["error"]
    log = home / "runs" / "s1" / "setup.log"
    assert "installing" in log.read_text() and str(log) in state["error"]
    assert model.requests == []
    assert made(home) == []  # nothing of a failed setup is kept
    assert [p.name for p in envs_dir(home).iterdir() if p.is_dir()] == []


def test_two_stories_at_once_make_one_environment(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=["sleep 1", *SETUP], sandbox="bwrap")
    stories = [write_story(home, f"s{n}", verify=[CHECK]) for n in (1, 2)]
    codes: dict[str, int] = {}
    procs = [
        subprocess.Popen([sys.executable, "-m", "hero", "run", str(s), "--home", str(home)])
        for s in stories
    ]
    for story, proc in zip(stories, procs, strict=True):
        codes[story.stem] = proc.wait(timeout=240)
    assert codes == {"s1": 0, "s2": 0}
    reused = sorted(state_of(home, s)["setup"]["reused"] for s in ("s1", "s2"))
    assert reused == [False, True] and len(made(home)) == 1


def test_without_a_sandbox_setup_runs_in_the_storys_repository(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    # the worker adds everything it sees: the environment's directories are not its to commit
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="none")
    assert run_hero(home, write_story(home, "s1", verify=[CHECK])) == 0
    state = state_of(home, "s1")
    assert state["status"] == "passed" and state["setup"]["path"] == ""
    files = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "hero/s1"],
        cwd=project,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert not [f for f in files if f.startswith(".venv")]


def test_a_story_adds_its_own_setup_to_the_homes(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel]
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP[:1], sandbox="bwrap")
    story = write_story(home, "s1", verify=[CHECK], setup=SETUP[1:])
    assert run_hero(home, story) == 0
    log = Path(state_of(home, "s1")["setup"]["log"]).read_text()
    assert log.index("-m venv") < log.index("pip install")


def test_the_json_result_and_events_carry_setup_and_baseline(
    project: Path, make_home, write_story, scripted: Callable[..., ScriptedModel], capsys
) -> None:
    model = scripted(policy(fix_work()))
    home = make_home(model, setup=SETUP, sandbox="bwrap")
    story = write_story(home, "s1", verify=[CHECK])
    assert main(["run", str(story), "--home", str(home), "--events"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds.index("setup") < kinds.index("baseline") < kinds.index("round_start")
    result = events[-1]["result"]
    assert result["setup"]["reused"] is False
    assert [c["passed"] for c in result["baseline"]["checks"]] == [False]


def test_a_story_waiting_for_anothers_setup_can_be_stopped(tmp_path: Path) -> None:
    from hero.errors import Interrupted
    from hero.run.environment import key_lock

    stop = threading.Event()
    with key_lock(tmp_path, "k", None):
        stop.set()
        with pytest.raises(Interrupted), key_lock(tmp_path, "k", stop):
            pass
